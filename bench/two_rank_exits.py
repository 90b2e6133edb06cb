"""Clean multi-rank exits: N finished 2-rank `pretrain phase1` runs on CPU (gloo), counted by exit code and by the
'terminate called' lines of a C++ abort in their output.

Each run is `torchrun --standalone --nproc_per_node 2 -m pretrain.cli phase1 --preset tiny` (seq 128, random ids
of bench/_smoke_data.py's write_random_data over 1,024 tokens, 4 steps of 2 ranks x micro-batch 4, held-out
evaluation off, ZeRO --zero-stage, loader workers --loader-workers), one thread a process, one run after another in a
fresh directory. A run is clean when torchrun exits 0, no worker reports another exit code and no 'terminate called'
line appears. Run it on a loaded machine: teardown races show under load.

--control runs the ranks with `pretrain.run.train.leave_process_groups` made a no-op, so that the process groups are
left to the interpreter's teardown (as the 2-rank test workers once did, with os._exit as their workaround): the
aborts the product's teardown avoids.

    .venv/bin/python bench/two_rank_exits.py [--runs 20] [--zero-stage 1] [--loader-workers 2] [--control]
    .venv/bin/python bench/two_rank_exits.py --smoke   # 1 run
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke_data import write_random_data

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--loader-workers", type=int, default=2)
    parser.add_argument("--control", action="store_true", help="leave the process groups to the interpreter's "
                                                                 "teardown")
    parser.add_argument("--smoke", action="store_true", help="--runs 1")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    exits: collections.Counter = collections.Counter()
    worker_failures = terminate_lines = 0
    seconds, loads = [], []  # each run's wall seconds, the 1-minute load average as it ends
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_random_data(tmp / "data", files=2, samples=64, vocab_size=1024)
        for i in range(args.runs):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 *([__file__, "--control-rank"] if args.control else ["-m", "pretrain.cli"]), "phase1",
                 "--data", str(data), "--out", str(tmp / f"run{i:02d}"),
                 "--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "steps=4",
                 "--set", "log_every=1", "--set", "warmup=0.5", "--set", "eval_every=0",
                 "--set", f"zero_stage={args.zero_stage}", "--set", f"loader_workers={args.loader_workers}"],
                env=env, capture_output=True, text=True, cwd=tmp, timeout=600)
            seconds.append(time.perf_counter() - started)
            loads.append(os.getloadavg()[0])
            output = done.stdout + done.stderr
            terminated = len(re.findall(r"terminate called", output))
            failed = len(re.findall(r"exitcode\s*:\s*-?\d+", output))  # torchrun's report of a failed worker
            exits[done.returncode] += 1
            terminate_lines += terminated
            worker_failures += failed
            print(f"run {i + 1:>2}: exit {done.returncode}, {seconds[-1]:.0f} s, load {loads[-1]:.1f}"
                  + (f", {terminated} 'terminate called'" if terminated else "")
                  + (f", {failed} worker(s) failed" if failed else ""), flush=True)
            if done.returncode or terminated:
                print(output[-3000:], flush=True)
    print(f"{args.runs} runs of 2 ranks (ZeRO {args.zero_stage}, {args.loader_workers} loader workers a rank"
          f"{', process groups left to the teardown' if args.control else ''}), "
          f"{min(seconds):.0f}-{max(seconds):.0f} s each, load {min(loads):.1f}-{max(loads):.1f} on "
          f"{os.cpu_count()} cores")
    print(f"exit codes: {', '.join(f'{code}: {n}' for code, n in sorted(exits.items()))}")
    print(f"failed workers: {worker_failures}; 'terminate called' lines: {terminate_lines}")
    if set(exits) != {0} or terminate_lines or worker_failures:
        sys.exit(1)


def control_rank() -> None:
    """A rank of `pretrain` whose process groups are left to the interpreter's teardown."""
    sys.path[:1] = [str(ROOT)]  # not bench/, whose pretrain.py would shadow the package
    import pretrain.run.train
    from pretrain.cli import main as pretrain_main

    pretrain.run.train.leave_process_groups = lambda: None
    sys.argv = ["pretrain", *sys.argv[2:]]
    pretrain_main()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--control-rank"]:
        control_rank()
    else:
        main()
