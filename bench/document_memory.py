"""Bench of the memory one long document takes in the corpus, sentences and filter stages: the per-document
memory factor (peak RSS per byte of document text) that `corpus.max_document_bytes` bounds.

For each size, a corpus of one JSON Lines record whose text is that many MB of Hungarian-like prose (sentences of
6-14 words, a paragraph every 8 sentences) goes through `pipeline stage corpus`, `sentences` and `filter`
(--workers 1, `corpus.max_document_bytes` above the size; sentences twice: with Hungarian's quntoken and with the
rule splitter of the other languages, the filter reading the latter's output), each stage in a child process of its
own; peak = the largest resident set of the child or any process it waited for (wait4's ru_maxrss). A stage's
factor is the growth of its peak from the smallest size to the largest over the growth of the text: what one more
byte of a document costs, the interpreter's and libraries' fixed memory left out. Prints a table (each stage's peak
at each size, its peak over the document's bytes at the largest, its factor), then the machine's load average.

Usage: .venv/bin/python bench/document_memory.py [--smoke] [--sizes 5,20]

--smoke: sizes of 0.25 and 1 MB, in seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# (row label, stage, its --set items): the sentences stage with Hungarian's splitter (quntoken) and the rule splitter
# of the other languages
STAGES = (("corpus", "corpus", []), ("sentences (quntoken)", "sentences", []),
          ("sentences (rules)", "sentences", ["sentences.splitter=rules"]),
          ("filter", "filter", ["sentences.splitter=rules"]))
WORDS = ("a az és hogy nem is egy van meg de alma körte szilva virág ház kert folyó hegy város könyv asztal ablak "
         "régi szép nagy kicsi zöld piros olvas ír fut lát hall mond tud akar lehet kell most ma tegnap holnap itt "
         "ott mindig soha").split()


def write_one_line_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """A JSON Lines file of one record of `megabytes` MB of prose; the text's UTF-8 bytes."""
    rng = random.Random(seed)
    target, size, paragraphs, sentences = int(megabytes * 1e6), 0, [], []
    while size < target:
        sentence = " ".join(rng.choices(WORDS, k=rng.randint(6, 14))).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence.encode("utf-8")) + 1
        if len(sentences) == 8:
            paragraphs.append(" ".join(sentences))
            sentences = []
    text = "\n".join(paragraphs + [" ".join(sentences)] if sentences else paragraphs)
    path.write_text(json.dumps({"id": "long", "text": text}, ensure_ascii=False) + "\n", encoding="utf-8")
    return len(text.encode("utf-8"))


def stage_peak(stage: str, settings: list[str], corpus: Path, workdir: Path) -> int:
    """Peak RSS (bytes) of `pipeline stage STAGE --force` in a child process and the processes it waited for."""
    args = [sys.executable, "-m", "pipeline.cli", "stage", stage, "--lang", "hu", "--workdir", str(workdir),
            "--corpus", f"web={corpus}", "--workers", "1", "--quiet", "--force",
            *[item for setting in [f"corpus.max_document_bytes={1 << 40}", *settings] for item in ("--set", setting)]]
    child = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"pipeline stage {stage} failed with status {status}")
    return usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="sizes of 0.25 and 1 MB")
    parser.add_argument("--sizes", default="5,20", help="MB of the one document, comma-separated (at least two)")
    args = parser.parse_args()
    sizes = [0.25, 1.0] if args.smoke else [float(s) for s in args.sizes.split(",")]
    peaks: dict[str, list[int]] = {label: [] for label, _, _ in STAGES}
    text_bytes = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            here = Path(tmp) / f"{size:g}"
            here.mkdir()
            text_bytes.append(write_one_line_corpus(here / "web.jsonl", size))
            for label, stage, settings in STAGES:
                peaks[label].append(stage_peak(stage, settings, here / "web.jsonl", here / "w"))
    print("| stage | " + " | ".join(f"peak at {b / 1e6:.2f} MB" for b in text_bytes) + " | peak / document bytes "
          f"at {text_bytes[-1] / 1e6:.2f} MB | factor (peak growth / text growth) |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for label, _, _ in STAGES:
        factor = (peaks[label][-1] - peaks[label][0]) / (text_bytes[-1] - text_bytes[0])
        print(f"| {label} | " + " | ".join(f"{p / 2**20:,.0f} MiB" for p in peaks[label])
              + f" | {peaks[label][-1] / text_bytes[-1]:.1f} | {factor:.1f} |")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
