"""Stage `filter`: drop documents that are not clean prose in the profile's language (duplicates: stage `dedup`); cut
long documents into pieces.

Each document is judged by the rule set of its source (`rules`: source name -> rule set name, `default` for every
other source; `rule_sets`: name -> rules), as rules.py says: TurkuNLP's rules for the Wikipedia dump (the
`wikipedia` set), and for other corpora (the `web` set) Gopher's repetition rules, C4's line rules, word length,
stop words and a language score besides. A language's thresholds, stop words and notice phrases are in its profile
(stages.yaml; docs/pipeline.md, "Cleaning web text").

Long documents (`long_documents`): `split` (the default) cuts a document over its set's max_tokens or max_sentences
at sentence boundaries into pieces under both, each a document whose record is the original's with "piece": 1,
2, ... (the same source, id and title); `drop` drops it whole, as TurkuNLP's filterdocs.py does. With `drop` the
output of a Wikipedia run is byte for byte what it was before rule sets and pieces existed.

Language identification: py3langid by default, langdetect on request (docs/performance.md compares their
accuracy and speed). Both are deterministic (langdetect is seeded). Each gets the first `langid_chars` characters
of the document: identification is the slowest check, and a Wikipedia lead is in the article's language. A
language the identifier does not know skips the check, with a warning and a note in the report.

Two passes over the parts, both parallel: the checks per part, then the kept documents are written. The output is
the same for any number of workers; a part's sentences dropped by line rules or cut between pieces wait in a scratch
file (a byte a sentence) between the passes. `report.json`: documents, sentences
and tokens in, kept and dropped by reason, in all and per source (with its rule set), with examples (titles and
beginnings of dropped documents, dropped lines), and the long documents cut.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Literal

import numpy as np

from wiki2bert_core.config import SettingError, check_minimum
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write, write_json
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.filter.rules import CODE, KEPT, REASONS, DocumentChecker, RuleSet, identifier
from pipeline.text_files import (PARAGRAPHS, PIECE, WIKIPEDIA_SOURCE, DocumentRecord, iter_documents_with_records,
                                 list_parts, records_path, write_document, write_record)

NEW_PIECE = -1  # a kept sentence's mark in a part's scratch file: the first of a piece after the first
DOCUMENTS, SENTENCES, TOKENS = range(3)  # the rows of a source's tally
EXAMPLE_CHARS = 200  # characters of a dropped document or line in report.json (its beginning and its end)

# The web set: Gopher's repetition thresholds (Rae et al. 2021, table A1), all of C4's line rules, Gopher's word
# length and stop-word counts, TurkuNLP's other rules; a language's profile adjusts them (stages.yaml).
WEB_RULES = RuleSet(
    max_duplicate_paragraph_share=0.3, max_duplicate_paragraph_char_share=0.2, max_duplicate_line_share=0.3,
    max_duplicate_line_char_share=0.2, max_top_ngram_share={2: 0.2, 3: 0.18, 4: 0.16},
    max_duplicate_ngram_share={5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.1},
    drop_lines_without_terminal_punctuation=True, drop_lorem_ipsum=True, drop_javascript_lines=True,
    drop_curly_bracket=True, drop_policy_lines=True,
    min_mean_word_length=3.0, max_mean_word_length=10.0, min_stop_words=2, min_language_score=0.9)
C4_POLICY_PHRASES = ["terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies"]


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """The rule sets and what they need of the language (rules.py's docstring: every rule, in order)."""
    # source name -> the rule set its documents get; "default": every source not named
    rules: dict[str, str] = dataclasses.field(
        default_factory=lambda: {WIKIPEDIA_SOURCE: "wikipedia", "default": "web"})
    # rule set name -> its rules (rules.py RuleSet: null or false turns a rule off)
    rule_sets: dict[str, RuleSet] = dataclasses.field(
        default_factory=lambda: {"wikipedia": RuleSet(), "web": WEB_RULES})
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

    tasks = [(path, config, language, check_language, scratch) for path in parts]
    part_codes, tally = [], Tally(len(REASONS) + 1)
    with progress(sum(p.stat().st_size for p in parts), "filter: checking", unit="B", quiet=ctx.quiet) as bar:
        for path, checks in zip(parts, ctx.executor.map(_check_part, tasks)):
            tally.add(checks)
            part_codes.append(checks.codes)
            bar.update(path.stat().st_size)
    documents = tally.total()[DOCUMENTS].astype(np.int64)
    if documents.sum() == 0:
        raise DataError(f"{ctx.inputs['sentences']}: no documents in {len(parts)} part file(s)")
    if documents[KEPT] == 0:
        raise DataError(f"filter: all {documents.sum():,} documents of language {ctx.lang} were dropped ("
                        + ", ".join(f"{REASONS[i - 1]} {n:,}" for i, n in enumerate(documents) if i and n)
                        + "): check --lang and the filter thresholds in stages.yaml")

    tasks = [(path, codes, scratch, ctx.out_dir, config.examples) for path, codes in zip(parts, part_codes)]
    with progress(len(parts), "filter: writing", unit="part", quiet=ctx.quiet) as bar:
        for part_examples in ctx.executor.map(_write_part, tasks):
            tally.add_examples(part_examples, config.examples)
            bar.update(1)

    report = tally.report(config, language_note, _stop_word_check(config, tally.counts, ctx))
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


# --- pass 1: checks -------------------------------------------------------------------------------

@dataclasses.dataclass
class PartChecks:
    """What pass 1 learnt of a part's documents."""
    codes: np.ndarray  # int8 per document: KEPT or its reason's code
    sources: list[str]  # the part's source names, in order of first appearance
    source_ids: np.ndarray  # per document: its source's index in `sources`
    sentences: np.ndarray  # per document: sentences left after its line rules
    tokens: np.ndarray  # per document: their tokens
    pieces: np.ndarray  # per document: the pieces it is written as, if kept
    line_drops: np.ndarray  # [source index, code, SENTENCES / TOKENS]: what line rules dropped
    line_examples: dict[tuple[str, int], list[dict]]  # (source, code) -> dropped lines


@functools.cache
def _checker(config: FilterConfig, language: str, check_language: bool) -> DocumentChecker:
    """The checker of this process: each worker process loads the character table and the language identifier once,
    on its first part (nothing is inherited from the parent, so any executor works)."""
    return DocumentChecker(config, language, check_language)


def _check_part(task) -> PartChecks:
    path, config, language, check_language, scratch = task
    checker = _checker(config, language, check_language)
    codes, source_ids, sentence_counts, token_counts, pieces = [], [], [], [], []
    marks: list[np.ndarray | None] = []  # per document: its sentences' marks (_marks_path), None if all KEPT
    sizes = []  # per document: its sentences
    sources: dict[str, tuple[int, RuleSet]] = {}  # source -> (its index in this part, its rules)
    line_drops = np.zeros((0, len(REASONS) + 1, 2))
    line_examples: dict[tuple[str, int], list[dict]] = {}
    for index, (record, sentences) in enumerate(iter_documents_with_records(path)):
        if record.source not in sources:
            sources[record.source] = len(sources), config.rule_sets[config.rule_set_name(record.source)]
            line_drops = np.concatenate([line_drops, np.zeros((1, len(REASONS) + 1, 2))])
        source, rules = sources[record.source]
        verdict = checker.judge(sentences, rules, _paragraphs(record, len(sentences), path, index)
                                if PARAGRAPHS in record.extra else None)
        mark = verdict.sentence_codes
        if mark is None:
            sentence_counts.append(len(sentences))
        else:
            kept_sentences = mark == KEPT
            sentence_counts.append(int(kept_sentences.sum()))
            dropped = np.flatnonzero(~kept_sentences)
            np.add.at(line_drops[source, :, 0], mark[dropped], 1)
            np.add.at(line_drops[source, :, 1], mark[dropped], verdict.tokens[dropped])
            for i in dropped:
                found = line_examples.setdefault((record.source, int(mark[i])), [])
                if len(found) < config.examples:
                    found.append(_example(record, [sentences[i]]))
        if verdict.code == KEPT and len(verdict.starts) > 1:
            mark = np.zeros(len(sentences), np.int8) if mark is None else mark.copy()
            mark[np.flatnonzero(mark == KEPT)[verdict.starts[1:]]] = NEW_PIECE
        marks.append(mark)
        sizes.append(len(sentences))
        codes.append(verdict.code)
        source_ids.append(source)
        token_counts.append(float(verdict.kept_tokens))
        pieces.append(len(verdict.starts))
    marks_path = _marks_path(scratch, path)
    marks_path.unlink(missing_ok=True)  # of an earlier run in the same scratch directory
    if any(m is not None for m in marks):
        np.save(marks_path, np.concatenate([np.zeros(n, np.int8) if m is None else m for m, n in zip(marks, sizes)]))
    return PartChecks(np.array(codes, dtype=np.int8), list(sources),
                      np.array(source_ids, dtype=np.int32), np.array(sentence_counts, dtype=np.int64),
                      np.array(token_counts, dtype=np.float64), np.array(pieces, dtype=np.int64), line_drops,
                      line_examples)


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

def _write_part(task) -> dict[tuple[str, int], list[dict]]:
    """Write the kept documents of a part (cut into their pieces, without the sentences line rules dropped) and
    their records; return up to `examples` dropped documents per (source, code)."""
    path, codes, scratch, out_dir, examples = task
    found: dict[tuple[str, int], list[dict]] = {}
    marks_path = _marks_path(scratch, path)
    marks = np.load(marks_path) if marks_path.exists() else None
    offset = 0
    text_path = Path(out_dir) / path.name
    with atomic_write(text_path) as out, atomic_write(records_path(text_path)) as records_out:
        for index, (record, sentences) in enumerate(iter_documents_with_records(path)):
            code = int(codes[index])
            if code == KEPT:
                if PARAGRAPHS in record.extra:
                    record = dataclasses.replace(record, extra={k: v for k, v in record.extra.items()
                                                                if k != PARAGRAPHS})
                pieces = [sentences] if marks is None else _pieces(sentences, marks[offset:offset + len(sentences)])
                for number, piece in enumerate(pieces, 1):
                    write_document(out, piece)
                    write_record(records_out, record if len(pieces) == 1 else
                                 dataclasses.replace(record, extra={**record.extra, PIECE: number}))
            elif len(found.setdefault((record.source, code), [])) < examples:
                found[record.source, code].append(_example(record, sentences))
            offset += len(sentences)
    return found


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
        """A part's checks, after its duplicates are marked."""
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
        self.add_examples(checks.line_examples, None)

    def add_examples(self, examples: dict[tuple[str, int], list[dict]], limit: int | None) -> None:
        for (name, code), found in examples.items():
            self._source(name)
            kept = self.examples[name].setdefault(code, [])
            kept.extend(found[:None if limit is None else limit - len(kept)])

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
