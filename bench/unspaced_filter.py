"""Documents and sentences the filter keeps of Japanese and Chinese text (languages written without spaces), with
their profiles (`ja`, `zh`: `filter.chars_per_word`) and without them (the default profile: TurkuNLP's rules count
space-separated words). The text is ours (tests/support/unspaced_text.py: prose and garbage): no real jawiki or zhwiki dump
can be fetched here. The rows of docs/pipeline.md ("Languages without spaces").

Usage: python bench/unspaced_filter.py [--smoke]   (the data is small: --smoke runs the same)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from pipeline.stages.filter.rules import RuleSet  # noqa: E402
from pipeline.stages.filter.stage import FilterConfig  # noqa: E402
from pipeline.tools.sample_dump import Page, write_multistream  # noqa: E402
from unspaced_text import GARBAGE_JA, GARBAGE_ZH, JA, ZH, unspaced  # noqa: E402

SPACED = ("English",)  # garbage documents written with spaces as they are


def pages(documents: dict[str, list[str]], first_id: int, prose: bool) -> list[Page]:
    """One page per document: prose as one paragraph, lists and tables one line per paragraph."""
    return [Page(id=first_id + i, title=title, ns=0, kind="article",
                 text=("" if prose else "\n\n").join(sentences if title in SPACED else unspaced(sentences)))
            for i, (title, sentences) in enumerate(documents.items())]


def filter_counts(lang: str, dump: Path, work: Path, profile: bool) -> tuple[int, int, int, int] | str:
    """(documents in, kept, sentences in, kept) after `pipeline run --to filter` with the profile, or with the
    default profile's filter rules (TurkuNLP's); the error line of a run that keeps nothing."""
    defaults = {"chars_per_word": FilterConfig.chars_per_word,
                **{f"rule_sets.wikipedia.{key}": getattr(RuleSet, key)
                   for key in ("max_punct_ratio", "max_upper_ratio", "max_digit_ratio")}}
    settings = [] if profile else [item for key, value in defaults.items()
                                   for item in ("--set", f"filter.{key}={json.dumps(value)}")]
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", lang, "--dump", str(dump),
                           "--workdir", str(work), "--to", "filter", "--quiet", *settings],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return done.stderr.strip().splitlines()[-1]
    sentences = json.loads((work / lang / "sentences" / "_manifest.json").read_text())["counts"]
    kept = json.loads((work / lang / "filter" / "_manifest.json").read_text())["counts"]
    return kept["documents_in"], kept["documents_kept"], sentences["sentences"], kept["sentences_kept"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="the same run (the data is small)")
    parser.parse_args()
    print("| text | rules | documents in | kept | sentences in | kept |")
    print("|---|---|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        for wiki, lang, prose, garbage in (("jawiki", "ja", JA, GARBAGE_JA), ("zhwiki", "zh", ZH, GARBAGE_ZH)):
            dump = Path(tmp) / f"{wiki}-sample-pages-articles-multistream.xml.bz2"
            write_multistream(pages(prose, 1, True) + pages(garbage, 1 + len(prose), False), dump,
                              Path(tmp) / f"{wiki}-sample-pages-articles-multistream-index.txt.bz2")
            for profile in (False, True):
                counts = filter_counts(lang, dump, Path(tmp) / f"{lang}-{profile}", profile)
                rules = f"`{lang}` profile" if profile else "words between spaces"
                row = " | ".join(f"{n:,}" for n in counts) if isinstance(counts, tuple) else f"{counts} | | |"
                print(f"| {lang}: our prose + garbage | {rules} | {row} |")


if __name__ == "__main__":
    main()
