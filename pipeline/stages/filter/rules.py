"""The filter's document rules (`RuleSet`, one per source): what each measures of a document (`DocumentChecker`,
`Measurement`) and how a rule set decides from those measures (`decide`).

Measuring and deciding are apart so that a changed threshold re-decides from stored measures (docs/pipeline.md,
"Scores"). A document's reason is its first failing check, in this order (REASONS); a null threshold or a false
switch turns its rule off, and the rules a set turns off are not measured. The defaults are TurkuNLP's rules alone
(stages.yaml's `wikipedia` set); the `web` set is FineWeb-2's chain (`fineweb-2-pipeline.py`).

The text a web rule sees is the document as it came: its lines (a line of the source text is the sentences it gave,
joined by spaces) joined by newlines, a blank line between two paragraphs (the record's PARAGRAPHS; a document
without it, as the dump's, is one paragraph whose lines are its sentences). Its tokens (rules 1, 2 and 5) are the
runs of word characters (`\\w`, with a hyphen, apostrophe or period between two of them, and the period of an
ordinal number before a lowercase word) and each other character that is not a space, case kept: the words and
punctuation marks of FineWeb-2's word tokenizers (spaCy's), without most of their language-specific exceptions;
with `chars_per_word` set each letter of a script written without spaces is a token of its own. A token is a symbol if it is a punctuation
mark, a word otherwise.

1. Gopher's repetition rules (Rae et al. 2021, table A1):
     duplicate_paragraphs       paragraphs equal to an earlier one / paragraphs > max_duplicate_paragraph_share
     duplicate_paragraph_chars  their characters / characters > max_duplicate_paragraph_char_share
     duplicate_lines            lines equal to an earlier one / lines > max_duplicate_line_share
     duplicate_line_chars       their characters / characters > max_duplicate_line_char_share (FineWeb quality's
                                char_duplicates_ratio in the web set)
     top_ngram                  for each n of max_top_ngram_share: the most frequent token n-gram (the first of
                                them on a tie), its characters (tokens joined by spaces) x its count / characters
     duplicate_ngrams           for each n of max_duplicate_ngram_share: the characters of the tokens in n-grams
                                seen earlier in the document (each token counted once) / characters > the share
                                (datatrove counts whole repeats greedily, left to right: ours is a little higher)
2. FineWeb quality's rules (Penedo et al. 2024):
     line_punctuation           lines ending in a sentence terminal (a mark named FULL STOP, QUESTION MARK,
                                EXCLAMATION MARK or DANDA) / lines < min_line_punctuation_share
     newline_ratio              newlines / tokens > max_newline_ratio
3. C4's line rules (Raffel et al. 2020, as its code applies them: line by line, in this order). A line rule drops
   the line's sentences; lorem_ipsum and curly_bracket drop the document:
     no_terminal_punctuation    the line does not end in a mark of `terminal_punctuation`, or ends in an ellipsis
     lorem_ipsum                the line holds "lorem ipsum" (any case)
     javascript                 the line holds "javascript" (any case)
     curly_bracket              the line holds "{"
     policy                     the line holds a phrase of `policy_phrases` (cookie and terms-of-use notices)
   A document left without sentences is dropped for the line rule that dropped most of them.
4. TurkuNLP's rules (`filterdocs.py` of wiki-bert-pipeline, measured the same way), on the sentences kept:
     avg_words      words per sentence < min_avg_words
     min_sentences  sentences < min_sentences          max_sentences  sentences > max_sentences
     min_tokens     whitespace tokens < min_tokens     max_tokens     whitespace tokens > max_tokens
     no_word_ratio  share of sentences without a word > max_no_word_ratio
     punct_ratio    ASCII punctuation / characters > max_punct_ratio
     upper_ratio    uppercase / characters > max_upper_ratio
     digit_ratio    digits / characters > max_digit_ratio
     foreign_ratio  letters outside `word_chars` (either case) / characters > max_foreign_ratio
     min_words      words < min_words
   Here a word is 2+ letters of `word_chars` with an optional capital first (any letters when `word_chars` is
   null), characters those of the sentences, newlines excluded. With `long_documents: split` max_sentences and
   max_tokens drop nothing: a kept document over either is cut into pieces under both (`piece_starts`), and only a
   sentence over max_tokens on its own is dropped (reason max_tokens; the document's other measures include it).
5. Gopher's quality rules, on the sentences kept (the text of rule 1 where no line was dropped):
     doc_words         words < min_doc_words
     mean_word_length  mean characters per word < min_mean_word_length or > max_mean_word_length
     symbol_ratio      "#", or "..." and "…", per token > max_symbol_ratio
     bullet_lines      lines (blank ones too) starting with "•" or "-" / lines > max_bullet_line_share
     ellipsis_lines    lines ending in "..." or "…" / lines > max_ellipsis_line_share
     alpha_words       tokens holding a letter / tokens < min_alpha_word_share
     stop_words        distinct words of `stop_words` < min_stop_words (skipped while that list is empty)
6. The language, identified from the first `langid_chars` characters of the sentences kept:
     language          it is not `language`
     language_score    the identifier's probability of it < min_language_score
Duplicates are the dedup stage's.

Languages without spaces: `chars_per_word` counts their letters as words and tokens for rule 4
(docs/pipeline.md, "Languages without spaces").
"""
from __future__ import annotations

import dataclasses
import functools
import re
import sys
import unicodedata
from typing import TYPE_CHECKING

import numpy as np

from wiki2bert_core.config import SettingError
from pipeline.words import (DIGIT, LETTER, PUNCT, UNICODE_PUNCT, UNSPACED, UPPER, WORD, character_flags,
                            split_unspaced, word_hashes)

if TYPE_CHECKING:
    from pipeline.stages.filter.stage import FilterConfig

REASONS = (
    "duplicate_paragraphs", "duplicate_paragraph_chars", "duplicate_lines", "duplicate_line_chars", "top_ngram",
    "duplicate_ngrams",
    "line_punctuation", "newline_ratio",
    "no_terminal_punctuation", "lorem_ipsum", "javascript", "curly_bracket", "policy",
    "avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "no_word_ratio", "punct_ratio",
    "upper_ratio", "digit_ratio", "foreign_ratio", "min_words",
    "doc_words", "mean_word_length", "symbol_ratio", "bullet_lines", "ellipsis_lines", "alpha_words", "stop_words",
    "language", "language_score",
)
KEPT = 0  # a document's (or a sentence's) code: 0 kept, i + 1 dropped for REASONS[i]
CODE = {reason: i + 1 for i, reason in enumerate(REASONS)}
ELLIPSES = ("...", "…")
INNER_MARKS = np.array([ord(c) for c in "-'’."], np.uint32)  # joined to the word characters on both sides
BULLETS = ("•", "-")


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """One set of document rules; `FilterConfig.rules` says which source gets which. The module docstring says what
    each rule measures and in which order; null (or false) turns a rule off; the defaults are TurkuNLP's rules alone.
    The repetition and FineWeb quality rules look at the document as it came, the others at the lines kept."""
    max_duplicate_paragraph_share: float | None = None  # Gopher: paragraphs equal to an earlier one / paragraphs
    max_duplicate_paragraph_char_share: float | None = None  # Gopher: their characters / the document's characters
    max_duplicate_line_share: float | None = None  # Gopher: lines equal to an earlier one / lines
    max_duplicate_line_char_share: float | None = None  # Gopher: their characters / the document's characters
    # Gopher: n -> the most frequent token n-gram's characters x its count / the document's characters, at most
    max_top_ngram_share: dict[int, float] = dataclasses.field(default_factory=dict)
    # Gopher: n -> the characters of the tokens in n-grams seen earlier in the document / its characters, at most
    max_duplicate_ngram_share: dict[int, float] = dataclasses.field(default_factory=dict)
    # FineWeb quality: lines ending in a sentence terminal / lines, at least (FineWeb-2's line_punct_thr)
    min_line_punctuation_share: float | None = None
    max_newline_ratio: float | None = None  # FineWeb quality: newlines / tokens, at most (FineWeb-2's new_line_ratio)
    drop_lines_without_terminal_punctuation: bool = False  # C4: drop a line not ending in terminal_punctuation
    drop_lorem_ipsum: bool = False  # C4: drop the document if a line holds "lorem ipsum"
    drop_javascript_lines: bool = False  # C4: drop a line that holds "javascript"
    drop_curly_bracket: bool = False  # C4: drop the document if a line holds "{"
    drop_policy_lines: bool = False  # C4: drop a line that holds one of policy_phrases (cookie, terms of use)
    min_avg_words: float | None = 4.0  # TurkuNLP: words per sentence, at least
    min_sentences: int | None = 3  # TurkuNLP: sentences per document, at least
    max_sentences: int | None = 1000  # TurkuNLP: sentences per document (per piece, long_documents: split), at most
    min_tokens: int | None = 20  # TurkuNLP: whitespace-separated tokens per document, at least
    max_tokens: int | None = 10000  # TurkuNLP: tokens per document (per piece, long_documents: split), at most
    max_no_word_ratio: float | None = 0.2  # TurkuNLP: share of sentences without a word
    max_punct_ratio: float | None = 0.075  # TurkuNLP: ASCII punctuation / characters
    max_upper_ratio: float | None = 0.1  # TurkuNLP: uppercase / characters
    max_digit_ratio: float | None = 0.075  # TurkuNLP: digits / characters
    max_foreign_ratio: float | None = 0.02  # TurkuNLP: letters outside word_chars / characters (off without them)
    min_words: int | None = 30  # TurkuNLP: words (2+ letters of word_chars, optionally capitalized), at least
    min_doc_words: int | None = None  # Gopher: words (tokens that are not punctuation marks), at least
    min_mean_word_length: float | None = None  # Gopher: mean characters per word, at least
    max_mean_word_length: float | None = None  # Gopher: mean characters per word, at most
    max_symbol_ratio: float | None = None  # Gopher: "#", and apart "..." and "…", per token, at most
    max_bullet_line_share: float | None = None  # Gopher: lines starting with "•" or "-" / lines, at most
    max_ellipsis_line_share: float | None = None  # Gopher: lines ending in "..." or "…" / lines, at most
    # Gopher: tokens holding a letter / tokens, at least (FineWeb-2's max_non_alpha_words_ratio, named for what it
    # keeps)
    min_alpha_word_share: float | None = None
    min_stop_words: int | None = None  # Gopher: distinct words of stop_words, at least (skipped while it is empty)
    min_language_score: float | None = None  # the language identifier's probability of the language, at least

    def __post_init__(self):
        for name in ("max_top_ngram_share", "max_duplicate_ngram_share"):  # the config layers give the keys as text
            shares = {int(n) if str(n).isdigit() else n: share for n, share in getattr(self, name).items()}
            object.__setattr__(self, name, dict(sorted(shares.items(), key=lambda item: str(item[0]).zfill(20))))

    def check_ranges(self, prefix: str) -> None:
        """SettingError naming `prefix` + the key of the first value out of its range."""
        for name in ("min_avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "min_words",
                     "min_doc_words", "min_mean_word_length", "max_mean_word_length", "min_stop_words",
                     "max_newline_ratio", "max_symbol_ratio"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise SettingError(f"{prefix}{name}", f"must not be negative, got {value}")
        shares = [(name, getattr(self, name)) for name in (
            "max_duplicate_paragraph_share", "max_duplicate_paragraph_char_share", "max_duplicate_line_share",
            "max_duplicate_line_char_share", "min_line_punctuation_share", "max_no_word_ratio", "max_punct_ratio",
            "max_upper_ratio", "max_digit_ratio", "max_foreign_ratio", "max_bullet_line_share",
            "max_ellipsis_line_share", "min_alpha_word_share", "min_language_score")]
        for name in ("max_top_ngram_share", "max_duplicate_ngram_share"):
            for n, share in getattr(self, name).items():
                if not (isinstance(n, int) and n >= 2):
                    raise SettingError(f"{prefix}{name}.{n}", "n must be a whole number of words, 2 or more")
                shares.append((f"{name}.{n}", share))
        for name, value in shares:
            if value is not None and not 0.0 <= value <= 1.0:
                raise SettingError(f"{prefix}{name}", f"{value} is not between 0 and 1")

    @functools.cached_property
    def line_rules(self) -> bool:
        """Whether a line rule is on."""
        return (self.drop_lines_without_terminal_punctuation or self.drop_lorem_ipsum or self.drop_javascript_lines
                or self.drop_curly_bracket or self.drop_policy_lines)

    def checks(self, long_documents: str, check_language: bool) -> list[tuple[str, str, bool, float]]:
        """The rules that are on, in order: (reason, the measure it looks at, whether a measure above the limit fails
        (else below), the limit); the language check where `check_language`. A line rule's measure `line_rules` is
        the code of the line rule that dropped the document, 0 if none did."""
        capped = long_documents == "drop"
        found = [(reason, measure, above, limit) for reason, measure, above, limit in (
            ("duplicate_paragraphs", "duplicate_paragraphs", True, self.max_duplicate_paragraph_share),
            ("duplicate_paragraph_chars", "duplicate_paragraph_chars", True, self.max_duplicate_paragraph_char_share),
            ("duplicate_lines", "duplicate_lines", True, self.max_duplicate_line_share),
            ("duplicate_line_chars", "duplicate_line_chars", True, self.max_duplicate_line_char_share),
            *(("top_ngram", f"top_ngram_{n}", True, share) for n, share in self.max_top_ngram_share.items()),
            *(("duplicate_ngrams", f"duplicate_ngrams_{n}", True, share)
              for n, share in self.max_duplicate_ngram_share.items()),
            ("line_punctuation", "line_punctuation", False, self.min_line_punctuation_share),
            ("newline_ratio", "newline_ratio", True, self.max_newline_ratio),
            ("line_rules", "line_rules", True, 0 if self.line_rules else None),
            ("avg_words", "words_per_sentence", False, self.min_avg_words),
            ("min_sentences", "sentences", False, self.min_sentences),
            ("max_sentences", "sentences", True, self.max_sentences if capped else None),
            ("min_tokens", "tokens", False, self.min_tokens),
            ("max_tokens", "tokens", True, self.max_tokens if capped else None),
            ("no_word_ratio", "no_word_ratio", True, self.max_no_word_ratio),
            ("punct_ratio", "punct_ratio", True, self.max_punct_ratio),
            ("upper_ratio", "upper_ratio", True, self.max_upper_ratio),
            ("digit_ratio", "digit_ratio", True, self.max_digit_ratio),
            ("foreign_ratio", "foreign_ratio", True, self.max_foreign_ratio),
            ("min_words", "words", False, self.min_words),
            ("doc_words", "doc_words", False, self.min_doc_words),
            ("mean_word_length", "mean_word_length", False, self.min_mean_word_length),
            ("mean_word_length", "mean_word_length", True, self.max_mean_word_length),
            ("symbol_ratio", "hash_ratio", True, self.max_symbol_ratio),
            ("symbol_ratio", "ellipsis_ratio", True, self.max_symbol_ratio),
            ("bullet_lines", "bullet_lines", True, self.max_bullet_line_share),
            ("ellipsis_lines", "ellipsis_lines", True, self.max_ellipsis_line_share),
            ("alpha_words", "alpha_words", False, self.min_alpha_word_share),
            ("stop_words", "stop_words", False, self.min_stop_words),
            ("language", "language", False, 1.0 if check_language else None),
            ("language_score", "language_score", False, self.min_language_score if check_language else None),
        ) if limit is not None]
        return found

    def measures(self, long_documents: str, check_language: bool) -> frozenset[str]:
        """What the checks of this set look at, and the sentences and tokens every set reports."""
        return frozenset(m for _, m, _, _ in self.checks(long_documents, check_language)) | {"sentences", "tokens"}


@dataclasses.dataclass
class Measurement:
    """What a rule set's measures make of a document (DocumentChecker.measure)."""
    values: dict[str, float]  # measure name -> value (RuleSet.checks names them)
    sentence_tokens: np.ndarray  # float64 per sentence: its tokens (letters of unspaced scripts count fractions)
    sentence_codes: np.ndarray | None = None  # int8 per sentence: KEPT or the line rule that dropped it; None: none


@dataclasses.dataclass
class Verdict:
    """What the rules make of a document."""
    code: int  # KEPT, or the code of the reason the document is dropped
    kept_tokens: float  # tokens of the sentences kept (letters of unspaced scripts count fractions)
    sentence_codes: np.ndarray | None = None  # int8 per sentence: KEPT, or the rule that dropped it; None: all kept
    # a kept document's pieces: the first sentence of each, counted among the sentences kept
    starts: list[int] = dataclasses.field(default_factory=lambda: [0])


def decide(values: dict[str, np.ndarray], rules: RuleSet, long_documents: str, check_language: bool) -> np.ndarray:
    """The code of each document (KEPT or its first failing check) from its measures (`values`: measure name -> one
    value per document; a measure a check needs and a document lacks, NaN, fails nothing)."""
    count = len(values["sentences"])
    codes = np.zeros(count, np.int8)
    for reason, measure, above, limit in rules.checks(long_documents, check_language):
        value = values.get(measure)
        if value is None:  # a document whose line rules dropped it has no later measures
            continue
        with np.errstate(invalid="ignore"):
            failed = value > limit if above else value < limit
        undecided = codes == KEPT
        if reason == "line_rules":
            codes[undecided & failed] = value[undecided & failed]
        else:
            codes[undecided & failed] = CODE[reason]
    return codes


def cut(tokens: np.ndarray, sentence_codes: np.ndarray | None, rules: RuleSet) -> tuple[np.ndarray | None, list[int]]:
    """A kept document under `long_documents: split`: (its sentence codes with each sentence over max_tokens alone
    dropped, None where no sentence is dropped; the first sentence of each piece, counted among the sentences kept)."""
    codes = sentence_codes
    if rules.max_tokens is not None and (tokens > rules.max_tokens).any():
        codes = np.zeros(len(tokens), np.int8) if codes is None else codes.copy()
        codes[(tokens > rules.max_tokens) & (codes == KEPT)] = CODE["max_tokens"]
    kept = tokens if codes is None else tokens[codes == KEPT]
    return codes, piece_starts(kept, rules.max_tokens, rules.max_sentences) if len(kept) else [0]


# what TurkuNLP's rules and the language check measure: of the sentences alone, without lines or text
TURKU_MEASURES = frozenset({"sentences", "tokens", "words_per_sentence", "words", "no_word_ratio", "punct_ratio",
                            "upper_ratio", "digit_ratio", "foreign_ratio", "language", "language_score"})
COUNTED = UPPER | DIGIT | PUNCT | LETTER  # the flags (pipeline.words) rule 4 counts
# FLAG_SUMS[flags & COUNTED] -> which of (upper, digit, punct, letter) a character with those flags counts for
FLAG_SUMS = np.array([[bool(f & flag) for flag in (UPPER, DIGIT, PUNCT, LETTER)] for f in range(COUNTED + 1)],
                     dtype=np.int64)


@functools.cache
def _space_and_terminal() -> tuple[np.ndarray, tuple[str, ...]]:
    """(whether each code point is a space, the sentence terminals of rule 2)."""
    space = np.zeros(sys.maxunicode + 1, bool)
    space[[c for c in range(0x3001) if chr(c).isspace()]] = True
    # a terminal is punctuation (character_flags' UNICODE_PUNCT: looked up once, not for every code point again)
    terminals = tuple(chr(c) for c in np.flatnonzero(character_flags() & UNICODE_PUNCT)
                      if unicodedata.category(chr(c)) == "Po" and any(
        key in unicodedata.name(chr(c), "") for key in ("FULL STOP", "QUESTION MARK", "EXCLAMATION MARK", "DANDA"))
        and not any(key in unicodedata.name(chr(c)) for key in ("INVERTED", "REVERSED", "TURNED")))
    return space, terminals


@dataclasses.dataclass
class Tokens:
    """The tokens of a text (module docstring), in order."""
    lengths: np.ndarray  # characters of each
    hashes: np.ndarray  # uint64 hash of each (pipeline.words.word_hashes)
    symbol: np.ndarray  # bool: a punctuation mark
    letter: np.ndarray  # bool: holds a letter
    unspaced: np.ndarray  # bool: a letter of a script written without spaces, a token of its own


class DocumentChecker:
    def __init__(self, config: FilterConfig, language: str, check_language: bool):
        self.config = config
        self.language = language
        self.check_language = check_language
        self.flags = character_flags()
        alphabet = config.word_chars
        if alphabet:
            upper = "".join(u for u in (c.upper() for c in alphabet) if len(u) == 1 and u not in alphabet)
            capital = f"[{re.escape(upper)}]?" if upper else ""
            self.word = re.compile(rf"\b{capital}[{re.escape(alphabet)}]{{2,}}\b")
            self.foreign = self.flags.copy()  # letters of the alphabet are not foreign
            self.foreign[[ord(c) for c in alphabet + upper]] &= ~np.uint16(LETTER)
        else:
            self.word = re.compile(r"\b[^\W\d_]{2,}\b")
            self.foreign = self.flags
        self.space, self.terminals = _space_and_terminal()
        # letters of unspaced scripts each a token of their own where chars_per_word is set
        self.own_token_flag = UNSPACED if config.chars_per_word is not None else 0
        self.stop_words = np.unique(self.tokens(" ".join(config.stop_words)).hashes)
        self.policy_phrases = tuple(p.casefold() for p in config.policy_phrases)
        self.terminal_punctuation = tuple(config.terminal_punctuation)

    def judge(self, sentences: list[str], rules: RuleSet, paragraphs: list[list[int]] | None = None) -> Verdict:
        """The verdict of `rules` on one document: measure, then decide (the stage does both for a part at once)."""
        measured = self.measure(sentences, rules, paragraphs)
        values = {name: np.array([value]) for name, value in measured.values.items()}
        code = int(decide(values, rules, self.config.long_documents, self.check_language)[0])
        verdict = Verdict(code, measured.values["tokens"], measured.sentence_codes)
        if code == KEPT and self.config.long_documents == "split":
            verdict.sentence_codes, verdict.starts = cut(measured.sentence_tokens, measured.sentence_codes, rules)
            if verdict.sentence_codes is not None:
                verdict.kept_tokens = measured.sentence_tokens[verdict.sentence_codes == KEPT].sum()
                if not (verdict.sentence_codes == KEPT).any():
                    verdict.code = CODE["max_tokens"]
        return verdict

    def measure(self, sentences: list[str], rules: RuleSet, paragraphs: list[list[int]] | None = None
                ) -> Measurement:
        """Every measure the checks of `rules` look at (RuleSet.measures), of a document; `paragraphs` is its
        record's PARAGRAPHS (None: one paragraph, a line a sentence)."""
        c = self.config
        wanted = rules.measures(c.long_documents, self.check_language)
        # (sentence with unspaced-script letters blanked, words they make): the sentence itself and 0 in spaced text
        counted = ([(s, 0) for s in sentences] if c.chars_per_word is None else
                   [(rest, letters / c.chars_per_word) for rest, letters in map(split_unspaced, sentences)])
        sentence_tokens = np.fromiter((len(r.split()) + w for r, w in counted), np.float64, len(sentences))
        measured = Measurement({}, sentence_tokens)
        values = measured.values
        if not (rules.line_rules or wanted - TURKU_MEASURES):  # TurkuNLP's rules alone: no lines, no text needed
            values.update(sentences=len(sentences), tokens=float(sentence_tokens.sum()))
            self._turku(wanted, values, sentences, counted)
            self._language(wanted, values, sentences)
            return measured
        line_sizes = [n for paragraph in paragraphs for n in paragraph] if paragraphs else [1] * len(sentences)
        bounds = np.cumsum([0] + line_sizes)
        lines = [" ".join(sentences[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        paragraph_bounds = np.cumsum([0] + [len(p) for p in paragraphs or [lines]])
        texts = ["\n".join(lines[a:b]) for a, b in zip(paragraph_bounds[:-1], paragraph_bounds[1:])]
        text = "\n\n".join(texts)
        tokens = None
        if wanted & {"duplicate_paragraphs", "duplicate_paragraph_chars"}:
            repeated, repeated_chars = _repeats(texts)
            values["duplicate_paragraphs"] = repeated / len(texts)
            values["duplicate_paragraph_chars"] = repeated_chars / len(text)
        if wanted & {"duplicate_lines", "duplicate_line_chars"}:
            repeated, repeated_chars = _repeats(lines)
            values["duplicate_lines"] = repeated / len(lines)
            values["duplicate_line_chars"] = repeated_chars / len(text)
        top = [int(m.rpartition("_")[2]) for m in wanted if m.startswith("top_ngram_")]
        duplicate = [int(m.rpartition("_")[2]) for m in wanted if m.startswith("duplicate_ngrams_")]
        if top or duplicate or "newline_ratio" in wanted:
            tokens = self.tokens(text)
        if top or duplicate:
            values.update(ngram_shares(tokens, len(text), top, duplicate))
        if "line_punctuation" in wanted:
            values["line_punctuation"] = sum(line.endswith(self.terminals) for line in lines) / len(lines)
        if "newline_ratio" in wanted:
            values["newline_ratio"] = text.count("\n") / max(1, len(tokens.lengths))
        if rules.line_rules:
            code, line_codes = self._line_rules(rules, lines)
            if any(line_codes):
                measured.sentence_codes = np.repeat(np.array(line_codes, np.int8), line_sizes)
                if not code and (measured.sentence_codes == KEPT).sum() == 0:
                    code = int(np.bincount(measured.sentence_codes).argmax())
            values["line_rules"] = code
            if code:
                values["sentences"], values["tokens"] = 0, 0.0
                return measured
            if measured.sentence_codes is not None:
                kept = measured.sentence_codes == KEPT
                sentences = [s for s, k in zip(sentences, kept) if k]
                counted = [x for x, k in zip(counted, kept) if k]
                text = "\n".join(sentences)
                tokens = None
        values["sentences"] = len(sentences)
        values["tokens"] = float(sentence_tokens.sum() if measured.sentence_codes is None
                                 else sentence_tokens[measured.sentence_codes == KEPT].sum())
        self._turku(wanted, values, sentences, counted)
        self._gopher_quality(wanted, values, text, tokens)
        self._language(wanted, values, sentences)
        return measured

    def _language(self, wanted: frozenset[str], values: dict[str, float], sentences: list[str]) -> None:
        """Rule 6's measures of the sentences kept: 1 if identified as the language (else 0), its probability."""
        if "language" in wanted:
            c = self.config
            label, probability = identifier(c.langid)[0](" ".join(sentences)[:c.langid_chars],
                                                         "language_score" in wanted)
            values["language"] = float(label == self.language)
            if "language_score" in wanted:
                values["language_score"] = probability

    def _line_rules(self, r: RuleSet, lines: list[str]) -> tuple[int, list[int]]:
        """(the code of a rule that drops the document or KEPT, each line's code)."""
        codes = []
        for line in lines:
            lowered = line.casefold()
            if r.drop_lines_without_terminal_punctuation and (
                    not line.endswith(self.terminal_punctuation) or line.endswith(ELLIPSES)):
                codes.append(CODE["no_terminal_punctuation"])
            elif r.drop_lorem_ipsum and "lorem ipsum" in lowered:
                return CODE["lorem_ipsum"], []
            elif r.drop_javascript_lines and "javascript" in lowered:
                codes.append(CODE["javascript"])
            elif r.drop_curly_bracket and "{" in line:
                return CODE["curly_bracket"], []
            elif r.drop_policy_lines and any(p in lowered for p in self.policy_phrases):
                codes.append(CODE["policy"])
            else:
                codes.append(KEPT)
        return KEPT, codes

    def _turku(self, wanted: frozenset[str], values: dict[str, float], sentences: list[str],
               counted: list[tuple[str, float]]) -> None:
        """Rule 4's measures of the sentences kept (`counted` as measure makes it)."""
        n = len(sentences)
        if not wanted & {"words_per_sentence", "words", "no_word_ratio", "punct_ratio", "upper_ratio", "digit_ratio",
                         "foreign_ratio"}:
            return
        rest = "\n".join(r for r, _ in counted)
        words = len(self.word.findall(rest)) + sum(w for _, w in counted)
        text = "\n".join(sentences)
        chars = max(1, len(text) - (n - 1))
        upper, digit, punct, foreign = np.bincount(
            self.foreign[np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)] & COUNTED,
            minlength=len(FLAG_SUMS)) @ FLAG_SUMS
        values.update(words_per_sentence=words / n, words=words, punct_ratio=punct / chars,
                      upper_ratio=upper / chars, digit_ratio=digit / chars,
                      foreign_ratio=foreign / chars if self.config.word_chars is not None else 0.0)
        if "no_word_ratio" in wanted:
            values["no_word_ratio"] = sum(not w and self.word.search(s) is None for s, w in counted) / n

    def _gopher_quality(self, wanted: frozenset[str], values: dict[str, float], text: str,
                        tokens: Tokens | None) -> None:
        """Rule 5's measures of `text` (the sentences kept) and its tokens, if known already."""
        if not wanted & {"doc_words", "mean_word_length", "hash_ratio", "bullet_lines", "ellipsis_lines",
                         "alpha_words", "stop_words"}:
            return
        tokens = self.tokens(text) if tokens is None else tokens
        count = max(1, len(tokens.lengths))
        word_lengths = tokens.lengths[~tokens.symbol]
        lines = text.split("\n")
        values.update(doc_words=len(word_lengths),
                      mean_word_length=word_lengths.mean() if len(word_lengths) else 0.0,
                      hash_ratio=text.count("#") / count,
                      ellipsis_ratio=(text.count("...") + text.count("…")) / count,
                      bullet_lines=sum(line.lstrip().startswith(BULLETS) for line in lines) / len(lines),
                      ellipsis_lines=sum(line.rstrip().endswith(ELLIPSES) for line in lines) / len(lines),
                      alpha_words=tokens.letter.sum() / count,
                      stop_words=np.isin(np.unique(tokens.hashes[~tokens.symbol]), self.stop_words).sum()
                      if len(self.stop_words) else np.nan)

    def tokens(self, text: str) -> Tokens:
        """The tokens of `text` (module docstring), found with the character table instead of a regex, hashed as the
        polynomial of their code points (pipeline.words.word_hashes)."""
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        flags = self.flags[codes]
        single = (flags & self.own_token_flag).astype(bool)
        word = (flags & WORD).astype(bool) & ~single
        token = ~self.space[codes]
        if len(codes) > 2:  # the marks spaCy keeps inside a token: 1804-ben, e-mail, 3.5, l'eau; an ordinal's period
            inner = np.isin(codes[1:-1], INNER_MARKS) & word[:-2] & word[2:]
            ordinal = (codes[1:-1] == ord(".")) & (flags[:-2] & DIGIT).astype(bool) & self.space[codes[2:]]
            ordinal[:-1] &= ((flags[3:] & LETTER).astype(bool) & ~(flags[3:] & UPPER).astype(bool))
            ordinal[-1] = False
            word[1:-1] |= inner | ordinal
        start = token.copy()
        start[1:] &= ~(word[1:] & word[:-1])
        in_token = np.cumsum(token) - 1  # each character's index among the characters of tokens
        starts = in_token[start]
        chars = codes[token].astype(np.uint64)
        lengths = np.diff(np.append(starts, len(chars)))
        token_flags = flags[token]
        symbol = ~word[start] & ~single[start] & (flags[start] & (PUNCT | UNICODE_PUNCT)).astype(bool)
        letter = np.add.reduceat((token_flags & LETTER).astype(bool) & ~(token_flags & DIGIT).astype(bool), starts) \
            if len(starts) else np.zeros(0, bool)
        return Tokens(lengths, word_hashes(chars, starts), symbol, letter.astype(bool), single[start])


def _repeats(items: list[str]) -> tuple[int, int]:
    """(how many items equal an earlier one, their characters)."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


NGRAM_HASH_FACTOR = np.uint64(0x9E3779B97F4A7C15)  # odd: an n-gram's hash is its tokens' hashes in base this


def ngram_shares(tokens: Tokens, chars: int, top: list[int], duplicate: list[int]) -> dict[str, float]:
    """`top_ngram_<n>` for each n of `top` and `duplicate_ngrams_<n>` for each of `duplicate` (module docstring,
    rule 1) of a text of `chars` characters and these tokens. An n-gram's characters are its tokens' joined by
    spaces, as datatrove joins them, but for none between two letters of a script written without spaces (a token
    each: spaces would count more than the letters). Vectorised: an n-gram is the hash of its tokens' hashes;
    np.unique finds the repeats."""
    lengths, hashes = tokens.lengths, tokens.hashes
    joins = np.concatenate(([0], np.cumsum(~(tokens.unspaced[1:] & tokens.unspaced[:-1]))))
    shares = {f"top_ngram_{n}": 0.0 for n in top} | {f"duplicate_ngrams_{n}": 0.0 for n in duplicate}
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    ngrams = hashes
    for n in range(2, max([*top, *duplicate]) + 1):
        ngrams = ngrams[:-1] * NGRAM_HASH_FACTOR + hashes[n - 1:]
        if not len(ngrams):
            break
        _, first, inverse, counts = np.unique(ngrams, return_index=True, return_inverse=True, return_counts=True)
        if n in top:
            count = counts[inverse]
            most = np.flatnonzero(count == count.max())[0]  # the first of the most frequent
            span = cumulative[most + n] - cumulative[most] + joins[most + n - 1] - joins[most]
            shares[f"top_ngram_{n}"] = span * count[most] / chars
        if n in duplicate:
            repeats = np.flatnonzero(first[inverse] != np.arange(len(ngrams)))
            depth = np.zeros(len(hashes) + 1, np.int64)  # +1 where a repeat starts, -1 after its last token
            depth[repeats] += 1
            depth[repeats + n] -= 1
            shares[f"duplicate_ngrams_{n}"] = lengths[np.cumsum(depth[:-1]) > 0].sum() / chars
    return shares


def piece_starts(tokens: np.ndarray, max_tokens: int | None, max_sentences: int | None) -> list[int]:
    """Where to cut a document of sentences with `tokens` so that each piece has at most max_tokens tokens and
    max_sentences sentences (a sentence over max_tokens on its own has been dropped): the first sentence of each
    piece. As few pieces as a greedy fill makes (the fewest possible), cut where the tokens are most even when that
    keeps every piece under both caps, else where the greedy fill cut."""
    n = len(tokens)
    over_tokens = max_tokens is not None and tokens.sum() > max_tokens
    if not over_tokens and (max_sentences is None or n <= max_sentences):
        return [0]
    greedy, size = [0], 0.0
    for i, t in enumerate(tokens):
        if i > greedy[-1] and ((max_tokens is not None and size + t > max_tokens)
                               or (max_sentences is not None and i - greedy[-1] >= max_sentences)):
            greedy.append(i)
            size = 0.0
        size += t
    pieces = len(greedy)
    cumulative = np.concatenate(([0.0], np.cumsum(tokens)))
    targets = cumulative[-1] * np.arange(1, pieces) / pieces
    at = np.searchsorted(cumulative, targets).clip(1, n - 1)
    even = np.where(targets - cumulative[at - 1] < cumulative[at] - targets, at - 1, at).clip(1, n - 1)
    starts = [0, *even.tolist()]
    ends = starts[1:] + [n]
    fits = all(b > a and (max_tokens is None or cumulative[b] - cumulative[a] <= max_tokens)
               and (max_sentences is None or b - a <= max_sentences) for a, b in zip(starts, ends))
    return starts if fits else greedy


@functools.cache
def identifier(name: str):
    """(identify(text, probability) -> (language code or None, its probability or None unless asked), known language
    codes) for langid `name`: py3langid, its calibrated probabilities (norm_probs) only when asked (the language is
    the same either way, and the uncalibrated classify is py3langid.classify, as before rule sets), or langdetect
    (seeded, so deterministic)."""
    if name == "py3langid":
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        model = LanguageIdentifier.from_model_file(MODEL_FILE)
        calibrated = LanguageIdentifier(model.nb_ptc, model.nb_pc, model.nb_classes, model.tk_nextmove,
                                        model.tk_output, norm_probs=True, tk_row=model.tk_row)  # the same arrays

        def identify(text: str, probability: bool) -> tuple[str | None, float | None]:
            return calibrated.classify(text) if probability else (model.classify(text)[0], None)

        return identify, frozenset(model.labels)
    from langdetect import DetectorFactory
    from langdetect.detector_factory import PROFILES_DIRECTORY
    from langdetect.lang_detect_exception import LangDetectException

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)  # langdetect samples n-grams at random: seeded, it is deterministic

    def identify(text: str, probability: bool) -> tuple[str | None, float | None]:
        detector = factory.create()
        detector.append(text)
        try:
            best = detector.get_probabilities()[:1]
        except LangDetectException:  # no letters to go on
            best = []
        return (best[0].lang, best[0].prob) if best else (None, 0.0)

    return identify, frozenset(factory.get_lang_list())
