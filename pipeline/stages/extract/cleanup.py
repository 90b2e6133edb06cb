"""What extract changes in wikiextractor's text: heading lines in scripts written without spaces, and brackets that
templates left empty.

- Headings. wikiextractor ends each heading line with "." unless it ends in "!" or "?" ("Története."), so that the
  sentence splitter ends the heading there. A heading mostly in a script written without spaces (Han, kana, Thai ...:
  `pipeline/words.py`) keeps no such period ("歴史", not "歴史."): such scripts never end a sentence with a Latin
  period, and a line ends its sentence anyway. Other headings are wikiextractor's, byte for byte.
- Brackets. A template that expands to nothing (one wikiextractor cannot expand, e.g. a Lua module, or one not in
  the dump) leaves its brackets and separators: "Lybster () is", "Savas (; ; born 1952)", "東京都（）は",
  "（、1950年 - ）", "（しんじゅく、）". Removed: a bracket holding nothing but spaces, or two or more separators
  (, ; 、 ， ；) and spaces; separators right after an opening bracket; separators right before a full-width closing
  one. An ASCII bracket goes only after a word and a space or right after a letter of a script written without
  spaces: code ("HAMIS()") and a bracket after other punctuation stay. A bracket holding anything else stays, one
  separator included: "(-)", "(2.)", "pontosvesszővel (;)", "読点（、）" name a symbol (so a template's lone "(;)"
  stays too).
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator

from pipeline.words import UNSPACED_LETTER

HEADING_MARK = "## "  # how wikiextractor marks a heading line (clean_text's mark_headers)

_SEPARATORS = ",;、，；"
_EMPTY = rf" *(?:(?:[{_SEPARATORS}] *){{2,}})?"  # spaces, or two or more separators
_EMPTY_BRACKET = re.compile(rf"( *)(?:\({_EMPTY}\)|（{_EMPTY}）)")
_LEADING_SEPARATORS = re.compile(rf"([(（]) *[{_SEPARATORS}][ {_SEPARATORS}]*(?=[^ {_SEPARATORS})）])")
_TRAILING_SEPARATORS = re.compile(rf"(?<=[^ {_SEPARATORS}（]) *[{_SEPARATORS}][ {_SEPARATORS}]*(?=）)")
# What the three start or end with, as two searches that scan fast (a literal first, a rare character): most
# lines hold none, and the three substitutions would scan them at a tenth of the speed.
_ASCII_START = re.compile(rf"\([ {_SEPARATORS})]")
_FULL_WIDTH = re.compile(rf"（[ {_SEPARATORS}）]|[{_SEPARATORS}] *）")
_WORD_END = re.compile(r"[\w)\]}\"'”’»]")  # what an ASCII "()" after a space is removed after


def article_lines(paragraphs: Iterable[str]) -> Iterator[str]:
    """The non-empty lines of an article from wikiextractor's paragraphs (headings marked with HEADING_MARK)."""
    for paragraph in paragraphs:
        if paragraph.startswith(HEADING_MARK):
            paragraph = heading_line(paragraph[len(HEADING_MARK):])
        line = drop_empty_brackets(paragraph).strip()
        if line:
            yield line


def heading_line(marked: str) -> str:
    """The line of a heading that wikiextractor wrote as `marked` (its title, and "." unless that ends in ! or ?)."""
    title = marked[:-1] if marked and marked[-1] not in "!?" else marked
    unspaced = len(UNSPACED_LETTER.findall(title))
    return title if unspaced and 2 * unspaced >= sum(c.isalpha() for c in title) else marked


def drop_empty_brackets(text: str) -> str:
    if not (_ASCII_START.search(text) or ("（" in text or "）" in text) and _FULL_WIDTH.search(text)):
        return text
    text = _EMPTY_BRACKET.sub(_without_empty_bracket, text)
    text = _LEADING_SEPARATORS.sub(r"\1", text)
    return _TRAILING_SEPARATORS.sub("", text)


def _without_empty_bracket(m: re.Match) -> str:
    spaces = m.group(1)
    text, start, end = m.string, m.start(), m.end()
    before = text[start - 1] if start else ""
    if m.group()[len(spaces)] == "(" and not (_WORD_END.match(before) if spaces else UNSPACED_LETTER.match(before)):
        return m.group()
    return " " if spaces and end < len(text) and text[end].isalnum() else ""
