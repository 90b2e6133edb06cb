"""Text helpers shared by the stages: paragraph normalization and sentence splitters.

Two splitters, both taking a batch of normalized paragraphs and returning the sentences of each:

- `QuntokenSplitter`: Hungarian, with quntoken (the splitter of the e-magyar toolchain). Each call
  starts quntoken's pipe of binaries, so the stage feeds it large batches of paragraphs.
  quntoken sometimes joins the end of one paragraph to the next, and replaces characters outside its
  alphabet (CJK, private use, ...) with U+FFFD, so its output is only used for *where* sentences
  end: the sentences are cut from our own input by counting non-space characters, which quntoken
  preserves one for one. Paragraph ends always end a sentence.
- `RuleSplitter`: every other language, no download at run time. Rules in the style of the Moses
  splitter (Koehn & Schroeder), with our own per-language abbreviation lists and ordinal rules, kept as data
  in `pipeline/stages/sentences/sentence_rules.yaml`. A period, "!" or "?"
  followed by a space ends a sentence unless the next word starts with a lowercase letter or a
  symbol, or the word before is a known abbreviation, an initial ("J."), a dotted abbreviation
  ("U.S.", "i.e.") or, in languages that write ordinals with a period, an ordinal ("XIV.", a number
  before a number as in "2001. 02. 28.", a number in brackets "(2.)", a number after an article as in
  "a 27. Sampras–Agassi", and in German "3." before any word). A CJK full stop (。！？) ends a sentence without
  a space, together with the closing quotes and brackets after it (」』） ” ...); a straight quote after it closes
  only a quote the sentence opened, else it opens the next sentence (。"引用"... starts a sentence with "). It does
  not end one (`_ends_cjk_sentence`) inside a bracket or quote opened in the sentence that closes within
  BRACKET_LOOKAHEAD characters (「もう帰る。明日も来る。」と述べた), after a parenthesis opened in mid-sentence
  (该语言（由吉多开发。）很流行), before a comma or another terminator, or before one of the language's
  continuation particles after a closing quote or bracket (「明日も来る？」と言った; Japanese only).

Why our own rule splitter rather than a library: docs/performance.md (sentences and filter) compares it
with blingfire, syntok, sentence-splitter, sentencex and pysbd on 37 hand-written cases in 12 languages and on
agreement with quntoken. blingfire cannot be told a language's abbreviations ("Am 3. Oktober" splits, "i.e. a lot.
J. R. R. Tolkien" does not), sentencex splits Hungarian dates and ordinals. The rules are short, scan with C-speed
regexes, and users add abbreviations for their language in stages.yaml (`sentences.extra_abbreviations`).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import importlib.util
import itertools
import platform
import re
import shlex
import subprocess
from pathlib import Path

from wiki2bert_core.config import read_yaml
from wiki2bert_core.errors import ConfigError, DataError

# Control characters become spaces, invisible format characters (soft hyphen, zero-width space, word
# joiner, byte order mark) go, lone surrogates (only possible through JSON escapes) become U+FFFD so the
# text can be written as UTF-8; then runs of whitespace become one space.
_ODD = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u00ad\u200b\u2060\ufeff\ud800-\udfff]")
_ODD_REPLACEMENT = {**{chr(c): " " for c in [*range(0x20), *range(0x7f, 0xa0)]},
                    "\u00ad": "", "\u200b": "", "\u2060": "", "\ufeff": ""}


def normalize_paragraph(text: str) -> str:
    if text.isprintable() and "  " not in text:  # the common case: nothing to do but strip
        return text.strip(" ")
    text = _ODD.sub(lambda m: _ODD_REPLACEMENT.get(m.group(), "\ufffd"), text)
    return " ".join(text.split())


def split_paragraphs(text: str) -> list[str]:
    """The non-empty normalized paragraphs of an article text (paragraphs are separated by newlines)."""
    return [p for p in map(normalize_paragraph, text.split("\n")) if p]


def blank_line_runs(text: str) -> list[int]:
    """How many of the paragraphs of `split_paragraphs(text)` each run of them between blank lines holds."""
    runs = [0]
    for paragraph in map(normalize_paragraph, text.split("\n")):
        if paragraph:
            runs[-1] += 1
        elif runs[-1]:
            runs.append(0)
    return [n for n in runs if n]


# --- rule splitter -------------------------------------------------------------------------------

RULES_PATH = Path(__file__).resolve().parent / "sentence_rules.yaml"  # per-language abbreviations and ordinals


@dataclasses.dataclass(frozen=True)
class LanguageRules:
    """One language's entry of sentence_rules.yaml (see its header for what each field does)."""
    abbreviations: str = ""
    numeric_abbreviations: str = ""
    ordinal_period: bool = False
    ordinal_determiners: str = ""
    capitalized_ordinals: bool = False
    continuation_particles: str = ""


@functools.lru_cache(maxsize=None)
def language_rules(language: str) -> LanguageRules:
    entry = read_yaml(RULES_PATH).get(language) or {}
    try:
        return LanguageRules(**entry)
    except TypeError as e:
        raise ConfigError(f"{RULES_PATH}: {language}: {e}") from None


_CLOSERS = "'\"”’»)]"
_OPENERS = "'\"“„‘«([¿¡"
_CJK_CLOSERS = "」』）〕】〉》］｝"
_STRAIGHT_QUOTES = "'\""
# A sentence-final punctuation run, optional closing quotes/brackets, spaces, then the next word's
# first character after any opening punctuation or dialogue dash. CJK full stops need no space; the quotes and
# brackets after one are taken whole (possessive: never given back to the lookahead, which would split "。”" at the
# end of a paragraph between the full stop and its quote), and `_closing_length` decides which of them close.
# The lookahead of every terminator first lets the scan skip other characters about twice as fast.
_STOPS, _CJK_STOPS = ".!?…։؟۔।॥။።", "。！？｡"
_CANDIDATE = re.compile(
    rf"(?=[{_STOPS}{_CJK_STOPS}])"
    rf"(?:([{_STOPS}]+)([{re.escape(_CLOSERS)}]*) +(?=(?:[–—] )?[{re.escape(_OPENERS)}]*(\S))"
    rf"|([{_CJK_STOPS}]+)([{_CJK_CLOSERS}{re.escape(_CLOSERS)}]*+) *(?=\S))")
# Brackets and quotes whose nesting the CJK rules follow (straight quotes open and close alike: `_closing_length`),
# and the closers of the parentheses among them: a parenthesis opened in mid-sentence is an aside within it.
_PAIRS = dict(zip("（(［[〔【｛{「『“‘《〈«", "）)］]〕】｝}」』”’》〉»"))
_PARENTHESIS_CLOSERS = "）)］]〕】｝}"
_BRACKET = re.compile(f"[{re.escape(''.join(_PAIRS) + ''.join(_PAIRS.values()))}]")
# Characters that never start a sentence: a CJK full stop before one of them does not end its sentence.
_CONTINUING = ",;:、，；：。！？｡.!?"
_HIRAGANA = re.compile("[\u3041-\u309f]")
# How far ahead a bracket open at a CJK full stop must close for the full stop to stay inside the sentence: an
# unbalanced bracket, or one around several sentences, is split as if it were not there.
BRACKET_LOOKAHEAD = 200
_DOTTED = re.compile(r"^(?:[^\W\d_]{1,4}\.)+[^\W\d_]{1,4}$")  # U.S, i.e, Ph.D
_ROMAN = re.compile(r"^[IVXLCDM]+$")  # case-sensitive: "mix." is not a numeral


class RuleSplitter:
    """Rule-based sentence splitter for `language` (any code; unknown languages get no abbreviations)."""

    def __init__(self, language: str, extra_abbreviations: list[str] = ()):
        rules = language_rules(language)
        self.abbreviations = _word_set(rules.abbreviations.split() + list(extra_abbreviations))
        self.numeric_abbreviations = _word_set(rules.numeric_abbreviations.split())
        self.ordinal_period = rules.ordinal_period
        self.ordinal_determiners = _word_set(rules.ordinal_determiners.split())
        self.capitalized_ordinals = rules.capitalized_ordinals
        # one-kana particles continue a sentence only before a character that is not hiragana (と言った, but
        # ところが, もし start one); longer ones before anything (というのは)
        particles = rules.continuation_particles.split()
        self.particles = tuple(p for p in particles if len(p) > 1)
        self.one_kana_particles = frozenset(p for p in particles if len(p) == 1)

    def split(self, paragraphs: list[str]) -> list[list[str]]:
        return [self.split_paragraph(p) for p in paragraphs]

    def split_paragraph(self, text: str) -> list[str]:
        sentences, start = [], 0
        for m in _CANDIDATE.finditer(text):
            if m.group(4) is None:
                if not self._ends_sentence(text, m):
                    continue
                end = m.end(2)
            else:
                stop_end = m.end(4)
                closers = m.group(5)
                end = stop_end + (_closing_length(text[start:stop_end], closers) if closers else 0)
                # the usual full stop (before a letter, no bracket or quote in its sentence) ends it; others are checked
                if (end > stop_end or text[m.end()] in _CONTINUING or _BRACKET.search(text, start, end)) and \
                        not self._ends_cjk_sentence(text, m, start, end):
                    continue
            sentences.append(text[start:end].strip())
            start = end
        tail = text[start:].strip()
        if tail:
            sentences.append(tail)
        return sentences

    def _ends_sentence(self, text: str, m: re.Match) -> bool:
        following = m.group(3)
        if following.islower() or not following.isalnum():  # "2021. márc.", "... * szám"
            return False
        if m.group(1) != ".":  # "!", "?", "..."
            return True
        word_start = text.rfind(" ", 0, m.start()) + 1
        raw = text[word_start:m.start()].lstrip(_OPENERS)
        word = raw.lower()
        ordinal = self.ordinal_period and (raw.isdigit() or _ROMAN.match(raw))
        if m.group(2):  # a period inside quotes/brackets ends a sentence, but for an ordinal in brackets: "(2.)"
            return not (ordinal and m.group(2)[0] in ")]")
        if word in self.abbreviations:
            return False
        if following.isdigit() and word in self.numeric_abbreviations:
            return False
        if len(raw) == 1 and raw.isupper():  # initials: "J. R. R. Tolkien"
            return False
        if "." in word and _DOTTED.match(word):
            return False
        if self.ordinal_period and (_ROMAN.match(raw) or (raw.isdigit() and following.isdigit())):
            return False
        if ordinal and raw.isdigit() and self.ordinal_determiners:  # "a 27. Sampras–Agassi döntő"
            previous = text[text.rfind(" ", 0, max(0, word_start - 1)) + 1:max(0, word_start - 1)]
            if previous.lower() in self.ordinal_determiners:
                return False
        if self.capitalized_ordinals and raw.isdigit() and len(raw) <= 2:
            return False
        return True

    def _ends_cjk_sentence(self, text: str, m: re.Match, start: int, end: int) -> bool:
        """Whether the CJK full stop of candidate `m`, with its closers up to `end`, ends the sentence that began at
        `start` (see the module docstring)."""
        stop_end = m.end(4)
        following = m.end() if end == m.end(5) else end  # the next non-space character
        if text[following] in _CONTINUING or (end > stop_end and self._continues(text, following)):
            return False
        # the brackets and quotes open in the sentence before the full stop, and whether the one that opens the
        # sentence (if it starts with one) is among them: the first pushed, the last popped
        first = start
        while text[first] == " ":
            first += 1
        opened, first_open = [], text[first] in _PAIRS
        for char in _BRACKET.findall(text, start, stop_end):
            if char in _PAIRS:
                opened.append(char)
            elif opened and _PAIRS[opened[-1]] == char:  # a closer that closes nothing is ignored
                opened.pop()
                first_open = first_open and bool(opened)
        closed_aside = False  # a parenthesis opened in mid-sentence closes after the full stop
        for char in text[stop_end:end]:
            if opened and _PAIRS[opened[-1]] == char:
                opened.pop()
                closed_aside |= char in _PARENTHESIS_CLOSERS and (bool(opened) or not first_open)
                first_open = first_open and bool(opened)
        if opened and text.find(_PAIRS[opened[-1]], end, end + BRACKET_LOOKAHEAD) >= 0:
            return False  # inside a bracket or quote that closes soon
        return not closed_aside or text[following] in _PAIRS or text[following] in _STRAIGHT_QUOTES

    def _continues(self, text: str, at: int) -> bool:
        """Whether a continuation particle starts at `at`."""
        if text[at] in self.one_kana_particles and not _HIRAGANA.match(text, at + 1):
            return True
        return text.startswith(self.particles, at)


def _closing_length(sentence: str, closers: str) -> int:
    """How many of the quotes and brackets after a CJK full stop belong to `sentence`: all of them, up to a straight
    quote that the sentence has not opened (an even number of them so far), which opens the next sentence."""
    for i, c in enumerate(closers):
        if c in _STRAIGHT_QUOTES and (sentence + closers[:i]).count(c) % 2 == 0:
            return i
    return len(closers)


def _word_set(words) -> frozenset[str]:
    return frozenset(w.lower().rstrip(".") for w in words)


# --- quntoken ----------------------------------------------------------------------------------

def check_quntoken() -> None:
    """DataError unless quntoken can run here (it ships Linux x86-64 binaries only)."""
    system, machine = platform.system(), platform.machine()
    if system != "Linux" or machine not in ("x86_64", "AMD64"):
        raise DataError(f"sentences.splitter=quntoken: quntoken ships Linux x86-64 binaries only "
                            f"(this is {system} {machine}); use --set sentences.splitter=rules")
    if importlib.util.find_spec("quntoken") is None:
        raise DataError("sentences.splitter=quntoken: quntoken is not installed "
                            "(pip install quntoken==3.3.2, or --set sentences.splitter=rules)")


def run_quntoken(text: str) -> tuple[str, str]:
    """(stdout, stderr) of quntoken's sentence pipeline (`quntoken.tokenize(form="spl", mode="sentence")`'s
    binaries) on `text`, its shell waited for: tokenize never waits for the shell it starts, which then stays a
    zombie until Python collects it, or outlives a worker process and waits for PID 1 to reap it."""
    from quntoken.quntoken import get_modules

    binaries = Path(importlib.util.find_spec("quntoken").origin).parent
    command = " | ".join(shlex.quote(str(binaries / f"qt_{module}"))
                         for module in get_modules("spl", "sentence", word_break=False))
    done = subprocess.run(command, shell=True, input=text, capture_output=True, encoding="utf-8")
    return done.stdout, done.stderr


class QuntokenSplitter:
    """Hungarian sentence splitting with quntoken; see the module docstring for the alignment."""

    def split(self, paragraphs: list[str]) -> list[list[str]]:
        if not paragraphs:
            return []
        # quntoken deletes zero-width joiners; dropping them first keeps the character counts equal.
        paragraphs = [p.replace("\u200d", "") for p in paragraphs]
        output, stderr = run_quntoken("".join(p + "\n\n" for p in paragraphs))
        sentences = output.split("\n")
        sentence_ends = list(itertools.accumulate(len(s) for s in output.replace(" ", "").split("\n")))
        paragraph_ends = list(itertools.accumulate(len(p) - p.count(" ") for p in paragraphs))
        if sentence_ends[-1:] != paragraph_ends[-1:]:
            problems = [line for line in stderr.splitlines()
                        if line.strip() and not line.startswith("invalid character")]
            raise DataError(f"quntoken returned {sum(sentence_ends[-1:]):,} non-space characters for "
                                f"{paragraph_ends[-1]:,}" + (f": {problems[0]}" if problems else ""))
        # Walk quntoken's lines (sentences and blank lines) along the paragraphs, by non-space offsets.
        result, j, start = [], 0, 0
        for paragraph, end in zip(paragraphs, paragraph_ends):
            first = j
            while sentence_ends[j] < end:
                j += 1
            line_start = sentence_ends[first - 1] if first else 0
            own = [s for s in sentences[first:j + 1] if s]
            if line_start == start and sentence_ends[j] == end and " ".join(own) == paragraph:
                result.append(own)  # the usual case: quntoken's sentences are the paragraph's
            else:  # a sentence runs across the paragraph end, or quntoken changed characters
                result.append(_cut(paragraph, [e - start for e in sentence_ends[first:j] if e > start]))
            while j < len(sentence_ends) and sentence_ends[j] == end:
                j += 1
            start = end
        return result


def _cut(paragraph: str, cuts: list[int]) -> list[str]:
    """Split a single-spaced paragraph after the given counts of non-space characters."""
    words = paragraph.split(" ")
    word_ends = list(itertools.accumulate(map(len, words)))
    pieces, prev = [], 0
    for cut in cuts:
        k = bisect.bisect_left(word_ends, cut)
        index = cut + k  # k spaces precede word k
        piece = paragraph[prev:index].strip()
        if piece:
            pieces.append(piece)
        prev = index
    piece = paragraph[prev:].strip()
    if piece:
        pieces.append(piece)
    return pieces


def make_splitter(name: str, language: str, extra_abbreviations: list[str] = ()):
    """The splitter for sentences.splitter `name` ("quntoken" or "rules")."""
    if name == "quntoken":
        check_quntoken()
        return QuntokenSplitter()
    return RuleSplitter(language, extra_abbreviations)
