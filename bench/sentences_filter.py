"""Bench of the `sentences` and `filter` stages on the Hungarian development texts (../shared/data/hu).

Prints, each measured in a child process (CPU = user + sys of the child and its quntoken binaries; peak = the
child's maximum resident set size):
- sentences/s of quntoken called directly on the text, of the `sentences` stage with quntoken and with the rule
  splitter (one worker), per CPU-second ("per core") and per wall second;
- boundary agreement of the rule splitter (and of blingfire, sentencex, syntok, sentence-splitter, pysbd if they
  are installed) with quntoken, and their speed;
- filter MB/s: the TurkuNLP setting (long documents dropped, the filter's behaviour before rule sets), the default
  (long documents cut), the web rules for every document, langdetect and no language check, with the ratio of each
  (MB per CPU-second) to the first;
- py3langid against langdetect on single lines: accuracy and lines/s.

Usage: .venv/bin/python bench/sentences_filter.py [--smoke]

--smoke: the same on a generated stand-in for ../shared/data (bench/_smoke_data.py), in seconds.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
HU_FILES = ("hu/libreoffice-help-hu.hu.txt", "hu/karoli_1908_verses.txt")


def hungarian_paragraphs() -> list[str]:
    """Prose paragraphs: LibreOffice help lines as they are, Bible verses ten to a paragraph."""
    from pipeline.stages.sentences.splitters import normalize_paragraph

    help_lines = (DATA / HU_FILES[0]).read_text(encoding="utf-8").splitlines()
    verses = [v for v in (DATA / HU_FILES[1]).read_text(encoding="utf-8").splitlines() if not v.startswith("##")]
    paragraphs = help_lines + [" ".join(verses[i:i + 10]) for i in range(0, len(verses), 10)]
    return [p for p in map(normalize_paragraph, paragraphs) if p]


def write_extract(directory: Path, paragraphs: list[str], per_article: int = 6, parts: int = 4) -> int:
    directory.mkdir(parents=True)
    articles = [paragraphs[i:i + per_article] for i in range(0, len(paragraphs), per_article)]
    files = [open(directory / f"part-{k:05d}.jsonl", "w", encoding="utf-8") for k in range(parts)]
    for i, paras in enumerate(articles):
        record = {"id": str(i), "title": f"Cikk {i}", "url": "", "text": "\n".join(paras)}
        files[i * parts // len(articles)].write(json.dumps(record, ensure_ascii=False) + "\n")
    for f in files:
        f.close()
    return len(articles)


def measured(args: list[str]) -> tuple[dict, float, float, int]:
    """Run this script with `args` in a child; (its printed JSON, wall s, CPU s, peak RSS bytes)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, cwd=ROOT)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"child {args} failed with status {status}")
    return json.loads(out), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


# --- child modes -----------------------------------------------------------------------------------

def reap_children() -> None:
    """Wait for quntoken's shell pipelines (quntoken never waits for them), so their CPU time is counted."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def child_quntoken(paragraph_file: str) -> dict:
    from quntoken import tokenize

    with open(paragraph_file, encoding="utf-8") as f:
        sentences = sum(1 for line in tokenize(f, form="spl", mode="sentence") if line.strip())
    return {"sentences": sentences}


def child_stage(name: str, upstream: str, out_dir: str, settings: str) -> dict:
    from pipeline.stages import StageContext, stage_by_name

    stage = stage_by_name(name)
    out = Path(out_dir)
    out.mkdir(parents=True)
    ctx = StageContext(lang="hu", out_dir=out, inputs={stage.inputs[0]: Path(upstream)},
                       cache_dir=out.parent / ".cache", workers=1, quiet=True, log=logging.getLogger("bench"))
    return stage.run(stage.config_cls(**json.loads(settings)), ctx).to_dict()


# --- figures ---------------------------------------------------------------------------------------

def boundaries(sentences: list[str]) -> set[int]:
    ends, pos = set(), 0
    for s in sentences[:-1]:
        pos += len(s.replace(" ", ""))
        ends.add(pos)
    return ends


def agreement(reference: list[list[str]], split: list[list[str]]) -> float:
    tp = fp = fn = 0
    for a, b in zip(reference, split):
        ref, got = boundaries(a), boundaries(b)
        tp, fp, fn = tp + len(ref & got), fp + len(got - ref), fn + len(ref - got)
    return 2 * tp / max(1, 2 * tp + fp + fn)


def other_splitters() -> dict:
    found = {}
    try:
        import blingfire
        found["blingfire"] = lambda p: blingfire.text_to_sentences(p).split("\n")
    except ImportError:
        pass
    try:
        import sentencex
        found["sentencex"] = lambda p: [s.strip() for s in sentencex.segment("hu", p) if s.strip()]
    except ImportError:
        pass
    try:
        import syntok.segmenter as segmenter
        found["syntok"] = lambda p: ["".join(t.spacing + t.value for t in s).strip()
                                     for para in segmenter.process(p) for s in para]
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter
        found["sentence-splitter"] = SentenceSplitter(language="hu").split
    except ImportError:
        pass
    try:
        import pysbd
        seg = pysbd.Segmenter(language="en", clean=False)  # pysbd has no Hungarian
        found["pysbd (en rules)"] = lambda p: [s.strip() for s in seg.segment(p) if s.strip()]
    except ImportError:
        pass
    return found


def splitter_table(paragraphs: list[str]) -> None:
    from pipeline.stages.sentences.splitters import QuntokenSplitter, RuleSplitter

    sample = paragraphs[:6000]
    reference = QuntokenSplitter().split(sample)
    print(f"\nsentence boundaries against quntoken, {len(sample):,} paragraphs "
          f"({sum(map(len, reference)):,} quntoken sentences), one process:")
    print(f"  {'splitter':<20} {'F1 vs quntoken':>14} {'sentences/s':>12}")
    rules = RuleSplitter("hu").split_paragraph
    for name, split in {"rules (ours, hu)": rules, **other_splitters()}.items():
        start = time.process_time()
        result = [split(p) for p in sample]
        cpu = time.process_time() - start
        print(f"  {name:<20} {agreement(reference, result):>14.3f} {sum(map(len, result)) / cpu:>12,.0f}")


FILTER_RUNS = [  # (label, FilterConfig settings beside the Hungarian alphabet); ratios are against the first
    ("TurkuNLP setting (long_documents drop)", {"long_documents": "drop"}),
    ("default (long documents cut)", {}),
    ("web rules for every document", {"rules": {"default": "web"}, "stop_words": ["a", "az", "és", "hogy", "egy"]}),
    ("langid langdetect", {"langid": "langdetect"}),
    ("no langid", {"langid": "none"}),
]


def filter_table(sentences_dir: Path, tmp: Path) -> None:
    """The filter on the same text with each of FILTER_RUNS (py3langid unless said), one worker."""
    text_mb = sum(p.stat().st_size for p in sentences_dir.glob("part-*.txt")) / 1e6
    print(f"\n  {'stage filter, 1 worker, ' + f'{text_mb:.1f} MB':<38} {'kept':>9} {'wall s':>7} {'CPU s':>6} "
          f"{'MB/s wall':>11} {'MB/CPU-s':>10} {'ratio':>6} {'peak MiB':>8}")
    baseline = None
    for i, (label, settings) in enumerate(FILTER_RUNS):
        settings = json.dumps({"word_chars": "abcdefghijklmnopqrstuvwxyzáéíóöúüőű", **settings})
        counts, wall, cpu, peak = measured(["--child", "filter", str(sentences_dir), str(tmp / f"f_{i}" / "out"),
                                            settings])
        baseline = baseline or text_mb / cpu
        print(f"  {label:<38} {counts['documents_kept']:>9,} {wall:>7.2f} {cpu:>6.2f} {text_mb / wall:>11.2f} "
              f"{text_mb / cpu:>10.2f} {text_mb / cpu / baseline:>6.2f} {peak / 2**20:>8.0f}")


def langid_table() -> None:
    from pipeline.stages.filter.rules import identifier

    rng = random.Random(0)
    hu = [line for line in hungarian_paragraphs() if len(line.split()) >= 5]
    hu = rng.sample(hu, min(2000, len(hu)))
    en = [line for line in (DATA / "text" / "sample_text.txt").read_text(encoding="utf-8").splitlines()
          if len(line.split()) >= 5]
    print(f"\nlanguage identification, single lines ({len(hu)} Hungarian, {len(en)} English), one process:")
    print(f"  {'identifier':<11} {'hu right':>9} {'en right':>9} {'lines/s':>9} {'load s':>7}")
    for name in ("py3langid", "langdetect"):
        start = time.perf_counter()
        identify, _ = identifier(name)
        identify("warm up", False)
        load = time.perf_counter() - start
        start = time.process_time()
        hu_right = sum(identify(line, False)[0] == "hu" for line in hu)
        cpu = time.process_time() - start
        en_right = sum(identify(line, False)[0] == "en" for line in en)
        print(f"  {name:<11} {hu_right / len(hu):>9.2%} {en_right / len(en):>9.2%} {len(hu) / cpu:>9,.0f} {load:>7.1f}")


def main() -> int:
    global DATA
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="generated stand-in data: the script end to end")
    options = parser.parse_args()
    if options.child:
        mode, *rest = options.child
        print(json.dumps(child_quntoken(*rest) if mode == "quntoken" else child_stage(mode, *rest)))
        reap_children()
        return 0
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if options.smoke:
            from _smoke_data import shared_data

            DATA = shared_data(tmp / "smoke")
        if not all((DATA / f).is_file() for f in HU_FILES):
            print(f"skipped: {DATA / 'hu'} is absent")
            return 0
        print(f"machine: {os.cpu_count()} cores, shared with other users (load average "
              f"{', '.join(f'{x:.1f}' for x in os.getloadavg())})")
        paragraphs = hungarian_paragraphs()
        articles = write_extract(tmp / "extract", paragraphs)
        (tmp / "paragraphs.txt").write_text("".join(p + "\n\n" for p in paragraphs), encoding="utf-8")
        megabytes = sum(p.stat().st_size for p in (tmp / "extract").iterdir()) / 1e6
        print(f"input: {len(paragraphs):,} paragraphs in {articles:,} articles, {megabytes:.1f} MB of JSONL")

        print(f"\n  {'run':<38} {'sentences':>9} {'wall s':>7} {'CPU s':>6} {'sent/s wall':>11} "
              f"{'sent/CPU-s':>10} {'peak MiB':>8}")
        runs = [("quntoken called directly", ["quntoken", str(tmp / "paragraphs.txt")]),
                ("stage sentences, quntoken, 1 worker",
                 ["sentences", str(tmp / "extract"), str(tmp / "s_qt" / "out"), '{"splitter": "quntoken"}']),
                ("stage sentences, rules, 1 worker",
                 ["sentences", str(tmp / "extract"), str(tmp / "s_rules" / "out"), '{"splitter": "rules"}'])]
        rates = []
        for label, args in runs:
            counts, wall, cpu, peak = measured(["--child", *args])
            n = counts["sentences"]
            rates.append(n / cpu)
            print(f"  {label:<38} {n:>9,} {wall:>7.2f} {cpu:>6.2f} {n / wall:>11,.0f} {n / cpu:>10,.0f} "
                  f"{peak / 2**20:>8.0f}")
        print(f"  stage with quntoken / quntoken directly, per CPU-second: {rates[1] / rates[0]:.2f}")

        sentences_dir = tmp / "s_qt" / "out"
        filter_table(sentences_dir, tmp)
        splitter_table(paragraphs)
        langid_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
