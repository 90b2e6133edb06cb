"""Scale benchmark: the whole pipeline on generated dumps of growing size, per stage.

For each size (`--base` articles times each of `--factors`; 8,000 x 64 is ~1.09 GB of XML) it writes the sample
dump (`pipeline sample-dump`), then runs every stage as its own `pipeline stage` process with `--workers` and
prints per stage: wall time, CPU time (user + sys of the whole process tree), seconds per MB of dump XML, and peak
RSS per process (the pipeline's main process, the largest of its worker processes, and the whole tree at its
peak), polled with psutil every 0.1 s. The last table compares each size with the smallest: time per MB and peak
memory per process should not grow with the corpus.

Settings keep the work per MB the same at every size: shards of the same size (shard.num_shards and
shard.num_test_shards scale with the factor) and a fixed sentencepiece sample (vocab.input_sentence_size).
Results go to <workdir>/results.jsonl as each stage ends; `--report` prints the tables from that file again.

    nice -n 10 .venv/bin/python bench/scale.py [--base 8000] [--factors 1,8,64] [--workers 2] \\
        [--executor local|dask] [--workdir /tmp/wiki2bert-scale] [--report]
    .venv/bin/python bench/scale.py --smoke   # 30 and 60 articles, vocab_size 1000, in a temporary workdir
"""
from __future__ import annotations

import argparse
import bz2
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

import _results

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STAGES = ["download", "extract", "sentences", "filter", "dedup", "vocab", "shard", "hdf5"]


def stage_settings(factor: int, args) -> list[str]:
    return ["--set", f"vocab.vocab_size={args.vocab_size}",
            "--set", f"vocab.input_sentence_size={args.input_sentence_size}",
            "--set", f"shard.num_shards={args.shards_per_base * factor}",
            "--set", f"shard.num_test_shards={max(1, args.shards_per_base * factor // 10)}"]


class TreeMonitor:
    """Peak RSS of a process, of its largest descendant and of the tree, polled in a thread."""

    def __init__(self, pid: int, interval: float = 0.1):
        self.root = psutil.Process(pid)
        self.main = self.worker = self.tree = 0
        self.processes: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self._thread.start()

    def _poll(self, interval: float) -> None:
        while not self._stop.is_set():
            try:
                main = self.root.memory_info().rss
                children = self.root.children(recursive=True)
            except psutil.Error:
                return
            rss = []
            for child in children:
                try:
                    rss.append(child.memory_info().rss)
                    self.processes.add(child.pid)
                except psutil.Error:
                    pass
            self.main, self.worker = max(self.main, main), max([self.worker, *rss])
            self.tree = max(self.tree, main + sum(rss))
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure(command: list[str], log) -> dict:
    """Run command; wall and CPU seconds (its whole tree, via RUSAGE_CHILDREN) and peak RSS per process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)})
    monitor = TreeMonitor(proc.pid)
    rc = proc.wait()
    wall = time.perf_counter() - started
    monitor.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {rc} (see {log.name})")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "main_mib": _mib(monitor.main),
            "worker_mib": _mib(monitor.worker), "tree_mib": _mib(monitor.tree), "processes": len(monitor.processes),
            "load": round(os.getloadavg()[0], 1)}


def xml_bytes(dump: Path) -> int:
    total = 0
    with bz2.open(dump, "rb") as f:
        while block := f.read(1 << 24):
            total += len(block)
    return total


def run_size(factor: int, args, results: Path) -> None:
    size_dir = args.workdir / f"x{factor}"
    size_dir.mkdir(parents=True, exist_ok=True)
    articles = args.base * factor
    with open(size_dir / "bench.log", "a", encoding="utf-8") as log:
        dump_dir = size_dir / "dump"
        row = measure([str(BIN / "pipeline"), "sample-dump", str(dump_dir), "--pages", str(articles), "-q"], log)
        dump = dump_dir / "huwiki-sample-pages-articles-multistream.xml.bz2"
        xml_mb = xml_bytes(dump) / 1e6
        _record(results, {"factor": factor, "articles": articles, "xml_mb": round(xml_mb, 1), "stage": "sample-dump",
                          **row})
        settings = stage_settings(factor, args)
        executor = ["--executor", args.executor] if args.executor != "local" else []
        for stage in STAGES:
            command = [str(BIN / "pipeline"), "stage", stage, "--lang", "hu", "--workdir", str(size_dir / "work"),
                       "--dump", str(dump), "--workers", str(args.workers), "--quiet", *executor, *settings]
            row = measure(command, log)
            _record(results, {"factor": factor, "articles": articles, "xml_mb": round(xml_mb, 1), "stage": stage,
                              **row})
    if not args.keep:
        subprocess.run(["rm", "-rf", str(size_dir / "work"), str(dump_dir)], check=True)


def report(results: Path) -> None:
    latest = _results.latest(results, "factor")
    factors = sorted({f for f, _ in latest})
    print("| size | stage | wall s | CPU s | wall s per MB XML | CPU s per MB XML | peak RSS main | "
          "peak RSS largest worker | tree peak | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (factor, stage), r in sorted(latest.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        worker = f"{r['worker_mib']:,} MiB" if r["worker_mib"] else "-"
        print(f"| {factor}x ({r['xml_mb']:,.0f} MB XML, {r['articles']:,} articles) | {stage} | {r['wall_s']:,.1f} | "
              f"{r['cpu_s']:,.1f} | {r['wall_s'] / r['xml_mb']:.3f} | {r['cpu_s'] / r['xml_mb']:.3f} | "
              f"{r['main_mib']:,} MiB | "
              f"{worker} | {r['tree_mib']:,} MiB | {r['load']} |")
    if len(factors) < 2:
        return
    small = factors[0]
    print(f"\nAgainst {small}x: wall and CPU seconds per MB, and peak RSS (main / largest worker), as ratios")
    print("| stage | " + " | ".join(f"{f}x s/MB wall, CPU | {f}x RSS main, worker" for f in factors[1:]) + " |")
    print("|---|" + "---|---|" * (len(factors) - 1))
    for stage in ["sample-dump", *STAGES, "total"]:
        cells = []
        for factor in factors[1:]:
            a, b = _stage_row(latest, small, stage), _stage_row(latest, factor, stage)
            if a is None or b is None:
                cells += ["", ""]
                continue
            per_mb = (b["wall_s"] / b["xml_mb"]) / (a["wall_s"] / a["xml_mb"])
            cpu_per_mb = (b["cpu_s"] / b["xml_mb"]) / max(1e-9, a["cpu_s"] / a["xml_mb"])
            cells += [f"{per_mb:.2f}, {cpu_per_mb:.2f}",
                      f"{b['main_mib'] / a['main_mib']:.2f}, "
                      + (f"{b['worker_mib'] / a['worker_mib']:.2f}" if a["worker_mib"] else "-")]
        print(f"| {stage} | " + " | ".join(cells) + " |")


def _stage_row(latest: dict, factor: int, stage: str) -> dict | None:
    if stage != "total":
        return latest.get((factor, stage))
    rows = [latest.get((factor, s)) for s in STAGES]
    if None in rows:
        return None
    return {"xml_mb": rows[0]["xml_mb"], "wall_s": sum(r["wall_s"] for r in rows),
            "cpu_s": sum(r["cpu_s"] for r in rows), "main_mib": max(r["main_mib"] for r in rows),
            "worker_mib": max(r["worker_mib"] for r in rows)}


def _order(stage: str) -> int:
    return -1 if stage == "sample-dump" else STAGES.index(stage)


def _record(results: Path, row: dict) -> None:
    _results.append(results, row)
    print(f"{row['factor']}x {row['stage']}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU, "
          f"main {row['main_mib']} MiB, worker {row['worker_mib']} MiB, load {row['load']}", flush=True)


def _mib(n: int) -> int:
    return round(n / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=8000, help="articles of the 1x dump (~2.1 KB of XML each)")
    parser.add_argument("--factors", default="1,8,64", help="dump sizes, as multiples of --base")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor", default="local", choices=["local", "dask"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--input-sentence-size", type=int, default=100_000,
                        help="vocab.input_sentence_size: sentences sentencepiece samples (below the 1x corpus's)")
    parser.add_argument("--shards-per-base", type=int, default=4, help="training shards of the 1x corpus")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/wiki2bert-scale"))
    parser.add_argument("--keep", action="store_true", help="keep each size's dump and work dir")
    parser.add_argument("--report", action="store_true", help="only print the tables of <workdir>/results.jsonl")
    parser.add_argument("--smoke", action="store_true", help="30 and 60 articles in a temporary workdir, removed after")
    args = parser.parse_args()
    if args.smoke:
        from _smoke_data import VOCAB_SIZE

        args.base, args.factors, args.vocab_size, args.shards_per_base = 30, "1,2", VOCAB_SIZE, 2
        args.workdir, args.keep, args.report = Path(tempfile.mkdtemp(prefix="wiki2bert-scale-")), False, False
    args.workdir = args.workdir.resolve()
    results = args.workdir / "results.jsonl"
    if not args.report:
        _results.start(results)
        for factor in (int(f) for f in args.factors.split(",")):
            run_size(factor, args, results)
    report(results)
    if args.smoke:
        shutil.rmtree(args.workdir)


if __name__ == "__main__":
    main()
