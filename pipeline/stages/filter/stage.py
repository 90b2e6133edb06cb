"""Stage `filter`: drop documents that are not clean prose in the profile's language (duplicates: stage `dedup`); cut
long documents into pieces.

Each document is judged by the rule set of its source (`rules`: source name -> rule set name, `default` for every
other source; `rule_sets`: name -> rules), as rules.py says: TurkuNLP's rules for the Wikipedia dump (the
`wikipedia` set), and for other corpora (the `web` set) FineWeb-2's chain: Gopher's repetition and quality rules,
FineWeb's quality rules and a language score, C4's line rules as options. A language's thresholds and stop words
are in its profile (stages.yaml) or FineWeb-2's config of it (`thresholds_from`, thresholds.py; docs/pipeline.md,
"Thresholds per language").

A corpus its publisher cleaned and deduplicated already gets the `published` set (PUBLISHED_RULES; pipeline/sources.py
gives it): the language check and long documents cut, nothing else.

Long documents (`long_documents`): `split` (the default) cuts a document over its set's max_tokens or max_sentences
at sentence boundaries into pieces under both, each a document whose record is the original's with "piece": 1,
2, ... (the same source, id and title); `drop` drops it whole, as TurkuNLP's filterdocs.py does. With `drop` the
output of a Wikipedia run is byte for byte what it was before rule sets and pieces existed.

Language identification: py3langid by default, langdetect on request (docs/performance.md compares their
accuracy and speed). Both are deterministic (langdetect is seeded). Each gets the first `langid_chars` characters
of the document: identification is the slowest check, and a Wikipedia lead is in the article's language. A
language the identifier does not know skips the check, with a warning and a note in the report.

Three passes over the parts: each document's measures (in parallel), stored as the stage's scores (SCORES: a
run whose settings differ from the last one's only in thresholds reads them instead, docs/pipeline.md, "Scores");
the decisions from them (in the main process, vectorised); then the kept documents are written (in parallel). The
output is the same for any number of workers; a part's sentences dropped by line rules or cut between pieces wait
in a scratch file (a byte a sentence) between the passes. `report.json`: documents, sentences
and tokens in, kept and dropped by reason, in all and per source (with its rule set), with examples (titles and
beginnings of dropped documents, dropped lines), and the long documents cut.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shutil
from pathlib import Path
from typing import Literal

import numpy as np

from wiki2bert_core.config import SettingError, check_minimum
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import MANIFEST, atomic_write, read_json, sha256_file, write_json
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.filter.rules import CODE, KEPT, REASONS, DocumentChecker, RuleSet, cut, decide, identifier
from pipeline.text_files import (PARAGRAPHS, PIECE, WIKIPEDIA_SOURCE, DocumentRecord, iter_documents_with_records,
                                 list_parts, records_path, write_document, write_record)

NEW_PIECE = -1  # a kept sentence's mark in a part's scratch file: the first of a piece after the first
DOCUMENTS, SENTENCES, TOKENS = range(3)  # the rows of a source's tally
EXAMPLE_CHARS = 200  # characters of a dropped document or line in report.json (its beginning and its end)

SCORES = "scores"  # the stage's folder of measures: one <part>.npz a part (_measure_part) and KEY_FILE
KEY_FILE = "key.json"  # what the scores were measured from (_measure_key)
SCORES_VERSION = 1  # raised when a measure changes, so that stored scores are measured again

# The web set: FineWeb-2's chain (fineweb-2-pipeline.py) with the generic thresholds of its filters (datatrove's
# defaults: Gopher's table A1, FineWeb's quality filter, FineWeb-2's character-duplicate share 0.1); a language's
# profile (stages.yaml) or filter.thresholds_from gives that language's. C4's line rules and TurkuNLP's rules are
# off but for the long-document caps, which cut documents into pieces instead of dropping them.
WEB_RULES = RuleSet(
    max_duplicate_line_share=0.3, max_duplicate_line_char_share=0.1, max_top_ngram_share={2: 0.2, 3: 0.18, 4: 0.16},
    max_duplicate_ngram_share={5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.1},
    min_line_punctuation_share=0.12, max_newline_ratio=0.3,
    min_avg_words=None, min_sentences=None, min_tokens=None, max_no_word_ratio=None, max_punct_ratio=None,
    max_upper_ratio=None, max_digit_ratio=None, max_foreign_ratio=None, min_words=None,
    min_doc_words=50, min_mean_word_length=3.0, max_mean_word_length=10.0, max_symbol_ratio=0.1,
    max_bullet_line_share=0.9, max_ellipsis_line_share=0.3, min_alpha_word_share=0.8, min_stop_words=2,
    min_language_score=0.9)
# The published set: a corpus its publisher cleaned and deduplicated (FineWeb-2, HPLT, CulturaX) is not cleaned
# again; only what our invariants need is checked: its language (langid) and long documents (cut, or dropped with
# long_documents: drop). Empty documents and those over corpus.max_document_bytes never reach the filter.
PUBLISHED_RULES = RuleSet(min_avg_words=None, min_sentences=None, min_tokens=None, max_no_word_ratio=None,
                          max_punct_ratio=None, max_upper_ratio=None, max_digit_ratio=None, max_foreign_ratio=None,
                          min_words=None)
C4_POLICY_PHRASES = ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies"]


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """The rule sets and what they need of the language (rules.py's docstring: every rule, in order)."""
    # source name -> the rule set its documents get; "default": every source not named (a corpus of a publisher,
    # corpus.sources.NAME.publisher, gets `published` unless named here)
    rules: dict[str, str] = dataclasses.field(
        default_factory=lambda: {WIKIPEDIA_SOURCE: "wikipedia", "default": "web"})
    # rule set name -> its rules (rules.py RuleSet: null or false turns a rule off)
    rule_sets: dict[str, RuleSet] = dataclasses.field(
        default_factory=lambda: {"wikipedia": RuleSet(), "web": WEB_RULES, "published": PUBLISHED_RULES})
    # a document over max_tokens or max_sentences: split: cut at sentence boundaries into pieces under both (records
    # get "piece": 1, 2, ...); drop: dropped whole, as TurkuNLP's filterdocs.py does
    long_documents: Literal["split", "drop"] = "split"
    word_chars: str | None = None  # the language's lowercase alphabet; null: any letter
    # letters of scripts written without spaces (Han, kana, Thai, ...) per word and token: the language's mean word
    # length, e.g. 1.7 for Japanese; null: every word is space-separated, as TurkuNLP counts them
    chars_per_word: float | None = None
    stop_words: list[str] = dataclasses.field(default_factory=list)  # the language's commonest words (min_stop_words)
    terminal_punctuation: str = ".!?\"'”’»"  # marks that end a sentence-like line (C4's, and closing quotes)
    # phrases (any case) of cookie and terms-of-use notices: a line holding one is dropped (drop_policy_lines)
    policy_phrases: list[str] = dataclasses.field(default_factory=lambda: list(C4_POLICY_PHRASES))
    langid: Literal["py3langid", "langdetect", "none"] = "py3langid"  # py3langid, langdetect (seeded) or none
    language: str | None = None  # the code langid must return; null: --lang
    langid_chars: int = 2000  # characters of each document given to langid
    examples: int = 5  # examples per source and reason in report.json
    # FineWeb-2's filter config of the language (configs/<iso3>_<script>.yml of huggingface/fineweb-2), or a folder
    # of them: its thresholds and stop words replace the web set's and the profile's (--set still wins);
    # thresholds.py lists what it sets. null: the profile's figures (stages.yaml), else generic ones with a warning
    thresholds_from: str | None = None

    def __post_init__(self):
        if "default" not in self.rules:
            raise SettingError("rules", 'needs a "default" entry: the rule set of every source not named')
        for source, name in self.rules.items():
            if name not in self.rule_sets:
                raise SettingError(f"rules.{source}", f"unknown rule set {name!r} (known: "
                                   f"{', '.join(sorted(self.rule_sets))})")
        for name, rule_set in self.rule_sets.items():
            rule_set.check_ranges(f"rule_sets.{name}.")
        check_minimum(self, 0, "examples")
        check_minimum(self, 1, "langid_chars")
        if self.chars_per_word is not None and not self.chars_per_word > 0:
            raise SettingError("chars_per_word", f"must be positive (or null), got {self.chars_per_word}")

    def __hash__(self):  # its dicts and lists are never changed: the worker cache keys on it (_checker)
        return hash(repr(self))

    def rule_set_name(self, source: str) -> str:
        return self.rules.get(source, self.rules["default"])

    def language_check(self, lang: str) -> tuple[bool, str]:
        """(whether a run of --lang `lang` checks its documents' language, what report.json says of it): off with
        langid none, and off, with the reason, when langid does not know the code the run asks of it."""
        language = self.language or lang
        if self.langid == "none":
            return False, "off"
        if language not in identifier(self.langid)[1]:
            return False, (f"skipped: {self.langid} does not know the language code {language!r}, so documents of "
                           f"{lang} pass whatever their language (set filter.language to a code it knows, or "
                           "filter.langid)")
        return True, f"{self.langid}: {language}"


def run(config: FilterConfig, ctx: StageContext) -> StageCounts:
    parts = list_parts(ctx.inputs["sentences"], ".txt")
    language = config.language or ctx.lang
    check_language, language_note = config.language_check(ctx.lang)
    if not check_language and config.langid != "none":  # langid does not know the code
        ctx.log.warning("filter: %s: language check %s", ctx.lang, language_note)
    scratch = ctx.scratch()
    scores = ctx.out_dir / SCORES
    scores.mkdir()
    key = _measure_key(config, language, check_language, parts)
    earlier = None if ctx.done_dir is None else ctx.done_dir / SCORES
    if earlier is not None and _read_key(earlier) == key and _intact(ctx.done_dir, parts):
        ctx.log.info("filter: deciding from the scores of the last run (%s): only thresholds changed", earlier)
        for path in parts:
            shutil.copyfile(earlier / f"{path.stem}.npz", scores / f"{path.stem}.npz")
        measured = "reused"
    else:
        tasks = [(path, config, language, check_language, scores) for path in parts]
        with progress(sum(p.stat().st_size for p in parts), "filter: measuring", unit="B", quiet=ctx.quiet) as bar:
            for path, _ in zip(parts, ctx.executor.map(_measure_part, tasks)):
                bar.update(path.stat().st_size)
        measured = "measured"
    write_json(scores / KEY_FILE, {"key": key})

    part_codes, tally = [], Tally(len(REASONS) + 1)
    for path in parts:
        checks = _decide_part(np.load(scores / f"{path.stem}.npz"), config, check_language, scratch, path)
        tally.add(checks)
        part_codes.append(checks.codes)
    documents = tally.total()[DOCUMENTS].astype(np.int64)
    if documents.sum() == 0:
        raise DataError(f"{ctx.inputs['sentences']}: no documents in {len(parts)} part file(s)")
    if documents[KEPT] == 0:
        raise DataError(f"filter: all {documents.sum():,} documents of language {ctx.lang} were dropped ("
                        + ", ".join(f"{REASONS[i - 1]} {n:,}" for i, n in enumerate(documents) if i and n)
                        + "): check --lang and the filter thresholds in stages.yaml")

    tasks = [(path, codes, scratch, ctx.out_dir, config.examples) for path, codes in zip(parts, part_codes)]
    # the first examples of each (source, code) as the parts come: every part's kept until the end took 160 MiB of
    # the main process at 1 GB (4,000 parts)
    line_examples: dict[tuple[str, int], list[dict]] = {}
    document_examples: dict[tuple[str, int], list[dict]] = {}
    with progress(len(parts), "filter: writing", unit="part", quiet=ctx.quiet) as bar:
        for part_lines, part_documents in ctx.executor.map(_write_part, tasks):
            _keep_first(line_examples, part_lines, config.examples)
            _keep_first(document_examples, part_documents, config.examples)
            bar.update(1)
    for examples in (line_examples, document_examples):  # dropped lines first, as the report lists them
        tally.add_examples(examples, config.examples)

    report = tally.report(config, language_note, _stop_word_check(config, tally.counts, ctx))
    report["scores"] = measured
    write_json(ctx.out_dir / "report.json", report)
    dropped = report["dropped"]
    ctx.log.info("filter: kept %d of %d documents (written as %d); dropped %s", documents[KEPT], documents.sum(),
                 report["documents"]["written"],
                 ", ".join(f"{reason} {d['documents']}" for reason, d in dropped.items() if d["documents"]) or "none")
    return StageCounts({"documents_in": report["documents"]["in"], "documents_kept": report["documents"]["kept"],
                        "documents_written": report["documents"]["written"],
                        "sentences_kept": report["sentences"]["kept"],
                        **{f"dropped_{reason}": d["documents"] for reason, d in dropped.items() if d["documents"]}},
                       sources={name: {"documents_kept": figures["documents"]["kept"],
                                       "documents_written": figures["documents"]["written"]}
                                for name, figures in report["sources"].items()})


def _measure_key(config: FilterConfig, language: str, check_language: bool, parts: list[Path]) -> str:
    """What the stored scores depend on: the input parts and every setting but the thresholds' values (a threshold
    turned on or off changes what is measured)."""
    rule_sets = {name: {"measures": sorted(rules.measures(config.long_documents, check_language)),
                        "switches": [f.name for f in dataclasses.fields(rules)
                                     if f.name.startswith("drop_") and getattr(rules, f.name)]}
                 for name, rules in config.rule_sets.items()}
    settings = {"version": SCORES_VERSION, "language": language, "check_language": check_language,
                "rules": config.rules, "rule_sets": rule_sets,
                **{name: getattr(config, name) for name in ("word_chars", "chars_per_word", "stop_words",
                                                             "terminal_punctuation", "policy_phrases", "langid",
                                                             "langid_chars")},
                "parts": _digests(parts)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def _digests(parts: list[Path]) -> list[str]:
    """The sha256 of each part and its records, as the sentences stage's manifest has them (read where it lacks
    one)."""
    outputs = read_json(parts[0].parent / MANIFEST, default={}).get("outputs", {})
    return [outputs[path.name]["sha256"] if path.name in outputs else sha256_file(path)
            for part in parts for path in (part, records_path(part))]


def _intact(done_dir: Path, parts: list[Path]) -> bool:
    """Whether the earlier run's scores of every part are there as its manifest recorded them (a damaged one is
    measured again, not read)."""
    outputs = read_json(done_dir / MANIFEST, default={}).get("outputs", {})
    names = [f"{SCORES}/{part.stem}.npz" for part in parts]
    return all(name in outputs and (done_dir / name).is_file()
               and sha256_file(done_dir / name) == outputs[name].get("sha256") for name in names)


def _read_key(scores: Path) -> str | None:
    try:
        return json.loads((scores / KEY_FILE).read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stop_word_check(config: FilterConfig, sources, ctx: StageContext) -> str:
    """What report.json says of the stop-word rule, once the sources are known; a warning where it was skipped."""
    needing = sorted({name for name in map(config.rule_set_name, sources)
                      if config.rule_sets[name].min_stop_words is not None})
    if not needing:
        return "off"
    if not config.stop_words:
        note = f"skipped: no stop words for this language (set filter.stop_words; rule sets {', '.join(needing)})"
        ctx.log.warning("filter: stop-word rule %s", note)
        return note
    return f"{len(config.stop_words)} stop words"


# --- pass 1: measures --------------------------------------------------------------------------------

@dataclasses.dataclass
class PartChecks:
    """What the decisions made of a part's documents."""
    codes: np.ndarray  # int8 per document: KEPT or its reason's code
    sources: list[str]  # the part's source names, in order of first appearance
    source_ids: np.ndarray  # per document: its source's index in `sources`
    sentences: np.ndarray  # per document: sentences left after its line rules (and cut sentences)
    tokens: np.ndarray  # per document: their tokens
    pieces: np.ndarray  # per document: the pieces it is written as, if kept
    line_drops: np.ndarray  # [source index, code, SENTENCES / TOKENS]: what line rules (and cuts) dropped


@functools.cache
def _checker(config: FilterConfig, language: str, check_language: bool) -> DocumentChecker:
    """The checker of this process: each worker process loads the character table and the language identifier once,
    on its first part (nothing is inherited from the parent, so any executor works)."""
    return DocumentChecker(config, language, check_language)


def _measure_part(task) -> None:
    """Measure a part's documents and store the scores (SCORES/<part>.npz): per document `m:<measure>` (NaN where
    its rule set does not look at it), `source` (an index into `sources`) and `sentences_in`; per sentence
    `sentence_tokens` and, where line rules dropped some, `line_codes`."""
    path, config, language, check_language, scores = task
    checker = _checker(config, language, check_language)
    sources: dict[str, tuple[int, RuleSet]] = {}  # source -> (its index in this part, its rules)
    rows, source_ids, sizes, sentence_tokens, line_codes = [], [], [], [], []
    for index, (record, sentences) in enumerate(iter_documents_with_records(path)):
        if record.source not in sources:
            sources[record.source] = len(sources), config.rule_sets[config.rule_set_name(record.source)]
        source, rules = sources[record.source]
        measured = checker.measure(sentences, rules, _paragraphs(record, len(sentences), path, index)
                                   if PARAGRAPHS in record.extra else None)
        rows.append(measured.values)
        source_ids.append(source)
        sizes.append(len(sentences))
        sentence_tokens.append(measured.sentence_tokens)
        line_codes.append(measured.sentence_codes)
    names = sorted({name for row in rows for name in row})
    arrays = {f"m:{name}": np.array([row.get(name, np.nan) for row in rows], np.float64) for name in names}
    if any(codes is not None for codes in line_codes):
        arrays["line_codes"] = np.concatenate([np.zeros(n, np.int8) if codes is None else codes
                                               for codes, n in zip(line_codes, sizes)])
    with atomic_write(Path(scores) / f"{path.stem}.npz", "wb") as out:
        np.savez(out, source=np.array(source_ids, np.int32), sources=np.array(list(sources), dtype=str),
                 sentences_in=np.array(sizes, np.int64),
                 sentence_tokens=np.concatenate(sentence_tokens) if sentence_tokens else np.zeros(0), **arrays)


def _decide_part(scores, config: FilterConfig, check_language: bool, scratch: Path, path: Path) -> PartChecks:
    """The decisions on a part's documents from its stored scores; the sentence marks of pass 2 (_marks_path) in
    `scratch`."""
    sources = [str(s) for s in scores["sources"]]
    source_ids, sizes = scores["source"], scores["sentences_in"]
    count = len(source_ids)
    values = {name[2:]: scores[name] for name in scores.files if name.startswith("m:")}
    codes = np.zeros(count, np.int8)
    for index, name in enumerate(sources):
        mine = source_ids == index
        rules = config.rule_sets[config.rule_set_name(name)]
        codes[mine] = decide({k: v[mine] for k, v in values.items()}, rules, config.long_documents, check_language)
    sentences = values.get("sentences", np.zeros(count)).astype(np.int64)
    tokens = values.get("tokens", np.zeros(count)).copy()
    pieces = np.ones(count, np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    sentence_tokens = scores["sentence_tokens"]
    marks = scores["line_codes"].copy() if "line_codes" in scores.files else None
    if config.long_documents == "split":
        for index, name in enumerate(sources):
            rules = config.rule_sets[config.rule_set_name(name)]
            over = (codes == KEPT) & (source_ids == index) & (
                (rules.max_tokens is not None) & (tokens > (rules.max_tokens or 0))
                | (rules.max_sentences is not None) & (sentences > (rules.max_sentences or 0)))
            for doc in np.flatnonzero(over):
                a, b = offsets[doc], offsets[doc + 1]
                doc_codes, starts = cut(sentence_tokens[a:b], None if marks is None else marks[a:b], rules)
                if doc_codes is not None:
                    if marks is None:
                        marks = np.zeros(len(sentence_tokens), np.int8)
                    kept = doc_codes == KEPT
                    sentences[doc], tokens[doc] = kept.sum(), sentence_tokens[a:b][kept].sum()
                    if not kept.any():
                        codes[doc] = CODE["max_tokens"]
                    marks[a:b] = doc_codes
                if codes[doc] == KEPT and len(starts) > 1:
                    if marks is None:
                        marks = np.zeros(len(sentence_tokens), np.int8)
                    marks[a + np.flatnonzero(marks[a:b] == KEPT)[starts[1:]]] = NEW_PIECE
                    pieces[doc] = len(starts)
    line_drops = np.zeros((len(sources), len(REASONS) + 1, 2))
    if marks is not None:
        dropped = np.flatnonzero(marks > KEPT)
        document = np.searchsorted(offsets, dropped, side="right") - 1
        np.add.at(line_drops, (source_ids[document], marks[dropped], 0), 1)
        np.add.at(line_drops, (source_ids[document], marks[dropped], 1), sentence_tokens[dropped])
    marks_path = _marks_path(scratch, path)
    marks_path.unlink(missing_ok=True)  # of an earlier run in the same scratch directory
    if marks is not None:
        np.save(marks_path, marks)
    return PartChecks(codes, sources, source_ids, sentences, tokens, pieces, line_drops)


def _paragraphs(record: DocumentRecord, sentences: int, path: Path, index: int) -> list[list[int]]:
    """The record's PARAGRAPHS, checked against its document."""
    layout = record.extra[PARAGRAPHS]
    if not (isinstance(layout, list) and all(isinstance(p, list) and p and all(
            isinstance(n, int) and n > 0 for n in p) for p in layout)
            and sum(n for p in layout for n in p) == sentences):
        raise DataError(f"{records_path(path)}: line {index + 1}: '{PARAGRAPHS}' does not describe the "
                        f"{sentences} sentences of its document (lists of sentences per line, one list a paragraph)")
    return layout


def _marks_path(scratch: Path, part: Path) -> Path:
    """A part's sentence marks between the passes: int8 per sentence, KEPT, the code of the line rule that dropped
    it, or NEW_PIECE; absent where every sentence of the part is kept in uncut documents."""
    return Path(scratch) / f"{part.stem}.marks.npy"


# --- pass 2: writing ------------------------------------------------------------------------------

Examples = dict[tuple[str, int], list[dict]]  # (source, code) -> examples


def _write_part(task) -> tuple[Examples, Examples]:
    """Write the kept documents of a part (cut into their pieces, without the sentences line rules dropped) and
    their records; return up to `examples` dropped lines and dropped documents per (source, code)."""
    path, codes, scratch, out_dir, examples = task
    lines: Examples = {}
    found: Examples = {}
    marks_path = _marks_path(scratch, path)
    marks = np.load(marks_path) if marks_path.exists() else None
    offset = 0
    text_path = Path(out_dir) / path.name
    with atomic_write(text_path) as out, atomic_write(records_path(text_path)) as records_out:
        for index, (record, sentences) in enumerate(iter_documents_with_records(path)):
            code = int(codes[index])
            own = None if marks is None else marks[offset:offset + len(sentences)]
            if own is not None:
                for i in np.flatnonzero(own > KEPT):
                    kept = lines.setdefault((record.source, int(own[i])), [])
                    if len(kept) < examples:
                        kept.append(_example(record, [sentences[i]]))
            if code == KEPT:
                if PARAGRAPHS in record.extra:
                    record = dataclasses.replace(record, extra={k: v for k, v in record.extra.items()
                                                                if k != PARAGRAPHS})
                pieces = [sentences] if own is None else _pieces(sentences, own)
                for number, piece in enumerate(pieces, 1):
                    write_document(out, piece)
                    write_record(records_out, record if len(pieces) == 1 else
                                 dataclasses.replace(record, extra={**record.extra, PIECE: number}))
            elif len(found.setdefault((record.source, code), [])) < examples:
                found[record.source, code].append(_example(record, sentences))
            offset += len(sentences)
    return lines, found


def _pieces(sentences: list[str], marks: np.ndarray) -> list[list[str]]:
    pieces: list[list[str]] = [[]]
    for sentence, mark in zip(sentences, marks):
        if mark == NEW_PIECE:
            pieces.append([])
        if mark <= KEPT:
            pieces[-1].append(sentence)
    return pieces


def _example(record: DocumentRecord, sentences: list[str]) -> dict:
    """A dropped document or line in report.json: the document's title (or source and id), its text's beginning and
    end (a line rule looks at a line's end)."""
    text = " ".join(sentences)
    if len(text) > EXAMPLE_CHARS:
        text = f"{text[:EXAMPLE_CHARS * 2 // 3]} … {text[-EXAMPLE_CHARS // 3:]}"
    return {"document": record.title or f"{record.source} {record.id}", "text": text}


# --- report -----------------------------------------------------------------------------------------

class Tally:
    """Documents, sentences and tokens per source and code, and examples per source and code, in part order."""

    def __init__(self, codes: int):
        self.codes = codes
        self.counts: dict[str, np.ndarray] = {}  # source -> [DOCUMENTS / SENTENCES / TOKENS, code]
        self.written: dict[str, list[int]] = {}  # source -> [documents written, documents cut, their pieces]
        self.examples: dict[str, dict[int, list[dict]]] = {}  # source -> code -> examples

    def _source(self, name: str) -> np.ndarray:
        if name not in self.counts:
            self.counts[name] = np.zeros((3, self.codes))
            self.written[name] = [0, 0, 0]
            self.examples[name] = {}
        return self.counts[name]

    def add(self, checks: PartChecks) -> None:
        """A part's decisions."""
        for index, name in enumerate(checks.sources):
            counts = self._source(name)
            mine = checks.source_ids == index
            codes = checks.codes[mine]
            counts[DOCUMENTS] += np.bincount(codes, minlength=self.codes)
            counts[SENTENCES] += np.bincount(codes, weights=checks.sentences[mine], minlength=self.codes)
            counts[TOKENS] += np.bincount(codes, weights=checks.tokens[mine], minlength=self.codes)
            counts[SENTENCES] += checks.line_drops[index, :, 0]
            counts[TOKENS] += checks.line_drops[index, :, 1]
            pieces = checks.pieces[mine][codes == KEPT]
            written = self.written[name]
            written[0] += int(pieces.sum())
            written[1] += int((pieces > 1).sum())
            written[2] += int(pieces[pieces > 1].sum())

    def add_examples(self, examples: dict[tuple[str, int], list[dict]], limit: int | None) -> None:
        for (name, code), found in examples.items():
            self._source(name)
            _keep_first(self.examples[name], {code: found}, limit)

    def total(self) -> np.ndarray:
        return sum(self.counts.values(), np.zeros((3, self.codes)))

    def report(self, config: FilterConfig, language_note: str, stop_word_note: str) -> dict:
        sources = {name: {"rule_set": config.rule_set_name(name),
                          **_summary(counts, self.written[name][0], self.examples[name], config.examples)}
                   for name, counts in self.counts.items()}
        examples: dict[int, list[dict]] = {}
        for name in self.counts:
            for code, found in self.examples[name].items():
                examples.setdefault(code, []).extend(found)
        written, cut, pieces = (sum(w[i] for w in self.written.values()) for i in range(3))
        return {**_summary(self.total(), written, examples, config.examples),
                "sources": sources,
                "long_documents": {"mode": config.long_documents, "documents_cut": cut, "pieces": pieces},
                "language_check": language_note, "stop_word_check": stop_word_note}


def _keep_first(kept: dict, examples: dict, limit: int | None) -> None:
    """Each key's examples appended to `kept`'s, up to `limit` a key (None: all)."""
    for key, found in examples.items():
        mine = kept.setdefault(key, [])
        mine.extend(found[:None if limit is None else limit - len(mine)])


def _summary(counts: np.ndarray, written: int, examples: dict[int, list[dict]], limit: int) -> dict:
    """The report's figures of `counts` ([DOCUMENTS / SENTENCES / TOKENS, code])."""
    totals = np.rint(counts).astype(np.int64)
    figures = {what: {"in": int(totals[row].sum()), "kept": int(totals[row, KEPT]),
                      "dropped": int(totals[row, 1:].sum())}
               for row, what in ((DOCUMENTS, "documents"), (SENTENCES, "sentences"), (TOKENS, "tokens"))}
    figures["documents"]["written"] = written
    figures["dropped"] = {REASONS[code - 1]: {"documents": int(totals[DOCUMENTS, code]),
                                              "sentences": int(totals[SENTENCES, code]),
                                              "tokens": int(totals[TOKENS, code]),
                                              "examples": examples.get(code, [])[:limit]}
                          for code in range(1, len(REASONS) + 1) if totals[SENTENCES, code] or totals[DOCUMENTS, code]}
    return figures


STAGE = Stage("filter", FilterConfig, run, inputs=("sentences",), tools=("py3langid", "langdetect", "numpy"))
