"""Held-out evaluation's cost against training's: the seconds of evaluating one held-out instance over those of
training on one sequence, the figure behind pretrain/run/time_plan.py EVAL_INSTANCE_COST (the default eval_every).

`pretrain phase1` end to end, evaluating at steps 5 and 10 (eval_every 5): a training sequence's seconds are those
of the time-plan line (steps 2-4, before any evaluation or checkpoint), a held-out instance's are read from
train.log's timestamps around each evaluation. Run it several times on a shared machine: both are timed under the
load of their moment.

    .venv/bin/python bench/eval_cost.py [--data DIR] [--preset tiny] [--global-batch 64] [--micro-batch 32]
                                        [--eval-samples 1000]
    .venv/bin/python bench/eval_cost.py --smoke   # generated data, global batch 8, 50 held-out instances
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS, EVAL_EVERY = 10, 5
PLAN = re.compile(r"at ([0-9.e+-]+) s/step here")
STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO step (\d+): "


def measure(data: Path, out: Path, preset: str, global_batch: int, micro_batch: int, eval_samples: int
            ) -> tuple[float, list[float], int]:
    """(seconds a training sequence, seconds of each evaluation, held-out instances)."""
    settings = {"global_batch": global_batch, "micro_batch": micro_batch, "steps": STEPS, "eval_every": EVAL_EVERY,
                "eval_samples": eval_samples, "checkpoint_every": STEPS, "log_every": 1}
    done = subprocess.run([sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out),
                           "--preset", preset, *[f"--set={k}={v}" for k, v in settings.items()]],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        sys.exit(f"pretrain phase1 failed:\n{done.stderr[-3000:]}")
    log = (out / "phase1" / "train.log").read_text(encoding="utf-8")
    per_step = float(PLAN.search(log).group(1))
    started = {step: at for at, step in re.findall(STAMP + r"held-out evaluation of", log, re.M)}
    ended = {step: at for at, step in re.findall(STAMP + r"eval_mlm_accuracy", log, re.M)}
    instances = int(re.search(r"held-out evaluation of ([\d,]+) instances", log).group(1).replace(",", ""))

    def seconds(stamp: str) -> float:
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()

    return per_step / global_batch, [seconds(ended[s]) - seconds(started[s]) for s in sorted(started)], instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an HDF5 variant directory with a test/ split (default: generated)")
    parser.add_argument("--preset", default="tiny", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=32, help="sequences per micro-batch (evaluation's too)")
    parser.add_argument("--eval-samples", type=int, default=1000, help="held-out instances evaluated")
    parser.add_argument("--smoke", action="store_true", help="generated data, global batch 8, 50 instances")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from pretrain.run.time_plan import EVAL_INSTANCE_COST

    if args.smoke:
        args.global_batch, args.micro_batch, args.eval_samples = 8, 8, 50
    with tempfile.TemporaryDirectory() as tmp:
        if args.data is None:
            from _smoke_data import pipeline_run

            args.data = sorted((pipeline_run(Path(tmp), "hdf5") / "hdf5").glob("*seq_len_128_*"))[0]
        sequence_s, evaluations, instances = measure(args.data, Path(tmp) / "run", args.preset, args.global_batch,
                                                     args.micro_batch, args.eval_samples)
    instance_s = statistics.median(evaluations) / instances
    print(f"CPU, {os.cpu_count()} cores (shared machine, load {os.getloadavg()[0]:.1f}), preset {args.preset}, "
          f"global batch {args.global_batch} in micro-batches of {args.micro_batch}, data {args.data}")
    print(f"training: {1000 * sequence_s:.2f} ms a sequence (steps 2-4); held-out evaluation: "
          f"{', '.join(f'{s:.2f} s' for s in evaluations)} for {instances:,} instances, {1000 * instance_s:.2f} ms "
          f"an instance")
    print(f"held-out instance / training sequence: {instance_s / sequence_s:.2f} (time_plan.EVAL_INSTANCE_COST "
          f"{EVAL_INSTANCE_COST})")


if __name__ == "__main__":
    main()
