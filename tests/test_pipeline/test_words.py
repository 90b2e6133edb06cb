"""pipeline/words.py: the one table of what a code point is, and the one word hash, that the filter and dedup share."""
import string
import sys
import unicodedata

import numpy as np

from pipeline import words
from pipeline.stages.dedup.minhash import Shingler, fmix64
from pipeline.stages.filter.rules import DocumentChecker
from pipeline.stages.filter.stage import FilterConfig


def test_character_flags_say_what_unicode_and_str_say_of_every_code_point():
    flags = words.character_flags()
    assert flags.shape == (sys.maxunicode + 1,)
    categories = [unicodedata.category(chr(code)) for code in range(sys.maxunicode + 1)]
    expected = {
        words.TOKEN: [c[0] in "LMN" for c in categories],
        words.DECIMAL: [c == "Nd" for c in categories],
        words.UNICODE_PUNCT: [c[0] == "P" for c in categories],
        words.UPPER: [chr(code).isupper() for code in range(sys.maxunicode + 1)],
        words.DIGIT: [chr(code).isdigit() for code in range(sys.maxunicode + 1)],
        words.WORD: [chr(code).isalnum() or code == ord("_") for code in range(sys.maxunicode + 1)],
        words.LETTER: [chr(code).isalnum() and not chr(code).isdecimal() for code in range(sys.maxunicode + 1)],
        words.PUNCT: [chr(code) in string.punctuation for code in range(sys.maxunicode + 1)],
    }
    for flag, column in expected.items():
        assert np.array_equal((flags & flag) != 0, column), flag
    assert np.flatnonzero(flags & words.UNSPACED).tolist() == words.UNSPACED_LETTER_CODES
    assert np.flatnonzero(flags & words.BERT_CJK).tolist() == sorted(
        code for first, last in words.BERT_CJK_BLOCKS for code in range(first, last + 1))


def test_a_character_is_a_token_of_its_own_in_dedup_where_it_is_a_word_of_its_own_in_the_filter():
    checker = DocumentChecker(FilterConfig(chars_per_word=1.7), "ja", check_language=False)
    shingler = Shingler(ngram=2, bands=2, rows=2, seed=1, characters=True)
    # Han, kana, Thai letters; a Thai digit; Khmer lunar-date symbols (numbers, not letters: dedup once split them)
    for text in ["東京", "ひらがな", "ภาษา", "๑๒", "\u17f0\u17f1", "abc"]:
        assert shingler.token_counts([text])[0] == len(checker.tokens(text).lengths), text


def test_a_word_hashes_as_the_polynomial_of_its_code_points_wherever_it_stands():
    texts = ["alma", "x", "körte" * 3, "東"]
    codes = np.array([ord(c) for text in texts for c in text], np.uint64)
    starts = np.cumsum([0] + [len(t) for t in texts[:-1]])
    expected = [sum(ord(c) * int(words.WORD_HASH_BASE) ** i for i, c in enumerate(t)) % 2 ** 64 for t in texts]
    assert words.word_hashes(codes, starts).tolist() == expected
    assert words.word_hashes(codes[starts[2]:], starts[2:] - starts[2]).tolist() == expected[2:]
    assert words.word_hashes(np.zeros(0, np.uint64), np.zeros(0, np.int64)).tolist() == []


def test_the_filter_and_dedup_hash_a_word_alike():
    checker = DocumentChecker(FilterConfig(), "hu", check_language=False)
    shingler = Shingler(ngram=2, bands=2, rows=2, seed=1, characters=False)
    text = "Az alma nem esik messze a fájától"
    assert shingler.tokens([text])[0].tolist() == fmix64(checker.tokens(text.casefold()).hashes).tolist()
