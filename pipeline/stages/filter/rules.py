"""The filter's document rules (`RuleSet`, one per source) and how a document is judged by them (`DocumentChecker`).

A document's reason is its first failing check, in this order (REASONS); a null threshold or a false switch turns
its rule off, and a rule set's defaults are TurkuNLP's rules alone (stages.yaml's `wikipedia` set).

1. Gopher's repetition rules (Rae et al. 2021, table A1), on the document as it came. A line is a line of the
   source text, a paragraph a run of lines between blank lines (the record's PARAGRAPHS; a document without it,
   as the dump's, is one paragraph whose lines are its sentences); characters are those of the lines:
     duplicate_paragraphs       paragraphs equal to an earlier one / paragraphs > max_duplicate_paragraph_share
     duplicate_paragraph_chars  their characters / characters > max_duplicate_paragraph_char_share
     duplicate_lines            lines equal to an earlier one / lines > max_duplicate_line_share
     duplicate_line_chars       their characters / characters > max_duplicate_line_char_share
     top_ngram                  for each n of max_top_ngram_share: the most frequent n-gram of words (seen twice or
                                more), its characters x its count / characters > the share
     duplicate_ngrams           for each n of max_duplicate_ngram_share: the characters of the word n-grams seen
                                earlier in the document (overlapping ones counted once) / characters > the share
                                (datatrove counts them greedily, left to right; on huwiki text the two correlate at
                                0.99, ours about 1.2x datatrove's)
   An n-gram's characters are the text's from its first word to its last.
2. C4's line rules (Raffel et al. 2020, as its code applies them: line by line, in this order). A line rule drops
   the line's sentences; lorem_ipsum and curly_bracket drop the document:
     no_terminal_punctuation    the line does not end in a mark of `terminal_punctuation`, or ends in an ellipsis
     lorem_ipsum                the line holds "lorem ipsum" (any case)
     javascript                 the line holds "javascript" (any case)
     curly_bracket              the line holds "{"
     policy                     the line holds a phrase of `policy_phrases` (cookie and terms-of-use notices)
   A document left without sentences is dropped for the line rule that dropped most of them.
3. TurkuNLP's rules (`filterdocs.py` of wiki-bert-pipeline, measured the same way), on the sentences kept:
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
   max_tokens drop nothing: the document is cut into pieces under both (`piece_starts`), and only a sentence over
   max_tokens on its own is dropped (reason max_tokens).
4. Words (Gopher's quality rules), on the sentences kept:
     mean_word_length  mean characters per word < min_mean_word_length or > max_mean_word_length
     stop_words        fewer than min_stop_words words of `stop_words` (skipped while that list is empty)
5. The language, identified from the first `langid_chars` characters of the sentences kept:
     language          it is not `language`
     language_score    the identifier's probability of it < min_language_score
Duplicates are the dedup stage's.

The words of rules 1 and 4 are the runs of word characters (`\\w+`) of the casefolded text, and with
`chars_per_word` set each letter of a script written without spaces is a word of its own (`pipeline.words`).
Languages without spaces: `chars_per_word` counts their letters as words and tokens for rule 3
(docs/pipeline.md, "Languages without spaces").
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING

import numpy as np

from wiki2bert_core.config import SettingError
from pipeline.words import DIGIT, LETTER, PUNCT, UNSPACED, UPPER, WORD, character_flags, split_unspaced, word_hashes

if TYPE_CHECKING:
    from pipeline.stages.filter.stage import FilterConfig

REASONS = (
    "duplicate_paragraphs", "duplicate_paragraph_chars", "duplicate_lines", "duplicate_line_chars", "top_ngram",
    "duplicate_ngrams",
    "no_terminal_punctuation", "lorem_ipsum", "javascript", "curly_bracket", "policy",
    "avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "no_word_ratio", "punct_ratio",
    "upper_ratio", "digit_ratio", "foreign_ratio", "min_words",
    "mean_word_length", "stop_words",
    "language", "language_score",
)
KEPT = 0  # a document's (or a sentence's) code: 0 kept, i + 1 dropped for REASONS[i]
CODE = {reason: i + 1 for i, reason in enumerate(REASONS)}
ELLIPSES = ("...", "…")


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """One set of document rules; `FilterConfig.rules` says which source gets which. The module docstring says what
    each rule measures and in which order; null (or false) turns a rule off; the defaults are TurkuNLP's rules alone.
    Gopher's repetition rules look at the document as it came, the others at the lines kept."""
    max_duplicate_paragraph_share: float | None = None  # Gopher: paragraphs equal to an earlier one / paragraphs
    max_duplicate_paragraph_char_share: float | None = None  # Gopher: their characters / the document's characters
    max_duplicate_line_share: float | None = None  # Gopher: lines equal to an earlier one / lines
    max_duplicate_line_char_share: float | None = None  # Gopher: their characters / the document's characters
    # Gopher: n -> the most frequent word n-gram's characters x its count / the document's characters, at most
    max_top_ngram_share: dict[int, float] = dataclasses.field(default_factory=dict)
    # Gopher: n -> the characters of the word n-grams seen earlier in the document / its characters, at most
    max_duplicate_ngram_share: dict[int, float] = dataclasses.field(default_factory=dict)
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
    min_mean_word_length: float | None = None  # Gopher: mean characters per word, at least
    max_mean_word_length: float | None = None  # Gopher: mean characters per word, at most
    min_stop_words: int | None = None  # Gopher: words of stop_words, at least (skipped while stop_words is empty)
    min_language_score: float | None = None  # the language identifier's probability of the language, at least

    def __post_init__(self):
        for name in ("max_top_ngram_share", "max_duplicate_ngram_share"):  # the config layers give the keys as text
            shares = {int(n) if str(n).isdigit() else n: share for n, share in getattr(self, name).items()}
            object.__setattr__(self, name, dict(sorted(shares.items(), key=lambda item: str(item[0]).zfill(20))))

    def check_ranges(self, prefix: str) -> None:
        """SettingError naming `prefix` + the key of the first value out of its range."""
        for name in ("min_avg_words", "min_sentences", "max_sentences", "min_tokens", "max_tokens", "min_words",
                     "min_mean_word_length", "max_mean_word_length", "min_stop_words"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise SettingError(f"{prefix}{name}", f"must not be negative, got {value}")
        shares = [(name, getattr(self, name)) for name in (
            "max_duplicate_paragraph_share", "max_duplicate_paragraph_char_share", "max_duplicate_line_share",
            "max_duplicate_line_char_share", "max_no_word_ratio", "max_punct_ratio", "max_upper_ratio",
            "max_digit_ratio", "max_foreign_ratio", "min_language_score")]
        for name in ("max_top_ngram_share", "max_duplicate_ngram_share"):
            for n, share in getattr(self, name).items():
                if not (isinstance(n, int) and n >= 2):
                    raise SettingError(f"{prefix}{name}.{n}", "n must be a whole number of words, 2 or more")
                shares.append((f"{name}.{n}", share))
        for name, value in shares:
            if value is not None and not 0.0 <= value <= 1.0:
                raise SettingError(f"{prefix}{name}", f"{value} is not between 0 and 1")

    @functools.cached_property
    def repetition(self) -> bool:
        """Whether a repetition rule is on."""
        return any(v is not None for v in (
            self.max_duplicate_paragraph_share, self.max_duplicate_paragraph_char_share,
            self.max_duplicate_line_share, self.max_duplicate_line_char_share)) \
            or bool(self.max_top_ngram_share or self.max_duplicate_ngram_share)

    @functools.cached_property
    def line_rules(self) -> bool:
        """Whether a line rule is on."""
        return (self.drop_lines_without_terminal_punctuation or self.drop_lorem_ipsum or self.drop_javascript_lines
                or self.drop_curly_bracket or self.drop_policy_lines)


@dataclasses.dataclass
class Verdict:
    """What the rules make of a document."""
    code: int  # KEPT, or the code of the reason the document is dropped
    kept_tokens: float  # tokens of the sentences kept (letters of unspaced scripts count fractions)
    sentence_codes: np.ndarray | None = None  # int8 per sentence: KEPT, or the rule that dropped it; None: all kept
    tokens: np.ndarray | None = None  # float64 per sentence: its tokens, where sentences were dropped or cut
    # a kept document's pieces: the first sentence of each, counted among the sentences kept
    starts: list[int] = dataclasses.field(default_factory=lambda: [0])


COUNTED = UPPER | DIGIT | PUNCT | LETTER  # the flags (pipeline.words) rule 3 counts
# FLAG_SUMS[flags & COUNTED] -> which of (upper, digit, punct, letter) a character with those flags counts for
FLAG_SUMS = np.array([[bool(f & flag) for flag in (UPPER, DIGIT, PUNCT, LETTER)] for f in range(COUNTED + 1)],
                     dtype=np.int64)


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
            self.flags = self.flags.copy()  # letters of the alphabet are not foreign
            self.flags[[ord(c) for c in alphabet + upper]] &= ~np.uint16(LETTER)
        else:
            self.word = re.compile(r"\b[^\W\d_]{2,}\b")
        # the words of the repetition and word rules (module docstring): word characters, and letters of unspaced
        # scripts each a word of its own where chars_per_word is set
        self.own_word_flag = UNSPACED if config.chars_per_word is not None else 0
        self.stop_words = np.unique(self.plain_words(" ".join(config.stop_words))[1])
        self.policy_phrases = tuple(p.casefold() for p in config.policy_phrases)
        self.terminal_punctuation = tuple(config.terminal_punctuation)

    def judge(self, sentences: list[str], rules: RuleSet, paragraphs: list[list[int]] | None = None) -> Verdict:
        """The verdict of `rules` on a document; `paragraphs` is its record's PARAGRAPHS (None: one paragraph, a
        line a sentence)."""
        c = self.config
        # (sentence with unspaced-script letters blanked, words they make): the sentence itself and 0 in spaced text
        counted = ([(s, 0) for s in sentences] if c.chars_per_word is None else
                   [(rest, letters / c.chars_per_word) for rest, letters in map(split_unspaced, sentences)])
        rest = "\n".join(r for r, _ in counted)
        unspaced_words = sum(w for _, w in counted)
        verdict = Verdict(KEPT, len(rest.split()) + unspaced_words)
        words = None  # the words of rules 1 and 4, once found
        if rules.repetition or rules.line_rules:
            line_sizes = [n for paragraph in paragraphs for n in paragraph] if paragraphs else [1] * len(sentences)
            bounds = np.cumsum([0] + line_sizes)
            lines = [" ".join(sentences[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
            if rules.repetition:
                verdict.code, words = self._repetition(rules, lines, paragraphs)
                if verdict.code:
                    return verdict
        if rules.line_rules:
            verdict.code, line_codes = self._line_rules(rules, lines)
            if verdict.code:
                return verdict
            if any(line_codes):
                verdict.sentence_codes = np.repeat(np.array(line_codes, np.int8), line_sizes)
        split = c.long_documents == "split" and rules.max_tokens is not None and verdict.kept_tokens > rules.max_tokens
        if verdict.sentence_codes is not None or split:  # the tokens of each sentence are needed
            verdict.tokens = np.fromiter((len(r.split()) + w for r, w in counted), np.float64, len(sentences))
        if split and verdict.tokens.max() > rules.max_tokens:
            if verdict.sentence_codes is None:
                verdict.sentence_codes = np.zeros(len(sentences), np.int8)
            verdict.sentence_codes[(verdict.tokens > rules.max_tokens) & (verdict.sentence_codes == KEPT)] = \
                CODE["max_tokens"]
        if verdict.sentence_codes is not None:
            kept = verdict.sentence_codes == KEPT
            verdict.kept_tokens = verdict.tokens[kept].sum()
            if not kept.any():
                verdict.code = int(np.bincount(verdict.sentence_codes).argmax())
                return verdict
            sentences = [s for s, k in zip(sentences, kept) if k]
            counted = [x for x, k in zip(counted, kept) if k]
            rest = "\n".join(r for r, _ in counted)
            unspaced_words = sum(w for _, w in counted)
            words = None
        verdict.code = self._turku(rules, sentences, counted, rest, unspaced_words, verdict.kept_tokens) \
            or self._words(rules, sentences, words) or self._language(rules, sentences)
        if verdict.code == KEPT and split:
            tokens = verdict.tokens if verdict.sentence_codes is None else verdict.tokens[kept]
            verdict.starts = piece_starts(tokens, rules.max_tokens, rules.max_sentences)
        return verdict

    def _repetition(self, r: RuleSet, lines: list[str], paragraphs: list[list[int]] | None
                    ) -> tuple[int, tuple[np.ndarray, np.ndarray] | None]:
        """(KEPT or the code of the first failing repetition rule, the document's plain_words if they were needed)."""
        chars = sum(map(len, lines)) + len(lines) - 1  # of the lines, one newline between two
        if r.max_duplicate_paragraph_share is not None or r.max_duplicate_paragraph_char_share is not None:
            bounds = np.cumsum([0] + [len(p) for p in paragraphs or [lines]])
            texts = ["\n".join(lines[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
            repeated, repeated_chars = _repeats(texts)
            if _over(repeated / len(texts), r.max_duplicate_paragraph_share):
                return CODE["duplicate_paragraphs"], None
            if _over(repeated_chars / chars, r.max_duplicate_paragraph_char_share):
                return CODE["duplicate_paragraph_chars"], None
        repeated, repeated_chars = _repeats(lines)
        if _over(repeated / len(lines), r.max_duplicate_line_share):
            return CODE["duplicate_lines"], None
        if _over(repeated_chars / chars, r.max_duplicate_line_char_share):
            return CODE["duplicate_line_chars"], None
        if not (r.max_top_ngram_share or r.max_duplicate_ngram_share):
            return KEPT, None
        words = self.plain_words("\n".join(lines))
        return ngram_code(*words, chars, r.max_top_ngram_share, r.max_duplicate_ngram_share), words

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

    def _turku(self, r: RuleSet, sentences: list[str], counted: list[tuple[str, float]], rest: str,
               unspaced_words: float, token_count: float) -> int:
        """Rule 3 on the sentences kept: `counted` and `rest` as judge makes them, and their tokens."""
        c = self.config
        n = len(sentences)
        text = "\n".join(sentences)
        words = len(self.word.findall(rest)) + unspaced_words
        chars = len(text) - (n - 1)
        upper, digit, punct, foreign = np.bincount(
            self.flags[np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)] & COUNTED,
            minlength=len(FLAG_SUMS)) @ FLAG_SUMS
        capped = c.long_documents == "drop"  # split: long documents are cut, not dropped
        checks = (
            ("avg_words", r.min_avg_words is not None and words / n < r.min_avg_words),
            ("min_sentences", r.min_sentences is not None and n < r.min_sentences),
            ("max_sentences", capped and r.max_sentences is not None and n > r.max_sentences),
            ("min_tokens", r.min_tokens is not None and token_count < r.min_tokens),
            ("max_tokens", capped and r.max_tokens is not None and token_count > r.max_tokens),
            ("no_word_ratio", r.max_no_word_ratio is not None
             and sum(not w and self.word.search(s) is None for s, w in counted) / n > r.max_no_word_ratio),
            ("punct_ratio", r.max_punct_ratio is not None and punct / chars > r.max_punct_ratio),
            ("upper_ratio", r.max_upper_ratio is not None and upper / chars > r.max_upper_ratio),
            ("digit_ratio", r.max_digit_ratio is not None and digit / chars > r.max_digit_ratio),
            ("foreign_ratio", r.max_foreign_ratio is not None and c.word_chars is not None
             and foreign / chars > r.max_foreign_ratio),
            ("min_words", r.min_words is not None and words < r.min_words),
        )
        return next((CODE[reason] for reason, failed in checks if failed), KEPT)

    def _words(self, r: RuleSet, sentences: list[str], words: tuple[np.ndarray, np.ndarray] | None) -> int:
        """Rule 4 on the sentences kept, whose `words` (plain_words) may be known already."""
        stop_words = r.min_stop_words is not None and len(self.stop_words)
        if r.min_mean_word_length is None and r.max_mean_word_length is None and not stop_words:
            return KEPT
        lengths, hashes, _ = self.plain_words(" ".join(sentences)) if words is None else words
        mean = lengths.mean() if len(lengths) else 0.0
        if _over(mean, r.max_mean_word_length) or _under(mean, r.min_mean_word_length):
            return CODE["mean_word_length"]
        if stop_words and np.isin(hashes, self.stop_words).sum() < r.min_stop_words:
            return CODE["stop_words"]
        return KEPT

    def plain_words(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(characters, hash) of each word of the casefolded `text`, in order, and the characters between each word
        and the next: the words of rules 1 and 4, found with the character table instead of a regex, hashed as the
        polynomial of their code points (pipeline.words.word_hashes)."""
        codes = np.frombuffer(text.casefold().encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        flags = self.flags[codes]
        single = (flags & self.own_word_flag).astype(bool)
        word = (flags & WORD).astype(bool) | single
        after_word = np.concatenate(([False], word[:-1]))
        after_single = np.concatenate(([False], single[:-1]))
        starts = np.flatnonzero(word & (~after_word | single | after_single))
        chars = codes[word].astype(np.uint64)
        lengths = np.diff(np.append(np.cumsum(word)[starts] - 1, len(chars)))
        return lengths, word_hashes(chars, np.cumsum(lengths) - lengths), starts[1:] - starts[:-1] - lengths[:-1]

    def _language(self, r: RuleSet, sentences: list[str]) -> int:
        if not self.check_language:
            return KEPT
        label, probability = identifier(self.config.langid)[0](" ".join(sentences)[:self.config.langid_chars],
                                                                r.min_language_score is not None)
        if label != self.language:
            return CODE["language"]
        return CODE["language_score"] if _under(probability, r.min_language_score) else KEPT


def _over(value: float, limit: float | None) -> bool:
    return limit is not None and value > limit


def _under(value: float, limit: float | None) -> bool:
    return limit is not None and value < limit


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


NGRAM_HASH_FACTOR = np.uint64(0x9E3779B97F4A7C15)  # odd: an n-gram's hash is its words' hashes in base this


def ngram_code(lengths: np.ndarray, ids: np.ndarray, gaps: np.ndarray, chars: int, top: dict[int, float],
               duplicate: dict[int, float]) -> int:
    """The code of the first failing n-gram rule (top_ngram and duplicate_ngrams, n in increasing order) for a text
    of `chars` characters whose words have these lengths, hashes and gaps (DocumentChecker.plain_words), or KEPT.
    An n-gram's characters are those of the text from its first word to its last (with the spaces between, as Gopher
    counts them, and none between letters of unspaced scripts). Vectorised: an n-gram is the hash of its words'
    hashes; np.unique finds the repeats."""
    cumulative = np.concatenate(([0], np.cumsum(lengths)))
    cumulative_gaps = np.concatenate(([0], np.cumsum(gaps)))
    hashes = ids
    bound = 1.0  # the share of repeated n-grams of the n to come is at most this
    for n in range(2, max([*top, *duplicate]) + 1):
        hashes = hashes[:-1] * NGRAM_HASH_FACTOR + ids[n - 1:]
        if not len(hashes):
            break
        if n in top:
            _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
            count = counts[inverse]
            spans = cumulative[n:] - cumulative[:-n] + cumulative_gaps[n - 1:] - cumulative_gaps[:1 - n]
            ngram_chars = spans * count
            if ngram_chars[count > 1].max(initial=0) / chars > top[n]:
                return CODE["top_ngram"]
        if n in duplicate and duplicate[n] < bound:
            _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
            repeats = np.flatnonzero(first[inverse] != np.arange(len(hashes)))
            depth = np.zeros(len(ids) + 1, np.int64)  # +1 where a repeat starts, -1 after its last word
            depth[repeats] += 1
            depth[repeats + n] -= 1
            covered = np.cumsum(depth[:-1]) > 0
            share = (lengths[covered].sum() + gaps[covered[1:] & covered[:-1]].sum()) / chars  # words, gaps within
            if share > duplicate[n]:
                return CODE["duplicate_ngrams"]
            bound = share  # the words of repeated longer n-grams are among these: their share is at most this
    return KEPT


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
