"""Checkpoint benchmark: how long training stops for a checkpoint, blocking against background writes.

Runs `pretrain phase1 --preset base` (CPU, seq 128, micro-batch = global batch) twice, with `checkpoint_writes`
blocking and then background, a checkpoint every `--checkpoint-every` steps, and reads from each run's train.log
how long training waited for each checkpoint but the last (the last one of a run is waited for in both modes); for
background writes also how long the write itself took. Prints the state size (the checkpoint's bytes), each mode's
stall per save (each, and the median of the saves after the first: a background run's first save also allocates
the memory of its copy, once a run) and their ratio (goal: background at most 20% of blocking), the median step time
(a background write shares the CPU with training) and each run's peak memory (a background run holds a copy of the
states in CPU memory).

Data: random ids in NVIDIA's layout with BERT's vocabulary (bench/_smoke_data.py's write_random_data).

    .venv/bin/python bench/checkpoint.py [--preset base] [--steps 7] [--checkpoint-every 2] [--micro-batch 1]
    .venv/bin/python bench/checkpoint.py --smoke   # tiny, vocabulary 1,024, 5 steps, a checkpoint every 2
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke_data import write_random_data

ROOT = Path(__file__).resolve().parent.parent
WAITED = re.compile(r"checkpoint of step (\d+): training waited ([\d.]+) s")
WRITTEN = re.compile(r"checkpoint of step (\d+) complete: [\d.]+ GiB written and verified in the background in "
                     r"([\d.]+) s")


def run(data: Path, out: Path, mode: str, args) -> dict:
    """One phase-1 run with checkpoint_writes `mode`: its stalls, background write times, step times, peak RSS."""
    cmd = [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out),
           "--preset", args.preset, "--set", f"global_batch={args.micro_batch}",
           "--set", f"micro_batch={args.micro_batch}", "--set", f"steps={args.steps}", "--set", "log_every=1",
           "--set", f"checkpoint_every={args.checkpoint_every}", "--set", "keep_checkpoints=2",
           "--set", "eval_every=0", "--set", "loader_workers=0", "--set", f"checkpoint_writes={mode}"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory, not the largest of all children
    if status:
        sys.exit(f"pretrain phase1 ({mode}) failed:\n{stderr[-3000:]}")
    log = (out / "phase1" / "train.log").read_text()
    waited = {int(step): float(s) for step, s in WAITED.findall(log)}
    rows = [json.loads(line) for line in (out / "phase1" / "metrics.jsonl").read_text().splitlines()]
    checkpoints = out / "phase1" / "checkpoints"
    meta = json.loads((checkpoints / (checkpoints / "latest").read_text() / "meta.json").read_text())
    return {"stalls": [s for step, s in sorted(waited.items()) if step != args.steps],
            "writes": [float(s) for _, s in WRITTEN.findall(log)],
            "step_s": statistics.median(args.micro_batch / r["samples_per_s"] for r in rows[1:]),
            "state_gib": sum(meta["files"].values()) / 2 ** 30, "peak_rss_gib": usage.ru_maxrss / 2 ** 20,
            "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--checkpoint-every", type=int, default=2,
                        help="long enough for a background write, else a save also waits for the previous one")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--smoke", action="store_true", help="tiny, vocabulary 1,024, 5 steps, a checkpoint every 2")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.vocab_size, args.steps, args.checkpoint_every = "tiny", 1024, 5, 2
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_random_data(tmp / "data", files=2, samples=256, vocab_size=args.vocab_size)
        results = {mode: run(data, tmp / mode, mode, args) for mode in ("blocking", "background")}
    blocking, background = results["blocking"], results["background"]
    print(f"pretrain phase1 --preset {args.preset}, CPU, {args.steps} steps of {args.micro_batch} x seq 128, "
          f"a checkpoint every {args.checkpoint_every}: {blocking['state_gib']:.2f} GiB of model and optimizer "
          f"state per checkpoint")
    print(f"{'writes':<11} {'stall per save (s)':>22} {'later saves (s)':>16} {'step (s)':>9} "
          f"{'background write (s)':>21} {'peak RSS (GiB)':>15} {'run (s)':>8}")
    for mode, r in results.items():
        writes = f"{statistics.median(r['writes']):.2f}" if r["writes"] else "-"
        print(f"{mode:<11} {' '.join(f'{s:.2f}' for s in r['stalls']):>22} {statistics.median(r['stalls'][1:]):>16.3f} "
              f"{r['step_s']:>9.3f} {writes:>21} {r['peak_rss_gib']:>15.2f} {r['wall_s']:>8.1f}")
    ratio = statistics.median(background["stalls"][1:]) / statistics.median(blocking["stalls"][1:])
    first = background["stalls"][0] / blocking["stalls"][0]
    print(f"background stall / blocking stall: {ratio:.1%} after the first save, {first:.1%} at the first "
          f"(goal: at most 20%)")


if __name__ == "__main__":
    main()
