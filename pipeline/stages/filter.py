"""Stage `filter`: drop documents that are not clean prose in the profile's language (duplicates: stage `dedup`).

The rules, their order and the defaults are those of TurkuNLP's `filterdocs.py` (wiki-bert-pipeline), measured
the same way; a document's reason is its first failing check:

    avg_words      words per sentence < min_avg_words
    min_sentences  sentences < min_sentences          max_sentences  sentences > max_sentences
    min_tokens     whitespace tokens < min_tokens     max_tokens     whitespace tokens > max_tokens
    no_word_ratio  share of sentences without a word > max_no_word_ratio
    punct_ratio    ASCII punctuation / characters > max_punct_ratio
    upper_ratio    uppercase / characters > max_upper_ratio
    digit_ratio    digits / characters > max_digit_ratio
    foreign_ratio  letters outside `word_chars` (either case) / characters > max_foreign_ratio
    min_words      words < min_words
    language       language identification of the document is not `language`

A word is 2+ letters of `word_chars` with an optional capital first (any letters when `word_chars` is null);
characters are those of the sentences, newlines excluded. A null threshold turns its check off.

Languages written without spaces (Japanese, Chinese, Thai, ...): with `chars_per_word` set, the letters of those
scripts count as letters / chars_per_word words and tokens, and a sentence holding one has a word
(`pipeline.words`); the rest of the text is counted as above. Text without such letters gets the same decisions
whatever `chars_per_word` is. docs/pipeline.md ("Languages without spaces") gives the profiles' thresholds.

Language identification: py3langid by default, langdetect on request (docs/performance.md compares their
accuracy and speed). Both are deterministic (langdetect is seeded). Each gets the first `langid_chars` characters
of the document: identification is the slowest check, and a Wikipedia lead is in the article's language. A
language the identifier does not know skips the check, with a warning and a note in the report.

Two passes over the parts, both parallel: the checks per part, then the kept documents are written. The output is
the same for any number of workers. `report.json` has documents and sentences kept and dropped by reason, with
example titles (from the document records of `sentences`, which the kept documents keep).
"""
from __future__ import annotations

import dataclasses
import functools
import re
import string
from pathlib import Path
from typing import Literal

import numpy as np

from wiki2bert_core.config import SettingError, added_later
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write, write_json
from pipeline.text_files import (iter_documents, iter_documents_with_records, list_parts, records_path, write_document,
                                 write_record)
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext
from pipeline.words import split_unspaced

REASONS = ("avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "no_word_ratio", "punct_ratio",
           "upper_ratio", "digit_ratio", "foreign_ratio", "min_words", "language")
KEPT = 0  # a document's code: 0 kept, i + 1 dropped for REASONS[i]


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """The rules and defaults of TurkuNLP's filterdocs.py (module docstring); None (null) turns a check off."""
    min_avg_words: float | None = 4.0  # words per sentence, at least
    min_sentences: int | None = 3  # sentences per document, at least
    max_sentences: int | None = 1000  # sentences per document, at most
    min_tokens: int | None = 20  # whitespace-separated tokens per document, at least
    max_tokens: int | None = 10000  # whitespace-separated tokens per document, at most
    max_no_word_ratio: float | None = 0.2  # share of sentences without a word
    max_punct_ratio: float | None = 0.075  # ASCII punctuation / characters
    max_upper_ratio: float | None = 0.1  # uppercase / characters
    max_digit_ratio: float | None = 0.075  # digits / characters
    max_foreign_ratio: float | None = 0.02  # letters outside word_chars / characters (off while word_chars is null)
    min_words: int | None = 30  # a word: 2+ letters of word_chars, optionally capitalized
    word_chars: str | None = None  # the language's lowercase alphabet; null: any letter
    # letters of scripts written without spaces (Han, kana, Thai, ...) per word and token: the language's mean word
    # length, e.g. 1.7 for Japanese; null: every word is space-separated, as TurkuNLP counts them
    chars_per_word: float | None = added_later(None)
    langid: Literal["py3langid", "langdetect", "none"] = "py3langid"  # py3langid, langdetect (seeded) or none
    language: str | None = None  # the code langid must return; null: --lang
    langid_chars: int = 2000  # characters of each document given to langid
    examples: int = 5  # example titles per reason in report.json

    def __post_init__(self):
        for name in ("min_avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "min_words",
                     "examples"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise SettingError(name, f"must not be negative, got {value}")
        for name in ("max_no_word_ratio", "max_punct_ratio", "max_upper_ratio", "max_digit_ratio",
                     "max_foreign_ratio"):
            if (value := getattr(self, name)) is not None and not 0.0 <= value <= 1.0:
                raise SettingError(name, f"{value} is not between 0 and 1")
        if self.langid_chars < 1:
            raise SettingError("langid_chars", f"must be at least 1, got {self.langid_chars}")
        if self.chars_per_word is not None and not self.chars_per_word > 0:
            raise SettingError("chars_per_word", f"must be positive (or null), got {self.chars_per_word}")


def run(config: FilterConfig, ctx: StageContext) -> dict:
    parts = list_parts(ctx.inputs["sentences"], ".txt")
    language = config.language or ctx.lang
    check_language, language_note = _language_check(config, language, ctx)

    tasks = [(path, config, language, check_language) for path in parts]
    part_codes = []
    documents = np.zeros(len(REASONS) + 1, dtype=np.int64)
    sentences = np.zeros(len(REASONS) + 1, dtype=np.int64)
    with progress(sum(p.stat().st_size for p in parts), "filter: checking", unit="B", quiet=ctx.quiet) as bar:
        for path, (codes, sentence_counts) in zip(parts, ctx.executor.map(_check_part, tasks)):
            documents += np.bincount(codes, minlength=len(REASONS) + 1)
            sentences += np.bincount(codes, weights=sentence_counts, minlength=len(REASONS) + 1).astype(np.int64)
            part_codes.append(codes)
            bar.update(path.stat().st_size)
    total = int(documents.sum())
    if total == 0:
        raise DataError(f"{ctx.inputs['sentences']}: no documents in {len(parts)} part file(s)")
    if documents[KEPT] == 0:
        raise DataError(f"filter: all {total:,} documents were dropped ("
                            + ", ".join(f"{REASONS[i - 1]} {n:,}" for i, n in enumerate(documents) if i and n)
                            + "): check --lang and the filter thresholds in stages.yaml")

    examples: dict[int, list[str]] = {}
    tasks = [(path, codes, ctx.out_dir, config.examples) for path, codes in zip(parts, part_codes)]
    with progress(len(parts), "filter: writing", unit="part", quiet=ctx.quiet) as bar:
        for part_examples in ctx.executor.map(_write_part, tasks):
            for code, titles in part_examples.items():
                examples.setdefault(code, []).extend(titles[:config.examples - len(examples.get(code, []))])
            bar.update(1)

    dropped = {REASONS[code - 1]: {"documents": int(documents[code]), "sentences": int(sentences[code]),
                                   "examples": examples.get(code, [])}
               for code in range(1, len(REASONS) + 1) if documents[code]}
    write_json(ctx.out_dir / "report.json", {
        "documents": {"in": total, "kept": int(documents[KEPT]), "dropped": total - int(documents[KEPT])},
        "sentences": {"in": int(sentences.sum()), "kept": int(sentences[KEPT]),
                      "dropped": int(sentences.sum() - sentences[KEPT])},
        "dropped": dropped,
        "language_check": language_note,
    })
    ctx.log.info("filter: kept %d of %d documents; dropped %s", documents[KEPT], total,
                 ", ".join(f"{reason} {d['documents']}" for reason, d in dropped.items()) or "none")
    return {"documents_in": total, "documents_kept": int(documents[KEPT]), "sentences_kept": int(sentences[KEPT]),
            **{f"dropped_{reason}": d["documents"] for reason, d in dropped.items()}}


def _language_check(config: FilterConfig, language: str, ctx: StageContext) -> tuple[bool, str]:
    """(whether documents are checked for `language`, what report.json says about it)."""
    if config.langid == "none":
        return False, "off"
    if language not in _identifier(config.langid)[1]:
        note = f"skipped: {config.langid} does not know language {language!r} (set filter.language or filter.langid)"
        ctx.log.warning("filter: language check %s", note)
        return False, note
    return True, f"{config.langid}: {language}"


# --- checks --------------------------------------------------------------------------------------

UPPER, DIGIT, PUNCT, LETTER = 1, 2, 4, 8
# FLAG_SUMS[flags] -> which of (upper, digit, punct, letter) a character with those flags counts for.
FLAG_SUMS = np.array([[(f >> bit) & 1 for bit in range(4)] for f in range(16)], dtype=np.int64)


@functools.cache
def _char_flags() -> np.ndarray:
    """Flags of every code point, as TurkuNLP counts them: str.isupper, str.isdigit, string.punctuation, and
    letter = a word character that is not a decimal digit or "_" (regex [^\\W\\d_])."""
    def flags_of(code: int) -> int:
        c = chr(code)
        return UPPER * c.isupper() | DIGIT * c.isdigit() | LETTER * (c.isalnum() and not c.isdecimal())

    flags = np.fromiter(map(flags_of, range(0x110000)), np.uint8, 0x110000)
    flags[[ord(c) for c in string.punctuation]] |= PUNCT
    return flags


class DocumentChecker:
    def __init__(self, config: FilterConfig, language: str, check_language: bool):
        self.config = config
        self.language = language
        self.identify = _identifier(config.langid)[0] if check_language else None
        self.flags = _char_flags()
        alphabet = config.word_chars
        if alphabet:
            upper = "".join(u for u in (c.upper() for c in alphabet) if len(u) == 1 and u not in alphabet)
            capital = f"[{re.escape(upper)}]?" if upper else ""
            self.word = re.compile(rf"\b{capital}[{re.escape(alphabet)}]{{2,}}\b")
            self.flags = self.flags.copy()  # letters of the alphabet are not foreign
            self.flags[[ord(c) for c in alphabet + upper]] &= ~np.uint8(LETTER)
        else:
            self.word = re.compile(r"\b[^\W\d_]{2,}\b")

    def reason(self, sentences: list[str]) -> int:
        """KEPT, or the code of the first failing check."""
        c = self.config
        n = len(sentences)
        # (sentence with unspaced-script letters blanked, words they make): the sentence itself and 0 in spaced text
        counted = ([(s, 0) for s in sentences] if c.chars_per_word is None else
                   [(rest, letters / c.chars_per_word) for rest, letters in map(split_unspaced, sentences)])
        unspaced_words = sum(w for _, w in counted)
        text = "\n".join(sentences)
        rest = "\n".join(r for r, _ in counted)
        words = len(self.word.findall(rest)) + unspaced_words
        tokens = len(rest.split()) + unspaced_words
        chars = len(text) - (n - 1)
        upper, digit, punct, foreign = np.bincount(
            self.flags[np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)],
            minlength=16) @ FLAG_SUMS
        checks = (
            c.min_avg_words is not None and words / n < c.min_avg_words,
            c.min_sentences is not None and n < c.min_sentences,
            c.max_sentences is not None and n > c.max_sentences,
            c.min_tokens is not None and tokens < c.min_tokens,
            c.max_tokens is not None and tokens > c.max_tokens,
            c.max_no_word_ratio is not None
            and sum(not w and self.word.search(r) is None for r, w in counted) / n > c.max_no_word_ratio,
            c.max_punct_ratio is not None and punct / chars > c.max_punct_ratio,
            c.max_upper_ratio is not None and upper / chars > c.max_upper_ratio,
            c.max_digit_ratio is not None and digit / chars > c.max_digit_ratio,
            c.max_foreign_ratio is not None and c.word_chars is not None and foreign / chars > c.max_foreign_ratio,
            c.min_words is not None and words < c.min_words,
        )
        for code, failed in enumerate(checks, 1):
            if failed:
                return code
        if self.identify is not None and self.identify(" ".join(sentences)[:c.langid_chars]) != self.language:
            return REASONS.index("language") + 1
        return KEPT


@functools.cache
def _identifier(name: str):
    """(identify(text) -> language code or None, known language codes) for langid `name`."""
    if name == "py3langid":
        import py3langid

        return (lambda text: py3langid.classify(text)[0]), frozenset(lang for lang, _ in py3langid.rank(""))
    from langdetect import DetectorFactory
    from langdetect.detector_factory import PROFILES_DIRECTORY
    from langdetect.lang_detect_exception import LangDetectException

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)  # langdetect samples n-grams at random: seeded, it is deterministic

    def identify(text: str) -> str | None:
        detector = factory.create()
        detector.append(text)
        try:
            return detector.detect()
        except LangDetectException:  # no letters to go on
            return None

    return identify, frozenset(factory.get_lang_list())


@functools.cache
def _checker(config: FilterConfig, language: str, check_language: bool) -> DocumentChecker:
    """The checker of this process: each worker process loads the character table and the language identifier once,
    on its first part (nothing is inherited from the parent, so any executor works)."""
    return DocumentChecker(config, language, check_language)


def _check_part(task) -> tuple[np.ndarray, np.ndarray]:
    """Per document of a part: its code and its number of sentences."""
    path, config, language, check_language = task
    checker = _checker(config, language, check_language)
    codes, sentence_counts = [], []
    for sentences in iter_documents(path):
        codes.append(checker.reason(sentences))
        sentence_counts.append(len(sentences))
    return np.array(codes, dtype=np.int8), np.array(sentence_counts, dtype=np.int64)


def _write_part(task) -> dict[int, list[str]]:
    """Write the kept documents of a part and their records; return up to `examples` titles per dropped code."""
    path, codes, out_dir, examples = task
    found: dict[int, list[str]] = {}
    text_path = Path(out_dir) / path.name
    with atomic_write(text_path) as out, atomic_write(records_path(text_path)) as records_out:
        for index, (record, sentences) in enumerate(iter_documents_with_records(path)):
            code = int(codes[index])
            if code == KEPT:
                write_document(out, sentences)
                write_record(records_out, record)
            elif len(found.setdefault(code, [])) < examples:
                found[code].append(record.title or f"{path.name} document {index + 1}")
    return found


STAGE = Stage("filter", FilterConfig, run, inputs=("sentences",), tools=("py3langid", "langdetect", "numpy"))
