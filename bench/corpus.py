"""Bench of a web corpus through `pipeline run --to filter` beside the Wikipedia path: CPU seconds per MB of document
text and peak memory, at 1x and 8x.

Four runs, each `pipeline run --lang hu --to filter --workers 1` in a child process of its own work directory:
- wikipedia: a dump through download, extract, sentences (quntoken), filter: the generated sample dump of
  WIKI_ARTICLES articles (x1, x8), or with --dump a real one (x1 only; --dump dev: the huwiki development dump,
  ../shared/data/wiki);
- web: the generated web corpus (`pipeline sample-corpus`, JSON Lines) of WEB_PAGES pages (x1, x8) through corpus,
  sentences, filter (--corpus without --dump: download and extract have no work).
CPU = user + sys of the child and its quntoken processes (which it waits for); peak = the largest resident set of
the child or any of them (wait4's ru_maxrss). MB = the UTF-8 bytes of the document texts that enter the sentences
stage (the "text" of extract's or corpus's JSONL parts), so both paths are divided by the same kind of bytes. The
generators' time is not counted. Prints a table, then web CPU/MB over Wikipedia CPU/MB, each Wikipedia run against
the web run of the nearest text size (goal: at most 1.25; a run's fixed cost, ~1 CPU s of start-up, weighs on the
small ones), each path's peak at 8x over 1x (goal: flat), and the load average the runs saw (the machine may be
shared).

Usage: .venv/bin/python bench/corpus.py [--smoke] [--dump dev|PATH]

--smoke: 40 articles and 30 pages, scales 1 and 2, in seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMP_NAME = "shared/data/wiki/huwiki-20240920-pages-articles-multistream.xml.bz2"
DEV_DUMP = next((d / DUMP_NAME for d in (ROOT.parent, ROOT.parent.parent) if (d / DUMP_NAME).is_file()),
                ROOT.parent / DUMP_NAME)  # beside the checkout, or beside a worktree's directory
WIKI_ARTICLES = 1000  # ~1 MB of extracted text
WEB_PAGES = 500  # ~1 MB of page text
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CLI = [sys.executable, "-m", "pipeline.cli"]


def measured_run(args: list[str], cwd: Path) -> tuple[float, float, int]:
    """Run `pipeline <args>` in a child; (wall s, CPU s, peak RSS bytes) of it and the processes it waited for."""
    start = time.perf_counter()
    child = subprocess.Popen([*CLI, *args], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"pipeline {' '.join(args)} failed with status {status}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def text_bytes(lang_dir: Path) -> int:
    """UTF-8 bytes of the document texts of the JSONL parts the sentences stage read."""
    total = 0
    for stage in ("extract", "corpus"):
        for part in sorted((lang_dir / stage).glob("part-*.jsonl")):
            with open(part, encoding="utf-8") as f:
                total += sum(len(json.loads(line)["text"].encode("utf-8")) for line in f)
    return total


def generate(kind: str, count: int, where: Path) -> str:
    """The flag value that points `pipeline run` at a generated dump (kind wikipedia) or web corpus."""
    if kind == "wikipedia":
        return subprocess.run([*CLI, "sample-dump", str(where), "--pages", str(count), "-q"], env=ENV, check=True,
                              capture_output=True, text=True).stdout.strip()
    return subprocess.run([*CLI, "sample-corpus", str(where), "--docs", str(count), "--files", "4", "-q"], env=ENV,
                          check=True, capture_output=True, text=True).stdout.strip()


def bench(kind: str, scale: int, count: int, tmp: Path, dump: str | None = None) -> dict:
    work = tmp / f"{kind}-{scale}"
    source = dump or generate(kind, count * scale, work / "input")
    flags = ["--dump", source] if kind == "wikipedia" else ["--corpus", f"web={source}"]
    wall, cpu, peak = measured_run(["run", "--lang", "hu", "--workdir", str(work), *flags, "--to", "filter",
                                    "--workers", "1", "--quiet"], tmp)
    mb = text_bytes(work / "hu") / 1e6
    return {"path": kind, "scale": scale, "input": Path(dump).name[:16] if dump else f"{count * scale} generated",
            "mb": mb, "wall": wall, "cpu": cpu, "cpu_per_mb": cpu / mb, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, scales 1 and 2")
    parser.add_argument("--dump", help="the Wikipedia path on this dump (x1); dev: the huwiki development dump")
    args = parser.parse_args()
    articles, pages, big = (40, 30, 2) if args.smoke else (WIKI_ARTICLES, WEB_PAGES, 8)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        tmp = Path(tmp)
        rows = []
        for scale in (1, big):
            if args.dump and scale == 1:
                rows.append(bench("wikipedia", 1, 0, tmp, str(DEV_DUMP if args.dump == "dev" else args.dump)))
            elif not args.dump:
                rows.append(bench("wikipedia", scale, articles, tmp))
            rows.append(bench("web", scale, pages, tmp))
    print(f"{'path':10} {'scale':>5} {'input':>16} {'text MB':>8} {'wall s':>7} {'CPU s':>7} {'CPU s/MB':>9} "
          f"{'peak MiB':>9}")
    for r in rows:
        print(f"{r['path']:10} {r['scale']:>4}x {r['input']:>16} {r['mb']:8.2f} {r['wall']:7.1f} {r['cpu']:7.1f} "
              f"{r['cpu_per_mb']:9.2f} {r['peak'] / 2**20:9.0f}")
    by = {(r["path"], r["scale"]): r for r in rows}
    for wiki in (r for r in rows if r["path"] == "wikipedia"):  # against the web run of the nearest size
        web = min((r for r in rows if r["path"] == "web"), key=lambda r: abs(r["mb"] - wiki["mb"]))
        print(f"web {web['scale']}x / wikipedia {wiki['scale']}x CPU per MB ({web['mb']:.2f} / {wiki['mb']:.2f} MB): "
              f"{web['cpu_per_mb'] / wiki['cpu_per_mb']:.2f}")
    for path in ("wikipedia", "web"):
        if (path, big) in by:
            print(f"{path} peak RSS {big}x / 1x: {by[path, big]['peak'] / by[path, 1]['peak']:.2f}")
    print(f"load average (1 min) before / after: {load_before[0]:.1f} / {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
