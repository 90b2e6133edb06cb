"""What a character and a word are: the one table of code-point classes (the filter's counts and words, dedup's
tokens, BERT's CJK characters for the vocab stage), the one word hash, and words in scripts written without spaces
(the filter's rules, tokens-per-word figures).

TurkuNLP's rules count whitespace-separated tokens and words, which in Japanese, Chinese or Thai are whole clauses
or sentences. In such a script (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar), a word is counted as
`chars_per_word` of its letters (a language's mean word length, e.g. 1.7 characters in Japanese), punctuation marks
touching such a letter (、。「」（） and the like) are no words, and whatever else the text holds (Latin names, numbers,
punctuation between them) is counted as space-separated text. Text without letters of these scripts is counted
exactly as before, whatever `chars_per_word` is.
"""
from __future__ import annotations

import functools
import re
import string
import sys
import unicodedata

import numpy as np

# Blocks of the scripts written without spaces; only their letters and combining marks count (not Thai digits or
# the katakana middle dot ・, for example).
UNSPACED_BLOCKS = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3005, 0x3006),  # 々 〆
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x323AF),  # CJK Unified Ideographs Extensions B-H, Compatibility Ideographs Supplement
)
# The blocks BERT's tokenizer takes for CJK characters, each a word of its own (BertNormalizer's handle_chinese_chars,
# transformers' _is_chinese_char): ideographs of UNSPACED_BLOCKS, in BERT's list of 2018, which stops at extension E.
BERT_CJK_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                   (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _char_class(codes: list[int]) -> str:
    """A regex character class of the (sorted) code points `codes`, written as ranges."""
    ranges, start = [], codes[0]
    for previous, code in zip(codes, codes[1:] + [sys.maxunicode + 2]):
        if code != previous + 1:
            ranges.append(f"{re.escape(chr(start))}-{re.escape(chr(previous))}")
            start = code
    return f"[{''.join(ranges)}]"


UNSPACED_LETTER_CODES = [code for lo, hi in UNSPACED_BLOCKS for code in range(lo, hi + 1)
                         if unicodedata.category(chr(code))[0] in "LM"]
UNSPACED_LETTER_CLASS = _char_class(UNSPACED_LETTER_CODES)
UNSPACED_LETTER = re.compile(UNSPACED_LETTER_CLASS)  # one letter (or combining mark) of a script written without spaces


# the bits of character_flags: what TurkuNLP's rules count (str.isupper, str.isdigit, string.punctuation, a letter
# = a word character that is not a decimal digit or "_" (regex [^\W\d_]), a word character = regex \w) ...
UPPER, DIGIT, PUNCT, LETTER, WORD = 1, 2, 4, 8, 16
# ... a decimal digit (category Nd), a letter, mark or number (L, M, N: what a token is made of), a letter or mark
# of a script written without spaces (UNSPACED_LETTER_CODES), a punctuation mark of any script (category P), a CJK
# character to BERT (BERT_CJK_BLOCKS)
DECIMAL, TOKEN, UNSPACED, UNICODE_PUNCT, BERT_CJK = 32, 64, 128, 256, 512


@functools.cache
def character_flags() -> np.ndarray:
    """The flags of every code point (uint16, indexed by code point; built once per process, ~1 s)."""
    chars = np.arange(sys.maxunicode + 1, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")

    def where(test, codes: np.ndarray | None = None) -> np.ndarray:
        """test(c) of every character, or of those at `codes`."""
        selected = chars if codes is None else map(chars.__getitem__, codes)
        return np.fromiter(map(test, selected), bool, len(chars) if codes is None else len(codes))

    alnum = where(str.isalnum)
    flags = (UPPER * where(str.isupper) | WORD * alnum).astype(np.uint16)
    alnums = np.flatnonzero(alnum)  # digits are alphanumeric
    decimal, digit = where(str.isdecimal, alnums), where(str.isdigit, alnums)
    flags[alnums] |= (DIGIT * digit | DECIMAL * decimal | LETTER * ~decimal | TOKEN).astype(np.uint16)
    # letters and numbers are the alphanumeric characters, marks and punctuation printable ones that are not: the
    # category is looked up for these alone (~11,000; for every code point it would take most of the build)
    others = np.flatnonzero(where(str.isprintable) & ~alnum)
    kinds = np.array([unicodedata.category(chars[code])[0] for code in others])
    flags[others[kinds == "M"]] |= TOKEN
    flags[others[kinds == "P"]] |= UNICODE_PUNCT
    flags[ord("_")] |= WORD
    flags[[ord(c) for c in string.punctuation]] |= PUNCT
    flags[UNSPACED_LETTER_CODES] |= UNSPACED
    for first, last in BERT_CJK_BLOCKS:
        flags[first:last + 1] |= BERT_CJK
    return flags


WORD_HASH_BASE = np.uint64(0x100000001B3)  # odd: every power is odd, none is 0 mod 2**64
POWERS_CACHED = 1 << 20  # the tables of powers kept for the next calls: 16 MiB


@functools.cache
def _cached_powers() -> tuple[np.ndarray, np.ndarray]:
    return _powers(POWERS_CACHED)


def _powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    base = np.full(size, WORD_HASH_BASE, dtype=np.uint64)
    base[0] = 1
    inverse = np.full(size, np.uint64(pow(int(WORD_HASH_BASE), -1, 1 << 64)), dtype=np.uint64)
    inverse[0] = 1
    return np.cumprod(base, dtype=np.uint64), np.cumprod(inverse, dtype=np.uint64)


def word_hashes(codes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The hash of each word of `codes` (uint64 code points of words laid end to end; word k runs from starts[k] to
    the next start): its code points c_i as a polynomial, sum c_i * WORD_HASH_BASE**i mod 2**64 with i counted from
    the word's first character, so a word hashes the same wherever it stands."""
    if not len(starts):
        return np.zeros(0, np.uint64)
    powers, inverse_powers = _cached_powers() if len(codes) <= POWERS_CACHED else _powers(len(codes))
    # sum c_j B^j over the word's positions j in `codes`, then / B^start
    return np.add.reduceat(codes * powers[:len(codes)], starts) * inverse_powers[starts]


@functools.cache
def _unspaced_punctuation() -> re.Pattern:
    """A run of punctuation marks right after or right before a letter of an unspaced script (「東京」、): a word
    segmenter makes no word of it, while as a token each would count (Japanese prose: 1.15 words a word)."""
    punctuation = _char_class(np.flatnonzero(character_flags() & UNICODE_PUNCT).tolist())
    return re.compile(f"(?<={UNSPACED_LETTER_CLASS}){punctuation}+|{punctuation}+(?={UNSPACED_LETTER_CLASS})")


def split_unspaced(text: str) -> tuple[str, int]:
    """`text` with each letter of a script written without spaces, and each run of punctuation marks touching one,
    replaced by a space; and how many such letters there were."""
    rest, letters = UNSPACED_LETTER.subn(" ", text)
    if letters:
        rest = UNSPACED_LETTER.sub(" ", _unspaced_punctuation().sub(" ", text))
    return rest, letters


def count_words(text: str, chars_per_word: float) -> float:
    """Words of `text`: letters of unspaced scripts / chars_per_word, plus the whitespace-separated tokens of the
    rest (so a number or a punctuation run between them is one word, as in space-separated text)."""
    rest, letters = split_unspaced(text)
    return len(rest.split()) + letters / chars_per_word


def recorded_chars_per_word(filter_config: dict | None) -> float | None:
    """The chars_per_word the filter ran with, from its config as its manifest records it: how downstream figures
    count words the same way."""
    return (filter_config or {}).get("chars_per_word")
