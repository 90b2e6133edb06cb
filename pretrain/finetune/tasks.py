"""Reading a fine-tuning task from its files: HuLU-style JSON arrays, JSON Lines, CSV/TSV, CoNLL-U (Plus) and plain
CoNLL columns, its kind recognised from the data, an optional task file naming what cannot be recognised.

A task is a directory holding a train and a dev split (files or subdirectories named *train* and *dev*/*val*/
*devel*) and optionally a test split without labels (*test*), a single data file (then a held-out fraction makes the
dev split), or a task file (task.yaml) naming them. The test split's files are kept, to be written again with the
predicted labels. Formats and defaults: docs/finetune.md, "Task formats"."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import re
from pathlib import Path
from typing import Iterator, Literal

import numpy as np

from pretrain.finetune.metrics import ENTITY_METRICS, METRICS, SEVERAL_FIGURES
from pretrain.finetune.task import Example, Task, TestFile
from wiki2bert_core.config import layered, read_yaml
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.log import LOGGER_NAME

DataFormat = Literal["json", "jsonl", "csv", "tsv", "conllu", "conll"]
FORMAT_OF_SUFFIX = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
                    ".conllu": "conllu", ".conllup": "conllu", ".conll": "conll", ".iob": "conll", ".bio": "conll"}
TASK_FILE_NAMES = ("task.yaml", "task.yml")
SPLIT_WORDS = {"train": ("train", "training"), "dev": ("dev", "devel", "development", "val", "valid", "validation"),
               "test": ("test",)}

# fields recognised in JSON/CSV records, tried in this order: the first whose fields all occur in the first record
CHOICE_CONTEXT_FIELDS = ("premise", "question")  # HuCoPA, COPA: the context is the premise, then the question word
PAIR_FIELDS = (("premise", "hypothesis"), ("sentence1", "sentence2"), ("text_a", "text_b"), ("question", "sentence"))
SINGLE_FIELDS = ("Sent", "sentence", "text")
# CoNLL-U Plus columns: the default label column (the first of these present) and the word column
CONLLU_COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")  # no header
LABEL_COLUMNS = ("CONLL:NER", "NER", "UPOS")


@dataclasses.dataclass(frozen=True)
class TaskFile:
    """The optional task file (YAML): what the data alone cannot say. Every key may be left out."""
    name: str | None = None  # the task's name in tables and output paths (default: the directory's or file's stem)
    kind: Literal["single", "pair", "choice", "tokens"] | None = None  # default: recognised from the fields/format
    # default: from each file's extension (.json .jsonl .csv .tsv .conllu .conllup .conll)
    format: DataFormat | None = None
    # the training file(s) or directory, relative to the task file (default: found by name)
    train: str | list[str] | None = None
    dev: str | list[str] | None = None  # the dev file(s) or directory (default: found by name)
    # the test file(s) or directory: labels hidden (or ignored), predicted and written again in their own format
    # (default: found by name; none is fine)
    test: str | list[str] | None = None
    # with no dev split: this share of the training examples, drawn with the run's seed, is the dev split (a task
    # with a dev split ignores it)
    held_out_fraction: float | None = None
    id_field: str = "id"  # the example id's field (JSON/CSV); records without it are named file:line
    # single: [sentence]; pair: [first, second]; choice: the context's fields, joined by a space
    text_fields: list[str] | None = None
    label_field: str = "label"  # JSON/CSV: the label's field
    choice_fields: list[str] | None = None  # choice: the candidates' fields (default: choice1, choice2, ...)
    # tokens: the tag column, a name of `# global.columns` or a 0-based number (default: CONLL:NER, NER or UPOS;
    # plain CoNLL: the last)
    column: str | int | None = None
    word_column: str | int | None = None  # tokens: the word column (default: FORM; plain CoNLL: the first)
    # the label set in its order (choice: the label of each choice, in order); default: those seen, sorted
    labels: list[str] | None = None
    # names of metrics.METRICS, the main one first (default: by kind, docs/finetune.md "Metrics")
    metrics: list[str] | None = None


@dataclasses.dataclass
class _Split:
    examples: list[Example]
    files: list[Path]
    wheres: list[str]  # each example's "file:line" (JSON arrays: "file[index]"), for messages
    label_types: set[type] = dataclasses.field(default_factory=set)  # JSON/CSV: the types the label values had


def load_task(path: Path, held_out_fraction: float | None = None, seed: int = 0) -> Task:
    """The task at `path` (a directory, a data file or a task file), with its train and dev splits read and checked.
    held_out_fraction (over the task file's): for a task without a dev split, that share of the training examples,
    drawn with `seed` (stratified by label), is the dev split; a task with a dev split uses it and ignores the
    fraction (so one setting serves a run's tasks with and without). DataError for bad data, ConfigError for a bad
    task file or a path that names no task."""
    path = Path(path)
    settings, base = _settings(path)
    fraction = held_out_fraction if held_out_fraction is not None else settings.held_out_fraction
    if fraction is not None and not 0 < fraction < 1:
        raise ConfigError(f"{path}: held_out_fraction must be between 0 and 1, got {fraction}")
    train_files = _split_files(path, base, settings.train, "train")
    dev_files = _split_files(path, base, settings.dev, "dev")
    test_files = _split_files(path, base, settings.test, "test")
    if not train_files:
        raise ConfigError(f"{path}: no training split (a file or directory named *train*; or name it: train: in "
                          f"{TASK_FILE_NAMES[0]})")
    if not dev_files and fraction is None:
        raise ConfigError(f"{path}: no dev split (a file or directory named *dev*, *val* or *devel*); name one "
                          f"(dev: in {TASK_FILE_NAMES[0]}) or set held_out_fraction to hold out part of the "
                          "training examples")
    kind = settings.kind or _recognise_kind(train_files[0], settings)
    train = _read_split(train_files, kind, settings, base)
    dev = _read_split(dev_files, kind, settings, base) if dev_files else _hold_out(train, fraction, seed)
    labels = _label_set(train, dev, kind, settings)
    metrics = _metrics(path, kind, labels, settings)
    if any(m in ENTITY_METRICS for m in metrics):
        for split in (train, dev):
            _check_iob2(split)
    name = settings.name or (path.name if path.is_dir() else path.parent.name if path.suffix in (".yaml", ".yml")
                             else path.stem)
    test, filled = _read_test(test_files, kind, settings, base, len(labels), train.label_types)
    return Task(name=name, kind=kind, labels=labels, metrics=metrics, train=tuple(train.examples),
                dev=tuple(dev.examples), source=path, test=tuple(test), test_files=tuple(filled))


def _settings(path: Path) -> tuple[TaskFile, Path]:
    """The task file's settings (defaults without one) and the directory its paths are relative to."""
    if path.is_dir():
        task_file = next((path / n for n in TASK_FILE_NAMES if (path / n).is_file()), None)
        base = path
    elif path.is_file():
        task_file = path if path.suffix in (".yaml", ".yml") else None
        base = path.parent
    else:
        raise ConfigError(f"{path}: no such task file or directory")
    if task_file is None:
        return TaskFile(), base
    return layered(TaskFile, [(read_yaml(task_file), str(task_file))]), base


def _names(files: list[Path]) -> str:
    """A split's files for messages: up to three named, else their directory and count."""
    if len(files) > 3 and len({f.parent for f in files}) == 1:
        return f"{files[0].parent}/ ({len(files)} files)"
    return ", ".join(str(f) for f in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")


def _data_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in FORMAT_OF_SUFFIX)


def _split_files(path: Path, base: Path, named: str | list[str] | None, split: str) -> list[Path]:
    """The files of one split: those the task file names (a directory: all its data files), else the file or
    subdirectory of `base` whose name holds one of the split's words; a single data file is the training split."""
    if named is not None:
        files = []
        for name in [named] if isinstance(named, str) else named:
            p = base / name
            if not p.exists():
                raise ConfigError(f"{path}: {split}: {p} does not exist")
            files += _data_files(p) if p.is_dir() else [p]
        if not files:
            raise ConfigError(f"{path}: {split}: no data files ({', '.join(sorted(FORMAT_OF_SUFFIX))}) in {named}")
        return files
    if path.is_file() and path.suffix not in (".yaml", ".yml"):
        return [path] if split == "train" else []
    words = SPLIT_WORDS[split]
    found = [p for p in sorted(base.iterdir()) if (p.is_dir() or p.suffix.lower() in FORMAT_OF_SUFFIX)
             and any(w in words for w in re.split(r"[^a-z]+", p.stem.lower()))]
    if len(found) > 1:
        raise ConfigError(f"{base}: {len(found)} {split} splits ({_names(found)}); name the one to use "
                          f"({split}: in {TASK_FILE_NAMES[0]})")
    if found and found[0].is_dir():
        files = _data_files(found[0])
        if not files:
            raise DataError(f"{found[0]}: no data files ({', '.join(sorted(FORMAT_OF_SUFFIX))})")
        return files
    return found


def _format(file: Path, settings: TaskFile) -> str:
    fmt = settings.format or FORMAT_OF_SUFFIX.get(file.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{file}: unknown data format (extensions: {', '.join(sorted(FORMAT_OF_SUFFIX))}); "
                          "set format: in the task file")
    return fmt


def _text(file: Path) -> str:
    """The file's text: UTF-8, a byte order mark dropped; DataError if not UTF-8 or empty."""
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{file}: not UTF-8 (byte {e.start})") from None
    if not text.strip():
        raise DataError(f"{file}: empty file")
    return text


def _lines(text: str) -> list[str]:
    """Lines end at \\n only (str.splitlines also splits at U+2028, U+0085 and others, which JSON strings and words
    may hold)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


# ---- records: JSON arrays, JSON Lines, CSV/TSV (the sentence kinds)

def _records(file: Path, fmt: str, text: str) -> Iterator[tuple[str, dict]]:
    """(where, record) for each record of the JSON array, JSON Lines or CSV/TSV `text` of `file`; where is file:line
    (JSON arrays: file[index])."""
    if _is_json_array(fmt, text):
        data = _json(file, text)
        if not isinstance(data, list):
            raise DataError(f"{file}: expected a JSON array of objects, got {type(data).__name__}")
        for i, record in enumerate(data):
            if not isinstance(record, dict):
                raise DataError(f"{file}: element {i}: expected an object, got {json.dumps(record)[:60]}")
            yield f"{file}[{i}]", record
    elif fmt in ("json", "jsonl"):
        for number, line in enumerate(_lines(text), 1):
            if line.strip():
                record = _json(file, line, number)
                if not isinstance(record, dict):
                    raise DataError(f"{file}:{number}: expected a JSON object, got {line[:60]}")
                yield f"{file}:{number}", record
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ",")
        width = len(reader.fieldnames or ())
        for record in reader:
            if None in record or None in record.values():
                raise DataError(f"{file}:{reader.line_num}: {'more' if None in record else 'fewer'} columns than the "
                                f"{width} of the header")
            yield f"{file}:{reader.line_num}", record


def _is_json_array(fmt: str, text: str) -> bool:
    return fmt == "json" and text.lstrip().startswith("[")


def _json(file: Path, text: str, line: int = 0):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f"{file}:{line}" if line else f"{file}: line {e.lineno} column {e.colno}"
        # an unterminated string runs to the end of the text: also a cut file
        ends_early = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        cut = "; the file ends early (truncated?)" if ends_early else ""
        raise DataError(f"{at}: not valid JSON ({e.msg}){cut}") from None


def _recognise_kind(file: Path, settings: TaskFile) -> str:
    """The kind from the format and the fields of the first record: choiceN fields -> choice, a known pair of
    fields -> pair, a known sentence field -> single; text_fields given: 1 -> single, 2 -> pair."""
    fmt = _format(file, settings)
    if fmt in ("conllu", "conll"):
        return "tokens"
    if settings.choice_fields:
        return "choice"
    if settings.text_fields:
        if len(settings.text_fields) in (1, 2):
            return ("single", "pair")[len(settings.text_fields) - 1]
        raise ConfigError(f"{file}: text_fields: {len(settings.text_fields)} fields; set kind: (choice) or name "
                          "one (single) or two (pair)")
    where, first = next(_records(file, fmt, _text(file)), (None, None))
    if first is None:
        raise DataError(f"{file}: no examples")
    if _choice_fields(first):
        return "choice"
    if any(a in first and b in first for a, b in PAIR_FIELDS):
        return "pair"
    if any(f in first for f in SINGLE_FIELDS):
        return "single"
    raise ConfigError(f"{where}: cannot tell the task kind from the fields ({', '.join(first)}); name them in a "
                      "task file (text_fields, label_field, kind)")


def _choice_fields(record: dict) -> list[str]:
    fields = []
    while f"choice{len(fields) + 1}" in record:
        fields.append(f"choice{len(fields) + 1}")
    return fields if len(fields) >= 2 else []


def _fields(kind: str, record: dict, where: str, settings: TaskFile) -> tuple[list[str], list[str]]:
    """(text fields, choice fields) for records like `record`."""
    if kind == "choice":
        choices = settings.choice_fields or _choice_fields(record)
        texts = settings.text_fields or [f for f in CHOICE_CONTEXT_FIELDS if f in record]
        if not choices or not texts:
            raise ConfigError(f"{where}: choice task: no {'choice1, choice2' if not choices else 'premise'} fields "
                              f"(fields: {', '.join(record)}); name them (choice_fields, text_fields) in a task file")
        return texts, choices
    if settings.text_fields:
        return settings.text_fields, []
    if kind == "pair":
        pair = next((list(p) for p in PAIR_FIELDS if p[0] in record and p[1] in record), None)
        if pair is None:
            raise ConfigError(f"{where}: pair task: none of the field pairs "
                              f"{', '.join('/'.join(p) for p in PAIR_FIELDS)} (fields: {', '.join(record)}); name "
                              "them (text_fields) in a task file")
        return pair, []
    single = next((f for f in SINGLE_FIELDS if f in record), None)
    if single is None:
        raise ConfigError(f"{where}: none of the sentence fields {', '.join(SINGLE_FIELDS)} (fields: "
                          f"{', '.join(record)}); name it (text_fields) in a task file")
    return [single], []


def _field(record: dict, name: str, where: str, what: str) -> str:
    if name not in record:
        raise DataError(f"{where}: no field '{name}' (the {what}; fields: {', '.join(map(str, record))})")
    value = record[name]
    if isinstance(value, bool):
        return "true" if value else "false"
    if what == "label" and isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' (the {what}) is {json.dumps(value)[:40]}, not a string")
    if what != "label" and not value.strip():
        raise DataError(f"{where}: field '{name}' (the {what}) is empty; every example needs its text (remove the "
                        "record, or name the field that holds it: text_fields in a task file)")
    return value


def _sentence_examples(file: Path, text: str, kind: str, settings: TaskFile, base: Path,
                       labelled: bool = True) -> Iterator[tuple[Example, str, dict]]:
    """(example, where, its record) of each record of `file`, whose text is `text`; without `labelled` (the test
    split) the label is not read."""
    fields = None
    for where, record in _records(file, _format(file, settings), text):
        if fields is None:
            fields = _fields(kind, record, where, settings)
        text_fields, choice_fields = fields
        texts = tuple(_field(record, f, where, "text") for f in text_fields)
        if kind == "choice":
            texts = (" ".join(texts),)
        label = _field(record, settings.label_field, where, "label") if labelled else None
        id_ = str(record[settings.id_field]) if settings.id_field in record else _relative(where, base)
        yield Example(id=id_, texts=texts, label=label,
                      choices=tuple(_field(record, f, where, "choice") for f in choice_fields)), where, record


def _relative(where: str, base: Path) -> str:
    prefix = f"{base}/"
    return where[len(prefix):] if where.startswith(prefix) else where


# ---- CoNLL-U (Plus) and plain CoNLL columns (tokens)

def _token_examples(file: Path, lines: list[str], settings: TaskFile, base: Path,
                    labelled: bool = True) -> Iterator[tuple[Example, str, tuple[int, ...], int]]:
    """One example a sentence of `file`, whose lines are `lines`: the words and tags of the chosen columns (without
    `labelled`, the test split: the words only); with where it starts, the index in `lines` of each word's line and
    the tag column. CoNLL-U (Plus): tab-separated, the columns of `# global.columns` (else CoNLL-U's ten), other
    lines starting with # are comments, multiword-token and empty-node lines (IDs 1-2, 1.1) skipped. Plain CoNLL:
    whitespace-separated, -DOCSTART- lines skipped."""
    fmt = _format(file, settings)
    names: tuple[str, ...] = ()
    if fmt == "conllu":
        header = re.match(r"#\s*global\.columns\s*=\s*(.+)", lines[0])
        names = tuple(header.group(1).split()) if header else CONLLU_COLUMNS
    word_at = label_at = width = None
    words: list[str] = []
    tags: list[str] = []
    at: list[int] = []
    start = 0
    for number, line in enumerate([*lines, ""], 1):
        columns = _columns(line, fmt)
        if fmt == "conllu" and line.startswith("#") and len(columns) != len(names):
            continue
        if not columns or (fmt == "conll" and columns[0] == "-DOCSTART-"):
            if words:
                where = f"{file}:{start}"
                yield (Example(id=_relative(where, base), words=tuple(words), tags=tuple(tags) if labelled else ()),
                       where, tuple(at), label_at)
                words, tags, at = [], [], []
            continue
        if width is None:
            width = len(names) if names else len(columns)
            word_at = _column(settings.word_column, names, width, file, "FORM", 0, "word_column")
            label_at = _column(settings.column, names, width, file, next((c for c in LABEL_COLUMNS if c in names),
                                                                         None), width - 1, "column")
            if label_at == word_at:
                raise DataError(f"{file}: the tag column is the word column ({word_at}, of {width}); a token task's "
                                "files need a tag column beside the words (a test file too, with any values)")
        if len(columns) != width:
            raise DataError(f"{file}:{number}: {len(columns)} columns where "
                            f"{'the header names' if names else 'the first line has'} {width}"
                            f"{' (the file ends early: truncated?)' if number == len(lines) else ''}")
        if names and names[0] == "ID" and not columns[0].isdigit():
            continue
        if not columns[word_at].strip():
            raise DataError(f"{file}:{number}: the word (column {word_at}) is empty; every token needs its word")
        if not words:
            start = number
        words.append(columns[word_at])
        tags.append(columns[label_at])
        at.append(number - 1)


def _columns(line: str, fmt: str) -> list[str]:
    """A line's columns; none for a blank line. Plain CoNLL: spaces and tabs only separate columns (str.split
    would also split at U+2028, U+00A0, ...)."""
    if not line.strip(" \t"):
        return []
    return line.split("\t") if fmt == "conllu" else re.split(r"[ \t]+", line.strip(" \t"))


def _column(chosen: str | int | None, names: tuple[str, ...], width: int, file: Path, default_name: str | None,
            default_index: int, key: str) -> int:
    """The 0-based index of a column named or numbered in the task file, else of the default."""
    if chosen is None:
        if names:
            if default_name in names:
                return names.index(default_name)
            raise DataError(f"{file}: no {'label' if key == 'column' else 'word'} column "
                            f"{default_name or ' or '.join(LABEL_COLUMNS)} (columns: {' '.join(names)}); name one "
                            f"({key}:) in a task file")
        return default_index
    if isinstance(chosen, int):
        if -width <= chosen < width:
            return chosen % width
        raise DataError(f"{file}: {key}: {chosen}: there is no such column (the file has {width}, numbered from 0)")
    if chosen not in names:
        raise DataError(f"{file}: {key}: no column '{chosen}' (columns: "
                        f"{' '.join(names) if names else f'{width}, unnamed: give a number from 0'})")
    return names.index(chosen)


# ---- splits, labels, metrics

def _check_format(file: Path, kind: str, settings: TaskFile) -> str:
    fmt = _format(file, settings)
    if (fmt in ("conllu", "conll")) != (kind == "tokens"):
        raise ConfigError(f"{file}: a {kind} task cannot be read from {fmt} data (tokens: conllu or conll; the "
                          "others: json, jsonl, csv or tsv)")
    return fmt


def _read_split(files: list[Path], kind: str, settings: TaskFile, base: Path) -> _Split:
    split = _Split([], files, [])
    for file in files:
        _check_format(file, kind, settings)
        if kind == "tokens":
            for example, where, _, _ in _token_examples(file, _lines(_text(file)), settings, base):
                split.examples.append(example)
                split.wheres.append(where)
        else:
            for example, where, record in _sentence_examples(file, _text(file), kind, settings, base):
                split.examples.append(example)
                split.wheres.append(where)
                split.label_types.add(type(record[settings.label_field]))
    if not split.examples:
        raise DataError(f"{_names(files)}: no examples")
    return split


def _read_test(files: list[Path], kind: str, settings: TaskFile, base: Path, choices: int,
               label_types: set[type]) -> tuple[list[Example], list[TestFile]]:
    """The test split's examples (their labels, where the files have them, are not read) and its files, each kept
    to be filled in with predictions: the same records with the label field set (added where missing), as a JSON
    array (indented as HuLU's), JSON Lines or CSV/TSV, labels of the type the training labels had (JSON numbers,
    booleans or strings); CoNLL files line for line with the tag column replaced."""
    examples: list[Example] = []
    filled: list[TestFile] = []
    for file in files:
        fmt = _check_format(file, kind, settings)
        name = str(file.relative_to(base)) if base in file.parents else file.name
        text = _text(file)
        if kind == "tokens":
            lines = _lines(text)
            read = list(_token_examples(file, lines, settings, base, labelled=False))
            fill = _conll_filler(lines, fmt, [(at, label_at) for _, _, at, label_at in read])
        else:
            read = list(_sentence_examples(file, text, kind, settings, base, labelled=False))
            fill = _records_filler(fmt, _is_json_array(fmt, text), [record for _, _, record in read],
                                   settings.label_field, label_types)
        for example, where, *_ in read:
            if kind == "choice" and len(example.choices) != choices:
                raise DataError(f"{where}: {len(example.choices)} choices where the task has {choices}: every "
                                "example needs one choice per label")
        if not read:
            raise DataError(f"{file}: no examples")
        examples += [example for example, *_ in read]
        filled.append(TestFile(name, len(read), fill))
    return examples, filled


def _records_filler(fmt: str, array: bool, records: list[dict], label_field: str, label_types: set[type]):
    typed = {frozenset({int}): int, frozenset({bool}): lambda label: label == "true"}.get(frozenset(label_types), str)

    def fill(predicted) -> str:
        rows = [{**record, label_field: typed(label)} for record, label in zip(records, predicted, strict=True)]
        if fmt in ("csv", "tsv"):
            text = io.StringIO(newline="")
            writer = csv.DictWriter(text, list(rows[0]), delimiter="\t" if fmt == "tsv" else ",", lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            return text.getvalue()
        if array:
            return json.dumps(rows, ensure_ascii=False, indent=4) + "\n"
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return fill


def _conll_filler(lines: list[str], fmt: str, sentences: list[tuple[tuple[int, ...], int]]):
    """Each sentence: the index of each word's line and the tag column."""
    def fill(predicted) -> str:
        out = list(lines)
        for (at, label_at), tags in zip(sentences, predicted, strict=True):
            for i, tag in zip(at, tags, strict=True):
                columns = _columns(out[i], fmt)
                columns[label_at] = tag
                out[i] = ("\t" if fmt == "conllu" or "\t" in out[i] else " ").join(columns)
        return "\n".join(out)
    return fill


def _hold_out(train: _Split, fraction: float, seed: int) -> _Split:
    """Move `fraction` of the training examples (of each label; tokens: of the sentences), drawn with `seed`, to a
    new dev split; each label keeps at least one training example. Both keep the file order."""
    rng = np.random.default_rng(seed)
    groups: dict[str | None, list[int]] = {}
    for i, example in enumerate(train.examples):
        groups.setdefault(example.label, []).append(i)
    held: list[int] = []
    for key in sorted(groups, key=str):
        members = groups[key]
        take = min(round(len(members) * fraction), len(members) - 1)
        held += [members[j] for j in rng.permutation(len(members))[:take]]
    if not held:
        raise ConfigError(f"{_names(train.files)}: held_out_fraction={fraction} of {len(train.examples)} examples "
                        "leaves no dev example")
    held = sorted(held)
    kept = sorted(set(range(len(train.examples))) - set(held))
    dev = _Split([train.examples[i] for i in held], train.files, [train.wheres[i] for i in held])
    train.examples, train.wheres = [train.examples[i] for i in kept], [train.wheres[i] for i in kept]
    return dev


def _label_values(split: _Split, kind: str) -> Iterator[tuple[str, str, int | None]]:
    """(label, where, word) of each example (tokens: of each word, numbered in its sentence)."""
    for example, where in zip(split.examples, split.wheres):
        if kind == "tokens":
            yield from ((tag, where, i) for i, tag in enumerate(example.tags))
        else:
            yield example.label, where, None


def _label_set(train: _Split, dev: _Split, kind: str, settings: TaskFile) -> tuple[str, ...]:
    """The task file's labels, else: choice: the choices' numbers; the others: those seen in training, sorted
    (numbers as numbers; tokens: O first, then by type). DataError for a dev label never seen in training, or one
    the task file's list lacks."""
    seen = {label for label, _, _ in _label_values(train, kind)}
    for label, where, word in _label_values(dev, kind):
        if label not in seen:
            raise DataError(f"{where if word is None else _word_where(where, word)}: label '{label}' never occurs in the training split "
                            f"({_names(train.files)})")
    if settings.labels is not None:
        labels = tuple(settings.labels)
        missing = sorted(seen - set(labels))
        if missing:
            raise DataError(f"{_names(train.files)}: labels {', '.join(map(repr, missing))} are not in the task "
                            f"file's labels ({', '.join(labels)})")
    elif kind == "choice":
        labels = _choice_numbers(train, seen)
    else:
        numeric = all(re.fullmatch(r"-?\d+", label) for label in seen)
        order = (lambda s: (s != "O", s[2:], s)) if kind == "tokens" else (lambda s: (int(s) if numeric else 0, s))
        labels = tuple(sorted(seen, key=order))
    if kind == "choice":
        for split in (train, dev):
            for example, where in zip(split.examples, split.wheres):
                if len(example.choices) != len(labels):
                    raise DataError(f"{where}: {len(example.choices)} choices where the task has {len(labels)} "
                                    f"({', '.join(labels)}): every example needs one choice per label")
    return labels


def _choice_numbers(train: _Split, seen: set[str]) -> tuple[str, ...]:
    """A choice task's labels number its N choices: 1..N (HuCoPA's "1", "2"), or 0..N-1 where a 0 is seen."""
    n = len(train.examples[0].choices)
    for first in (0, 1):
        numbers = tuple(str(i) for i in range(first, first + n))
        if seen <= set(numbers) and (first == 1 or "0" in seen):
            return numbers
    raise DataError(f"{_names(train.files)}: choice labels {', '.join(sorted(seen))} are not the numbers of the "
                    f"{n} choices (1..{n} or 0..{n - 1}): list the label of each choice (labels:) in a task file")


def _metrics(path: Path, kind: str, labels: tuple[str, ...], settings: TaskFile) -> tuple[str, ...]:
    """The task file's metrics, else by kind: choice: accuracy; two labels: mcc (HuLU's figure for HuCOLA, and one
    that a majority guess cannot raise), accuracy, macro-F1, per class; more: accuracy, macro-F1, per class; tags
    that look like IOB (O, B-X, I-X): entity-level F1 (precision, recall, per type) and token accuracy; other tags:
    token accuracy, macro-F1, per tag."""
    if settings.metrics is not None:
        metrics = tuple(settings.metrics)
        unknown = [m for m in metrics if m not in METRICS]
        if unknown or not metrics:
            raise ConfigError(f"{path}: metrics: {', '.join(unknown) or 'empty'}: known metrics are "
                              f"{', '.join(METRICS)}")
        if metrics[0] in SEVERAL_FIGURES:
            raise ConfigError(f"{path}: metrics: the first (main) metric must be one figure, not {metrics[0]}")
        if kind != "tokens" and any(m in ENTITY_METRICS for m in metrics):
            raise ConfigError(f"{path}: metrics: entity metrics need a token task, this one is {kind}")
        return metrics
    if kind == "choice":
        return ("accuracy",)
    if kind == "tokens":
        if all(t == "O" or t[:2] in ("B-", "I-") for t in labels):
            return ("entity_f1", "entity_precision", "entity_recall", "entity_per_type", "accuracy")
        return ("accuracy", "macro_f1", "per_class")
    if len(labels) == 2:
        return ("mcc", "accuracy", "macro_f1", "per_class")
    return ("accuracy", "macro_f1", "per_class")


def _check_iob2(split: _Split) -> None:
    """Entity metrics read tags as IOB2: O, B-type, I-type, an entity starting with B-. A column whose entities
    mostly start with I- (IOB1, or IO) is refused; a few stray ones in an IOB2 column (NerKor has 11 in about
    17,000 entities) are read as entity starts, as conlleval and seqeval read them, with a warning."""
    stray: list[str] = []
    starts = 0
    for example, where in zip(split.examples, split.wheres):
        previous = "O"
        for i, tag in enumerate(example.tags):
            if not (tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)):
                raise DataError(f"{_word_where(where, i)}: tag '{tag}' is not IOB2 (O, B-type, I-type), which the "
                                "entity metrics need; choose another column (column:) or metrics (metrics: "
                                "[accuracy]) in a task file")
            if tag.startswith("B-"):
                starts += 1
            elif tag.startswith("I-") and previous[2:] != tag[2:]:
                stray.append(f"{_word_where(where, i)}: '{tag}' after '{previous}'")
            previous = tag
    if not stray:
        return
    if len(stray) > starts:
        raise DataError(f"{stray[0]}: not IOB2 tags: {len(stray)} entities start with I- and {starts} with B- (IOB1 "
                        "or IO tags?); the entity metrics need IOB2: convert the column, or choose metrics: "
                        "[accuracy] in a task file")
    logging.getLogger(LOGGER_NAME).warning(
        f"{_names(split.files)}: {len(stray)} of {len(stray) + starts} entities start with I- instead of B- (first: "
        f"{stray[0]}); each is read as the start of an entity, as conlleval and seqeval do")


def _word_where(where: str, i: int) -> str:
    """Where word i of a sentence that starts at `where` (file:line) is: its lines are consecutive."""
    file, _, line = where.rpartition(":")
    return f"{file}:{int(line) + i}"
