"""Boundary agreement (F1) of the rule splitter with quntoken on Wikipedia paragraphs, and where they disagree.

Reads the paragraphs of an `extract` stage directory (e.g. of the huwiki dev dump), splits the first N with quntoken
and with RuleSplitter("hu"), and prints the F1 of the rule splitter's boundaries against quntoken's, then the
contexts of the boundaries only one of them makes (the rule splitter's false and missed boundaries).

Usage: .venv/bin/python bench/splitter_agreement.py <workdir>/hu/extract [--paragraphs 6000] [--show 20]
       .venv/bin/python bench/splitter_agreement.py --smoke   # on a generated sample dump's extract stage
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sentences_filter import agreement, boundaries  # noqa: E402 (bench/ is the script's directory)

from pipeline.stages.sentences.splitters import QuntokenSplitter, RuleSplitter, split_paragraphs  # noqa: E402


def context(paragraph: str, cut: int) -> str:
    """The text around the boundary after `cut` non-space characters."""
    seen = 0
    for i, char in enumerate(paragraph):
        seen += char != " "
        if seen == cut:
            return paragraph[max(0, i - 30):i + 25]
    return paragraph[-55:]


def print_agreement(extract: Path, first: int, show: int) -> None:
    paragraphs = []
    for part in sorted(extract.glob("part-*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            paragraphs += split_paragraphs(json.loads(line)["text"])
    sample = paragraphs[:first]
    reference = QuntokenSplitter().split(sample)
    rules = [RuleSplitter("hu").split_paragraph(p) for p in sample]
    false, missed = [], []
    for paragraph, theirs, ours in zip(sample, reference, rules):
        false += [context(paragraph, c) for c in sorted(boundaries(ours) - boundaries(theirs))]
        missed += [context(paragraph, c) for c in sorted(boundaries(theirs) - boundaries(ours))]
    print(f"{len(sample):,} paragraphs of {extract}, {sum(map(len, reference)):,} quntoken sentences")
    print(f"rule splitter F1 vs quntoken {agreement(reference, rules):.4f}: {len(false)} boundaries only the rules "
          f"make, {len(missed)} only quntoken makes")
    for label, found in (("only the rules", false), ("only quntoken", missed)):
        print(f"\n{label}:")
        for text in found[:show]:
            print(f"  {text!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("extract", type=Path, nargs="?", help="an extract stage directory (not with --smoke)")
    parser.add_argument("--paragraphs", type=int, default=6000)
    parser.add_argument("--show", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="on a generated sample dump's extract stage")
    options = parser.parse_args()
    if options.smoke:
        from _smoke_data import pipeline_run

        with tempfile.TemporaryDirectory() as tmp:
            print_agreement(pipeline_run(Path(tmp), "extract") / "extract", options.paragraphs, options.show)
    elif options.extract is None:
        parser.error("the extract directory is required (or --smoke)")
    else:
        print_agreement(options.extract, options.paragraphs, options.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
