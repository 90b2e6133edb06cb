"""What a word is in scripts written without spaces between words, for the filter's rules and tokens-per-word figures.

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
import sys
import unicodedata

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


@functools.cache
def _unspaced_punctuation() -> re.Pattern:
    """A run of punctuation marks right after or right before a letter of an unspaced script (「東京」、): a word
    segmenter makes no word of it, while as a token each would count (Japanese prose: 1.15 words a word)."""
    punctuation = _char_class([c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "P"])
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
