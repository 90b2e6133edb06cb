"""Preemption benchmark: SIGTERM during a phase-1 run with a large gradient accumulation (2048 by default) on CPU.

Runs `pretrain phase1 --preset tiny` (seq 128) once uninterrupted for two steps; then the same command, sends it
SIGTERM part-way into step 2 and prints the seconds from the signal to the process's exit, the micro-batches of the
abandoned step and what waiting for the step to end would have cost (the old behaviour); then re-runs the same
command and checks that its losses, learning rates and gradient norms equal the uninterrupted run's bit for bit.

Data: random ids in NVIDIA's layout (bench/_smoke_data.py's write_random_data) over a small vocabulary (1,024
tokens), so that micro-batches are quick: the time from SIGTERM to exit does not depend on the step's length, only on
the micro-batch in progress, the checkpoint and the process's teardown.

    .venv/bin/python bench/preemption.py [--accumulation 2048] [--micro-batch 1] [--vocab-size 1024] [--into-step 0.4]
    .venv/bin/python bench/preemption.py --smoke   # accumulation 64, SIGTERM as soon as step 1 is logged
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke_data import write_random_data

ROOT = Path(__file__).resolve().parent.parent
COMPARED = ("loss", "mlm_loss", "nsp_loss", "lr", "grad_norm")


def rows(out: Path) -> list[dict]:
    path = out / "phase1" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accumulation", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--into-step", type=float, default=0.4, help="when to send SIGTERM, as a fraction of step 1's "
                                                                     "duration after step 1 ends")
    parser.add_argument("--smoke", action="store_true", help="--accumulation 64 --into-step 0")
    args = parser.parse_args()
    if args.smoke:  # step 2 still lasts ~1 s, far longer than noticing step 1's row and signalling
        args.accumulation, args.into_step = 64, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # a small vocabulary: the micro-batches are fast, the accumulation is what counts
        data = write_random_data(tmp / "data", files=4, samples=512, vocab_size=args.vocab_size)

        def command(out: Path) -> list[str]:
            return [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out),
                    "--preset", "tiny", "--set", f"micro_batch={args.micro_batch}",
                    "--set", f"global_batch={args.micro_batch * args.accumulation}", "--set", "steps=2",
                    "--set", "log_every=1", "--set", "checkpoint_every=100", "--set", "warmup=0.5"]

        started = time.perf_counter()
        subprocess.run(command(tmp / "full"), check=True, capture_output=True, cwd=ROOT)
        print(f"uninterrupted run: 2 steps of {args.accumulation} micro-batches x {args.micro_batch} sequences, "
              f"{time.perf_counter() - started:.0f} s", flush=True)

        proc = subprocess.Popen(command(tmp / "stopped"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)
        while not rows(tmp / "stopped"):
            if proc.poll() is not None:
                sys.exit(f"the run ended before its first step:\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.05)
        step_s = args.micro_batch * args.accumulation / rows(tmp / "stopped")[0]["samples_per_s"]
        time.sleep(args.into_step * step_s)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate()
        exit_s = time.perf_counter() - sent
        abandoned = re.search(r"step (\d+) abandoned after (\d+) of (\d+) micro-batches", stderr)
        if proc.returncode != 128 + signal.SIGTERM or not abandoned:
            sys.exit(f"unexpected end (exit {proc.returncode}):\n{stderr[-3000:]}")
        done = int(abandoned[2])
        print(f"SIGTERM {args.into_step * step_s:.1f} s into step {abandoned[1]} (step 1 took {step_s:.1f} s): "
              f"exit {proc.returncode} after {exit_s:.1f} s; step abandoned after {done} of {abandoned[3]} "
              f"micro-batches; finishing the step first would have taken ~{step_s * (1 - done / int(abandoned[3])):.0f}"
              f" s more", flush=True)

        resumed = subprocess.run(command(tmp / "stopped"), capture_output=True, text=True, cwd=ROOT)
        expected, got = rows(tmp / "full"), rows(tmp / "stopped")
        same = resumed.returncode == 0 and len(expected) == len(got) == 2 and all(
            a[key] == b[key] for a, b in zip(expected, got) for key in COMPARED)
        print(f"resumed with the same command: exit {resumed.returncode}; losses, lr and gradient norms of steps "
              f"1-2 {'equal' if same else 'DIFFER from'} the uninterrupted run's bit for bit "
              f"({[row['loss'] for row in got]})")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
