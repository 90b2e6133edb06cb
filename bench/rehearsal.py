"""Rehearsal: a generated dump and web corpus of a given size through every stage to verified HDF5, on the local
executor and on Dask, per stage.

It generates the inputs (`pipeline sample-dump --mb`, `pipeline sample-corpus --mb --format parquet`, several
files, planted duplicates), then, for each executor, runs every stage as its own `pipeline stage ... --workers N`
process and records per stage: wall and CPU seconds (the whole process tree), the CPU seconds of the stage's main
process's main thread (the serial part: work no worker process or thread shares), peak RSS of the main process and of its largest
descendant (a worker; under Dask the LocalCluster's worker processes), that worker's peak private memory (a forked
worker's RSS also counts the main process's pages it shares), the bytes and files the stage wrote (its
manifest's outputs), and the work directory's size at its peak while the stage ran (polled every 0.5 s), all by
pipeline/tools/measure.py. Then `pipeline verify` on the HDF5 files, and the two executors' outputs compared file by
file (sha256 of every output of every stage's manifest). The table ends with the run's peak disk with `--keep all`
(measured) and with `--keep final` (each stage's transient peak on top of the outputs still kept then:
pipeline/tools/plan.py's formula). Results go to <workdir>/results.jsonl as each stage ends; --report prints them.

    nice -n 10 .venv/bin/python bench/rehearsal.py --mb 1000 --workers 16 [--executors local,dask] \\
        [--workdir /tmp/wiki2bert-rehearsal] [--keep-inputs] [--report]
    .venv/bin/python bench/rehearsal.py --smoke   # 0.2 MB of each, local only, vocab_size 1000, a temporary workdir
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.tools.measure import directory_bytes, measure  # noqa: E402
from pipeline.tools.plan import STAGES, peak_disk  # noqa: E402

CLI = [sys.executable, "-m", "pipeline.cli"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def settings(args) -> list[str]:
    return ["--set", f"vocab.vocab_size={args.vocab_size}", "--set", f"shard.num_shards={args.shards}",
            "--set", f"shard.num_test_shards={max(1, args.shards // 10)}"]


def generate(args, results: Path, log) -> tuple[Path, Path]:
    inputs = args.workdir / "inputs"
    dump_dir, corpus_dir = inputs / "dump", inputs / "web"
    for name, command in (("sample-dump", [*CLI, "sample-dump", str(dump_dir), "--mb", str(args.mb)]),
                          ("sample-corpus", [*CLI, "sample-corpus", str(corpus_dir), "--mb", str(args.corpus_mb),
                                             "--format", "parquet", "--files", str(args.corpus_files)])):
        cost = measure([*command, "--workers", str(args.workers), "-q"], cwd=ROOT, env=ENV, stdout=log, stderr=log)
        _check(cost, command, log)
        _record(results, {"executor": "inputs", "stage": name, **_row(cost)})
    from pipeline.tools.sample_dump import DUMP_NAME

    return dump_dir / DUMP_NAME, corpus_dir / "pages"


def run_executor(executor: str, dump: Path, corpus: Path, args, results: Path, log) -> Path:
    workdir = args.workdir / executor
    for stage in STAGES:
        command = [*CLI, "stage", stage, "--lang", "hu", "--workdir", str(workdir), "--dump", str(dump),
                   "--corpus", f"web={corpus}", "--workers", str(args.workers), "--executor", executor, "--quiet",
                   *settings(args)]
        before = directory_bytes(workdir)
        cost = measure(command, watch=workdir, cwd=ROOT, env=ENV, stdout=log, stderr=log)
        _check(cost, command, log)
        after = directory_bytes(workdir)
        manifest = json.loads((workdir / "hu" / stage / "_manifest.json").read_text(encoding="utf-8"))
        outputs = manifest["outputs"].values()
        _record(results, {"executor": executor, "stage": stage, **_row(cost),
                          "written_bytes": sum(o["size"] for o in outputs), "files": len(outputs),
                          "left_bytes": after - before, "transient_bytes": max(0, cost.disk_peak - after)})
    verify = subprocess.run([*CLI, "verify", str(workdir / "hu" / "hdf5")], cwd=ROOT, env=ENV, capture_output=True,
                            text=True)
    _record(results, {"executor": executor, "stage": "verify", "ok": verify.returncode == 0})
    if verify.returncode != 0:
        raise SystemExit(f"error: pipeline verify {workdir / 'hu' / 'hdf5'} failed:\n{verify.stdout[-2000:]}")
    return workdir / "hu"


def differing_outputs(a: Path, b: Path) -> list[str]:
    """The outputs (stage/file) whose size or sha256 differ between two runs' manifests."""
    differ = []
    for stage in STAGES:
        ours = json.loads((a / stage / "_manifest.json").read_text(encoding="utf-8"))["outputs"]
        theirs = json.loads((b / stage / "_manifest.json").read_text(encoding="utf-8"))["outputs"]
        for rel in sorted(set(ours) | set(theirs)):
            if (ours.get(rel) or {}).get("sha256") != (theirs.get(rel) or {}).get("sha256"):
                differ.append(f"{stage}/{rel}")
    return differ


def report(results: Path) -> None:
    latest = _results.latest(results, "executor")
    print("| executor | stage | wall s | CPU s | serial CPU s (main thread) | peak RSS main | peak RSS largest worker "
          "| peak private largest worker | written | files | disk at the peak | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (executor, stage), r in latest.items():
        if "wall_s" not in r:  # verify, the executors' comparison
            continue
        written = f"{_mb(r['written_bytes'])} MB" if "written_bytes" in r else "-"
        print(f"| {executor} | {stage} | {r['wall_s']:,.1f} | {r['cpu_s']:,.1f} | {r['main_cpu_s']:,.1f} | "
              f"{_mib(r['main_rss'])} MiB | {_mib(r['worker_rss'])} MiB | {_mib(r.get('worker_private', 0))} MiB | "
              f"{written} | {r.get('files', '-')} | "
              f"{_mb(r['disk_peak'])} MB | {r['load']} |")
    for executor in sorted({e for e, _ in latest if e != "inputs"}):
        stages = [latest[(executor, s)] for s in STAGES if (executor, s) in latest]
        if len(stages) < len(STAGES):
            continue
        wall, cpu = sum(r["wall_s"] for r in stages), sum(r["cpu_s"] for r in stages)
        serial = {r["stage"]: r["main_cpu_s"] for r in stages}
        costs = {r["stage"]: {"disk_bytes": r["left_bytes"], "output_bytes": r["written_bytes"],
                              "transient_bytes": r["transient_bytes"]} for r in stages}
        verified = latest.get((executor, "verify"))
        print(f"{executor}: {wall:,.1f} s wall, {cpu:,.1f} s CPU; serial (main threads) "
              f"{sum(serial.values()):,.1f} s CPU ({sum(serial.values()) / cpu:.0%}"
              + "".join(f", {s} {v / cpu:.0%}" for s, v in serial.items() if v / cpu >= 0.01) + "); "
              f"peak disk --keep all {_mb(max(r['disk_peak'] for r in stages))} MB (measured), --keep final "
              f"{_mb(peak_disk(costs, 'final'))} MB (derived); verify "
              f"{'not run yet' if verified is None else 'passed' if verified['ok'] else 'FAILED'}")
    if ("compare", "outputs") in latest:
        differ = latest[("compare", "outputs")]["differ"]
        print(f"local vs dask: {latest[('compare', 'outputs')]['files']} output files, "
              f"{len(differ)} differ" + (f": {', '.join(differ[:5])}" if differ else " (byte-identical)"))


def _row(cost) -> dict:
    return {"wall_s": round(cost.wall_s, 2), "cpu_s": round(cost.cpu_s, 2), "main_cpu_s": round(cost.main_cpu_s, 2),
            "main_rss": cost.main_rss, "worker_rss": cost.worker_rss, "worker_private": cost.worker_private,
            "disk_peak": cost.disk_peak,
            "load": round(os.getloadavg()[0], 1)}


def _check(cost, command: list[str], log) -> None:
    if cost.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {cost.returncode} (see {log.name})")


def _record(results: Path, row: dict) -> None:
    _results.append(results, row)
    if "wall_s" in row:
        print(f"{row['executor']} {row['stage']}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU, "
              f"load {row['load']}", flush=True)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="MB of dump XML (sample-dump --mb)")
    parser.add_argument("--corpus-mb", type=float, help="MB of web page text (default: --mb)")
    parser.add_argument("--corpus-files", type=int, default=4, help="Parquet files of the corpus")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executors", default="local,dask")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--shards", type=int, default=50, help="shard.num_shards (a tenth of them test shards)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/wiki2bert-rehearsal"))
    parser.add_argument("--keep-inputs", action="store_true", help="keep the generated inputs and work dirs (removed "
                        "by default; results.jsonl and rehearsal.log stay)")
    parser.add_argument("--report", action="store_true", help="only print the tables of <workdir>/results.jsonl")
    parser.add_argument("--smoke", action="store_true", help="0.2 MB of each, local only, in a temporary workdir "
                        "(removed after)")
    args = parser.parse_args()
    if args.smoke:
        # the local executor only: a LocalCluster per stage took 15-25 s each on the loaded test machine
        args.mb, args.vocab_size, args.shards, args.corpus_files, args.executors = 0.2, 1000, 4, 2, "local"
        args.workdir, args.keep_inputs, args.report = Path(tempfile.mkdtemp(prefix="wiki2bert-rehearsal-")), False, False
    args.corpus_mb = args.corpus_mb or args.mb
    args.workdir = args.workdir.resolve()
    results = args.workdir / "results.jsonl"
    if not args.report:
        _results.start(results)
        with open(args.workdir / "rehearsal.log", "a", encoding="utf-8") as log:
            dump, corpus = generate(args, results, log)
            runs = {executor: run_executor(executor, dump, corpus, args, results, log)
                    for executor in args.executors.split(",")}
        if len(runs) == 2:
            a, b = runs.values()
            files = sum(len(json.loads((a / s / "_manifest.json").read_text(encoding="utf-8"))["outputs"])
                        for s in STAGES)
            _record(results, {"executor": "compare", "stage": "outputs", "files": files,
                              "differ": differing_outputs(a, b)})
    report(results)
    if args.smoke:
        shutil.rmtree(args.workdir)
    elif not args.keep_inputs and not args.report:
        for directory in ("inputs", *args.executors.split(",")):
            shutil.rmtree(args.workdir / directory, ignore_errors=True)


if __name__ == "__main__":
    main()
