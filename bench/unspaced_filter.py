"""Japanese and Chinese (languages written without spaces) through extract, sentences and filter, on text written for
the tests (tests/support/unspaced_text.py): no real jawiki or zhwiki dump can be fetched here. Three tables:

1. Documents and sentences the filter keeps, with the profiles (`ja`, `zh`: `filter.chars_per_word`) and without
   them (the default profile: TurkuNLP's rules count space-separated words): prose and garbage documents. The rows
   of docs/pipeline.md ("Languages without spaces").
2. What the splitter and extract make of jawiki- and zhwiki-style wikitext (JA_WIKITEXT, ZH_WIKITEXT: headings,
   quotations followed by particles, asides in parentheses, templates that leave empty brackets), counted on the
   sentences stage's output: boundaries before a particle after a closing quote or bracket, boundaries inside a
   bracket or quote that closes later in the paragraph, boundaries right after an aside in parentheses opened in
   mid-sentence (该语言（由吉多开发。） ‖ 很流行), sentences that start with punctuation, heading lines ending in a
   Latin period ("歴史."), sentences holding a bracket emptied by a template. With `--before DIR` (a checkout of
   other code, e.g. `git worktree add /tmp/before main`) the same runs with that code too, one row each.
3. With `--before`: the rule splitter's speed with each code (characters per CPU-second, best of 5 rounds,
   alternating, a process each; --smoke: 1 round on a tenth of the text) on the hand-written prose (few brackets),
   on the wikitext's paragraphs (a bracket or quote in nearly every sentence), and on the Hungarian prose of
   <data>/hu (bench/sentences_filter.py's paragraphs) where it exists.

Usage: python bench/unspaced_filter.py [--before DIR] [--data ../shared/data] [--smoke]
--smoke: the same, with this checkout as --before (the data is small).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from pipeline.stages.filter.rules import RuleSet  # noqa: E402
from pipeline.stages.filter.stage import FilterConfig  # noqa: E402
from pipeline.stages.sentences.splitters import split_paragraphs  # noqa: E402
from pipeline.text_files import iter_documents_with_records  # noqa: E402
from pipeline.tools.sample_dump import Page, write_multistream  # noqa: E402
from pipeline.words import UNSPACED_LETTER  # noqa: E402
from unspaced_text import GARBAGE_JA, GARBAGE_ZH, JA, JA_WIKITEXT, ZH, ZH_WIKITEXT, unspaced  # noqa: E402

SPACED = ("English",)  # garbage documents written with spaces as they are
# What the second table counts (its own definitions, not the splitter's)
PAIRS = dict(zip("（(［[〔【「『“‘《〈", "）)］]〕】」』”’》〉"))
PARENTHESIS_CLOSERS = "）)］]〕】"
PARTICLES = tuple("とはがをにのもでへや") + ("って",)  # Japanese particles that follow a quotation
STOPS = "。！？"
EMPTY_BRACKET = re.compile(r"[(（][ ,;、，；]*[)）]|[(（] *[,;、，；]|[,;、，；] *）")


def pages(documents: dict[str, list[str]], first_id: int, prose: bool) -> list[Page]:
    """One page per document: prose as one paragraph, lists and tables one line per paragraph."""
    return [Page(id=first_id + i, title=title, ns=0, kind="article",
                 text=("" if prose else "\n\n").join(sentences if title in SPACED else unspaced(sentences)))
            for i, (title, sentences) in enumerate(documents.items())]


def write_dump(directory: Path, wiki: str, lang: str, page_list: list[Page]) -> Path:
    dump = directory / f"{wiki}-sample-pages-articles-multistream.xml.bz2"
    write_multistream(page_list, dump, directory / f"{wiki}-sample-pages-articles-multistream-index.txt.bz2",
                      language=lang)
    return dump


def pipeline_run(code: Path, lang: str, dump: Path, work: Path, to: str, settings: list[str] = ()) -> str | None:
    """`pipeline run --to <to>` with the code of checkout `code`; the error line of a run that fails."""
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", lang, "--dump", str(dump),
                           "--workdir", str(work), "--to", to, "--quiet", "--workers", "1", *settings],
                          capture_output=True, text=True, cwd=code, env={**os.environ, "PYTHONPATH": str(code)})
    return done.stderr.strip().splitlines()[-1] if done.returncode else None


def filter_counts(lang: str, dump: Path, work: Path, profile: bool) -> tuple[int, int, int, int] | str:
    """(documents in, kept, sentences in, kept) after `pipeline run --to filter` with the profile, or with the
    default profile's filter rules (TurkuNLP's); the error line of a run that keeps nothing."""
    defaults = {"chars_per_word": FilterConfig.chars_per_word,
                **{f"rule_sets.wikipedia.{key}": getattr(RuleSet, key)
                   for key in ("max_punct_ratio", "max_upper_ratio", "max_digit_ratio")}}
    settings = [] if profile else [item for key, value in defaults.items()
                                   for item in ("--set", f"filter.{key}={json.dumps(value)}")]
    error = pipeline_run(ROOT, lang, dump, work, "filter", settings)
    if error:
        return error
    sentences = json.loads((work / lang / "sentences" / "_manifest.json").read_text())["counts"]
    kept = json.loads((work / lang / "filter" / "_manifest.json").read_text())["counts"]
    return kept["documents_in"], kept["documents_kept"], sentences["sentences"], kept["sentences_kept"]


# --- what the splitter and extract made of the wikitext ----------------------------------------------------------

def paragraph_sentences(lang_dir: Path):
    """(paragraph, [(start, end) of each of its sentences]) of every paragraph, from the extract and sentences stages'
    outputs (a rule splitter's sentence is a stripped slice of its paragraph)."""
    articles = {}
    for part in sorted((lang_dir / "extract").glob("part-*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            article = json.loads(line)
            articles[str(article["id"])] = split_paragraphs(article["text"])
    for part in sorted((lang_dir / "sentences").glob("part-*.txt")):
        for record, sentences in iter_documents_with_records(part):
            remaining = iter(sentences)
            for paragraph in articles[record.id]:
                spans, at = [], 0
                while at < len(paragraph):
                    sentence = next(remaining)
                    start = paragraph.index(sentence, at)
                    at = start + len(sentence)
                    spans.append((start, at))
                    at += len(paragraph[at:]) - len(paragraph[at:].lstrip(" "))
                yield paragraph, spans


def open_brackets(text: str, start: int, end: int) -> list[tuple[str, int]]:
    """(opener, position) of the brackets and quotes of text[start:end] left open (stray closers ignored)."""
    stack = []
    for i in range(start, end):
        if text[i] in PAIRS:
            stack.append((text[i], i))
        elif stack and PAIRS[stack[-1][0]] == text[i]:
            stack.pop()
    return stack


def splitting_figures(lang_dir: Path) -> dict[str, int]:
    counts = dict.fromkeys(("sentences", "particle after a closer", "inside brackets", "after an aside",
                            "start with punctuation", "heading with '.'", "empty brackets"), 0)
    for paragraph, spans in paragraph_sentences(lang_dir):
        for k, (start, end) in enumerate(spans):
            sentence = paragraph[start:end]
            counts["sentences"] += 1
            counts["start with punctuation"] += sentence[0] in STOPS + "、，"
            counts["heading with '.'"] += len(sentence) > 1 and sentence[-1] == "." and \
                bool(UNSPACED_LETTER.match(sentence[-2]))
            counts["empty brackets"] += bool(EMPTY_BRACKET.search(sentence))
            if k == len(spans) - 1:
                continue
            following = paragraph[spans[k + 1][0]:]
            counts["particle after a closer"] += sentence[-1] in PAIRS.values() and following.startswith(PARTICLES)
            inner = open_brackets(paragraph, 0, end)
            counts["inside brackets"] += bool(inner) and PAIRS[inner[-1][0]] in paragraph[end:]
            if sentence[-1] in PARENTHESIS_CLOSERS and len(sentence) > 2 and sentence[-2] in STOPS:
                opened = open_brackets(paragraph, start, end - 1)
                counts["after an aside"] += bool(opened) and opened[-1][1] > start
    return counts


# --- the rule splitter's speed, with each code -------------------------------------------------------------------

SPEED_CHILD = """
import json, sys, time
from pipeline.stages.sentences.splitters import RuleSplitter
lang, path = sys.argv[1:]
paragraphs = json.load(open(path, encoding="utf-8"))
split = RuleSplitter(lang).split_paragraph
start = time.process_time()
sentences = sum(len(split(p)) for p in paragraphs)
print(json.dumps([sum(map(len, paragraphs)), time.process_time() - start]))
"""


def splitter_rate(code: Path, lang: str, paragraphs_file: Path) -> float:
    """Characters per CPU-second of the rule splitter of checkout `code` on the paragraphs (a child process)."""
    done = subprocess.run([sys.executable, "-c", SPEED_CHILD, lang, str(paragraphs_file)], capture_output=True,
                          text=True, check=True, cwd=code, env={**os.environ, "PYTHONPATH": str(code)})
    characters, cpu = json.loads(done.stdout)
    return characters / cpu


def speed_table(codes: dict[str, Path], texts: dict[str, tuple[str, list[str]]], rounds: int, tmp: Path) -> None:
    print(f"\nrule splitter, characters per CPU-second, best of {rounds} alternating rounds (load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} cores):")
    print("| text | paragraphs | " + " | ".join(codes) + " | this / before |")
    print("|---|--:|" + "--:|" * len(codes) + "--:|")
    for label, (lang, paragraphs) in texts.items():
        path = tmp / f"speed-{lang}.json"
        path.write_text(json.dumps(paragraphs, ensure_ascii=False), encoding="utf-8")
        best = dict.fromkeys(codes, 0.0)
        for _ in range(rounds):
            for name, code in codes.items():
                best[name] = max(best[name], splitter_rate(code, lang, path))
        rates = list(best.values())
        print(f"| {label} | {len(paragraphs):,} | " + " | ".join(f"{r:,.0f}" for r in rates)
              + f" | {rates[-1] / rates[0]:.2f} |")


def hungarian_paragraphs(data: Path | None) -> list[str]:
    """bench/sentences_filter.py's Hungarian prose paragraphs (<data>/hu), or none where they are absent."""
    sys.path.insert(0, str(ROOT / "bench"))
    import sentences_filter

    sentences_filter.DATA = data or sentences_filter.DATA
    if not all((sentences_filter.DATA / f).is_file() for f in sentences_filter.HU_FILES):
        return []
    return sentences_filter.hungarian_paragraphs()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with (rows 'before')")
    parser.add_argument("--data", type=Path, help="the development data (default: ../shared/data beside the checkout)")
    parser.add_argument("--smoke", action="store_true", help="the same run, with this checkout as --before")
    options = parser.parse_args()
    before = ROOT if options.smoke else options.before
    codes = {"before": before.resolve(), "this checkout": ROOT} if before else {"this checkout": ROOT}
    print("| text | rules | documents in | kept | sentences in | kept |")
    print("|---|---|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for wiki, lang, prose, garbage in (("jawiki", "ja", JA, GARBAGE_JA), ("zhwiki", "zh", ZH, GARBAGE_ZH)):
            dump = write_dump(tmp, wiki, lang, pages(prose, 1, True) + pages(garbage, 1 + len(prose), False))
            for profile in (False, True):
                counts = filter_counts(lang, dump, tmp / f"{lang}-{profile}", profile)
                rules = f"`{lang}` profile" if profile else "words between spaces"
                row = " | ".join(f"{n:,}" for n in counts) if isinstance(counts, tuple) else f"{counts} | | |"
                print(f"| {lang}: our prose + garbage | {rules} | {row} |")

        print("\nsentences of jawiki- and zhwiki-style wikitext (tests/support/unspaced_text.py), per code:")
        columns = None
        paragraphs = {}
        for wiki, lang, wikitext in (("jawiki-wikitext", "ja", JA_WIKITEXT), ("zhwiki-wikitext", "zh", ZH_WIKITEXT)):
            (tmp / wiki).mkdir()
            dump = write_dump(tmp / wiki, wiki, lang, [Page(id=i, title=title, ns=0, kind="article", text=text)
                                                 for i, (title, text) in enumerate(wikitext.items(), 1)])
            for name, code in codes.items():
                work = tmp / wiki / name.replace(" ", "-")
                error = pipeline_run(code, lang, dump, work, "sentences")
                if error:
                    raise SystemExit(f"{name} ({code}): {error}")
                figures = splitting_figures(work / lang)
                if columns is None:
                    columns = list(figures)
                    print("| text | code | " + " | ".join(columns) + " |")
                    print("|---|---|" + "--:|" * len(columns))
                print(f"| {lang} | {name} | " + " | ".join(f"{figures[c]:,}" for c in columns) + " |")
            paragraphs[lang] = [p for p, _ in paragraph_sentences(work / lang)]
        if before:
            copies = 10 if options.smoke else 100
            texts = {"ja: prose": ("ja", ["".join(unspaced(s)) for s in JA.values()] * 5 * copies),
                     "ja: wikitext": ("ja", paragraphs["ja"] * copies),
                     "zh: prose": ("zh", ["".join(unspaced(s)) for s in ZH.values()] * 5 * copies),
                     "zh: wikitext": ("zh", paragraphs["zh"] * copies)}
            hungarian = hungarian_paragraphs(options.data)[:60 * copies]
            if hungarian:
                texts["hu: <data>/hu prose"] = ("hu", hungarian)
            speed_table(codes, texts, 1 if options.smoke else 5, tmp)


if __name__ == "__main__":
    main()
