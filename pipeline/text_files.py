"""The text formats passed between pipeline stages.

Formats between stages:
- JSONL parts (`part-00000.jsonl`): one document per line, {"id", "title", "url", "text"} (+ "source" where the
  document does not come from the Wikipedia dump, RECORD_ID where a corpus record had an id of its own, and
  PUBLISHED where its corpus's publisher gave metadata of it).
- document text (`*.txt`): one sentence per line, one blank line after each document.
- document records (`*.docs.jsonl`, beside a document-text file of the same stem): one JSON object per document of
  that file, in the same order: where it came from ({"source", "id", "title"}, `DocumentRecord`; RECORD_ID) and
  what stages learnt of it on the way (e.g. "cluster_size"); PUBLISHED: what the corpus's publisher said of it
  ({"url", "language_score", "cluster_size"}, those it gave). The text file alone stays the plain format other tools
  read. `sentences` adds PARAGRAPHS to the records of documents not from the dump: [[2, 1], [3]] is a document of two
  paragraphs (runs of lines between blank lines), the first of two lines (2 sentences, then 1), the second of one
  line of 3 sentences. The filter reads it (its line rules) and leaves it out of the records it writes.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import IO, Iterable, Iterator

from wiki2bert_core.errors import DataError, not_utf8


def part_name(index: int, suffix: str) -> str:
    return f"part-{index:05d}{suffix}"


class PartWriter:
    """JSONL parts `<prefix>00000.jsonl`, `<prefix>00001.jsonl`, ... of `per_part` lines each (the extract stage's
    `part-00000.jsonl`; the corpus stage's `part-<source>-<task>-00000.jsonl`)."""

    def __init__(self, out_dir: Path, per_part: int, prefix: str = "part-"):
        self.out_dir, self.per_part, self.prefix = Path(out_dir), per_part, prefix
        self.parts = 0
        self.in_part = 0
        self.file = None

    def write(self, line: str) -> None:
        if self.file is None or self.in_part == self.per_part:
            self.close()
            self.file = open(self.out_dir / f"{self.prefix}{self.parts:05d}.jsonl", "w", encoding="utf-8",
                             newline="\n")
            self.parts += 1
            self.in_part = 0
        self.file.write(line)
        self.file.write("\n")
        self.in_part += 1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def list_parts(directory: Path, suffix: str) -> list[Path]:
    """The stage's part files in order; DataError if there are none."""
    parts = sorted(Path(directory).glob(f"part-*{suffix}"))
    if not parts:
        raise DataError(f"{directory}: no part-*{suffix} files (is the previous stage complete?)")
    return parts


def iter_jsonl(path: Path) -> Iterator[dict]:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise not_utf8(path, raw, e, line_no) from None
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {line_no}: invalid JSON ({e.msg})") from None


def iter_documents(path: Path) -> Iterator[list[str]]:
    """Documents of a sentence-per-line file: runs of non-empty lines separated by blank lines."""
    doc: list[str] = []
    for _, _, line in _stripped_lines(path):
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _stripped_lines(path: Path) -> Iterator[tuple[int, bytes, str]]:
    """(line number, raw bytes, decoded and stripped text) of each line; DataError naming the line if not UTF-8."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield line_no, raw, raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise not_utf8(path, raw, e, line_no) from None


def write_document(f: IO[str], sentences: Iterable[str]) -> None:
    f.write("\n".join(sentences))
    f.write("\n\n")


WIKIPEDIA_SOURCE = "wikipedia"  # the source name of the documents of the Wikipedia dump
PARAGRAPHS = "paragraphs"  # the record key of a document's lines and paragraphs (module docstring)
PIECE = "piece"  # the record key of a piece of a document the filter cut (1, 2, ...; absent: the whole document)
RECORD_ID = "record_id"  # the record key of a corpus document's own id (its id_field), which may repeat
PUBLISHED = "published"  # the record key of a published corpus's metadata of a document (corpus/readers.py)
RECORDS_SUFFIX = ".docs.jsonl"


def records_path(text_path: Path) -> Path:
    """The document records beside a document-text file: part-00000.txt -> part-00000.docs.jsonl."""
    text_path = Path(text_path)
    return text_path.with_name(text_path.name[:-len(text_path.suffix)] + RECORDS_SUFFIX)


@dataclasses.dataclass(frozen=True)
class DocumentRecord:
    """Where a document came from; `extra` holds what later stages add (kept in the file as top-level keys)."""
    source: str  # the corpus's name (WIKIPEDIA_SOURCE for the dump)
    id: str  # unique in its source: the dump's page id; a corpus document's "<file>:<line>" (or row)
    title: str = ""
    extra: dict = dataclasses.field(default_factory=dict)

    def identity(self) -> dict:
        """What names the document among all others: its source and id, and its piece where the filter cut it."""
        return {"source": self.source, "id": self.id, **({PIECE: self.extra[PIECE]} if PIECE in self.extra else {})}

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "id": self.id, "title": self.title, **self.extra},
                          ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_json(cls, obj: dict) -> "DocumentRecord":
        rest = {k: v for k, v in obj.items() if k not in ("source", "id", "title")}
        return cls(str(obj["source"]), str(obj["id"]), str(obj.get("title", "")), rest)


def write_record(f: IO[str], record: DocumentRecord) -> None:
    f.write(record.to_json())
    f.write("\n")


def iter_records(text_path: Path) -> Iterator[DocumentRecord]:
    """The records beside `text_path`, in document order; DataError naming the line if one is damaged."""
    path = records_path(text_path)
    if not path.exists():
        raise DataError(f"{path}: missing: the records of the documents of {Path(text_path).name} (made by a version "
                        "before document records? run the stage that wrote it again with --force)")
    for line_no, obj in enumerate(iter_jsonl(path), 1):
        if not (isinstance(obj, dict) and "source" in obj and "id" in obj):
            raise DataError(f"{path}: line {line_no}: expected an object with 'source' and 'id'")
        yield DocumentRecord.from_json(obj)


def iter_documents_with_records(text_path: Path) -> Iterator[tuple[DocumentRecord, list[str]]]:
    """(record, sentences) of each document of a document-text file and its records; DataError naming the records
    file if the two do not hold the same number of documents."""
    records = iter_records(text_path)
    count = 0
    for sentences in iter_documents(text_path):
        record = next(records, None)
        if record is None:
            raise DataError(f"{records_path(text_path)}: fewer records than {text_path.name} has documents "
                            f"({count}; is the stage that wrote it complete?)")
        count += 1
        yield record, sentences
    if next(records, None) is not None:
        raise DataError(f"{records_path(text_path)}: more records than {text_path.name} has documents ({count})")


@dataclasses.dataclass
class TextShape:
    """What a document-text file looks like: enough to tell text that would lose data silently."""
    lines: int = 0  # non-blank lines (sentences)
    documents: int = 0
    long_lines: int = 0  # lines longer than the limit given to text_shape
    longest: int = 0  # bytes of the longest line
    longest_at: int = 0  # its line number


def text_shape(path: Path, long_line_bytes: int) -> TextShape:
    """One streaming pass: sentences, documents and over-long lines; DataError naming the line if not UTF-8."""
    shape, in_document = TextShape(), False
    for line_no, raw, line in _stripped_lines(path):
        if not line:
            in_document = False
            continue
        shape.lines += 1
        shape.documents += not in_document
        in_document = True
        if len(raw) > long_line_bytes:
            shape.long_lines += 1
        if len(raw) > shape.longest:
            shape.longest, shape.longest_at = len(raw), line_no
    return shape


def check_text_shape(inputs: Path, files: list[Path], max_tokens: int, log: logging.Logger) -> None:
    """Before making instances from the user's text (`files`, given as `inputs`): DataError naming the input if
    there is no text at all; a warning with counts for text the instance algorithm would silently mangle: lines far
    longer than an instance (all but its first `max_tokens` tokens are dropped) and files without blank lines (one
    document, so no "random next" sentence can come from another document)."""
    long_line_bytes = 16 * max_tokens  # a BERT token averages 4-6 bytes: such a line holds 3 times max_tokens
    sentences = 0
    for path in files:
        shape = text_shape(path, long_line_bytes)
        sentences += shape.lines
        if shape.long_lines:
            log.warning("%s: %d line(s) longer than %d bytes (the longest: line %d, %d bytes); an instance holds at "
                        "most %d tokens, the rest of such a line is dropped: is the text one sentence per line?",
                        path, shape.long_lines, long_line_bytes, shape.longest_at, shape.longest, max_tokens)
        if shape.documents == 1 and shape.lines > 1:
            log.warning("%s: no blank line between its %d sentences, so the whole file is one document and no "
                        "random next sentence can come from another document: put a blank line after each document",
                        path, shape.lines)
    if files and not sentences:
        raise DataError(f"{inputs}: no text to make instances from (only blank lines)")
