"""Benchmark of scheduled settings' cost on CPU: real tokens/s of the training loop's step (pretrain/run/train.py
`_train_step`, its loader and engine as `pretrain phase1` builds them) with global_batch, mask_rate, mask_replace and
mask_random given as schedules against the same run with them constant. The schedules hold the constant values at
two points ([[0, v], [0.5, v]]), so both runs do the same work and every scheduled path runs (the engine's batch and
accumulation boundary set each step, each micro-batch's step named by the sampler and masked with that step's
values); their losses must be equal. The two runs live in one process and alternate step by step (which goes first
alternates too), so that load on a shared machine hits both alike; a round is `--steps` steps of each, after one
warm-up step.

    .venv/bin/python bench/schedules.py [--data DIR] [--preset mini] [--micro-batch 16] [--accumulation 2]
                                        [--steps 10] [--rounds 3]
    .venv/bin/python bench/schedules.py --smoke   # tiny model, micro-batch 4, 2 rounds of 2 steps

--data is an HDF5 variant directory with its vocab.txt; default: random ids in NVIDIA's layout at seq 128.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _smoke_data import RANDOM_SEQ_LEN as SEQ_LEN, write_random_data

ROOT = Path(__file__).resolve().parent.parent
MODES = ("constant", "scheduled")
OVERHEAD_STEPS = 1000  # steps of the scheduled run's own work, timed alone


def settings(args, scheduled: bool) -> list[str]:
    """The run's --set items: the constant values, or schedules that hold them at two points."""
    values = {"global_batch": args.micro_batch * args.accumulation, "mask_rate": 0.3, "mask_replace": 0.8,
              "mask_random": 0.1}
    items = [f"{key}=[[0, {value}], [0.5, {value}]]" if scheduled else f"{key}={value}" for key, value in
             values.items()]
    return [*items, f"preset={args.preset}", f"micro_batch={args.micro_batch}",
            f"steps={1 + args.rounds * args.steps}", "masking=dynamic", "eval_every=0"]


def measure(args, out: Path) -> tuple[dict[str, list[float]], dict[str, list[float]], bool, float]:
    """Each mode's seconds and real tokens of every measured step, whether the two runs' step sums (losses,
    accuracies, tokens) were equal at every step, and the seconds a step of the scheduled run spends on what only it
    does (each micro-batch's masking at its step, the engine's batch and boundaries), timed alone."""
    import torch

    from pretrain.config import load_train_config
    from pretrain.run import checkpoint, train
    from pretrain.run.metrics import STEP_STATS
    from pretrain.run.prepare import prepare
    from pretrain.run.signals import StopSignal

    logging.getLogger().setLevel(logging.WARNING)
    runs, rng, cleanup = {}, {}, contextlib.ExitStack()
    for mode in MODES:
        run = prepare("phase1", args.data, out / mode, load_train_config("phase1", overrides=settings(
            args, mode == "scheduled")))
        engine = train.start(run).engine
        runs[mode], rng[mode] = (run, engine, train._batches(run, 0, None, cleanup, 1)), checkpoint.rng_state()
    seconds = {mode: [] for mode in MODES}
    tokens = {mode: [] for mode in MODES}
    equal = True
    stop = StopSignal(logging.getLogger(), 1)  # never entered: no signal handler, never agreed
    with cleanup:
        for step in range(1, 2 + args.rounds * args.steps):
            sums = {}
            for mode in MODES if step % 2 else reversed(MODES):
                run, engine, batches = runs[mode]
                sums[mode] = torch.zeros(len(STEP_STATS), dtype=torch.float64)
                checkpoint.set_rng_state(rng[mode])  # each run its own dropout stream, as in a process of its own
                start = time.perf_counter()
                train._train_step(engine, batches, run, sums[mode], step, stop)
                elapsed = time.perf_counter() - start
                rng[mode] = checkpoint.rng_state()
                if step > 1:
                    seconds[mode].append(elapsed)
                    tokens[mode].append(float(sums[mode][STEP_STATS.index("real_tokens")]))
            keys = [i for i, key in enumerate(STEP_STATS) if key != "data_wait_s"]
            equal &= torch.equal(sums["constant"][keys], sums["scheduled"][keys])
    run, engine, _ = runs["scheduled"]
    start = time.perf_counter()
    for step in range(1, OVERHEAD_STEPS + 1):
        accumulation = run.schedules.accumulation(step)
        engine.set_train_batch_size(run.schedules.global_batch(step))
        for micro in range(accumulation):
            run.masking.at(step)
            engine.set_gradient_accumulation_boundary(micro == accumulation - 1)
    return seconds, tokens, equal, (time.perf_counter() - start) / OVERHEAD_STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an HDF5 variant directory (default: random ids at seq 128)")
    parser.add_argument("--preset", default="mini", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--micro-batch", type=int, default=16, help="sequences per micro-batch")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches per step")
    parser.add_argument("--steps", type=int, default=10, help="steps of each mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny model, micro-batch 4, 2 rounds of 2 steps")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.smoke:
        args.preset, args.micro_batch, args.steps, args.rounds = "tiny", 4, 2, 2
    with tempfile.TemporaryDirectory() as tmp:
        args.data = args.data or write_random_data(Path(tmp), files=2, samples=256, vocab_size=1024)
        seconds, tokens, equal, overhead = measure(args, Path(tmp) / "runs")
    import torch

    print(f"CPU, {os.cpu_count()} cores (shared machine), torch threads {torch.get_num_threads()}, preset "
          f"{args.preset}, fp32, micro-batch {args.micro_batch} x accumulation {args.accumulation} at seq {SEQ_LEN}, "
          f"packed, dynamic masking 0.3, 2 loader workers a run, {args.rounds} round(s) of {args.steps} steps, load "
          f"{os.getloadavg()[0]:.2f}, data {args.data}")
    ratios = []
    for r in range(args.rounds):
        part = slice(r * args.steps, (r + 1) * args.steps)
        speed = {mode: sum(tokens[mode][part]) / sum(seconds[mode][part]) for mode in MODES}
        ratios.append(speed["scheduled"] / speed["constant"])
        print(f"round {r + 1}: constant {speed['constant']:,.0f} real tokens/s, scheduled {speed['scheduled']:,.0f}, "
              f"ratio {ratios[-1]:.4f}")
    speed = {mode: sum(tokens[mode]) / sum(seconds[mode]) for mode in MODES}
    print(f"all rounds: constant {speed['constant']:,.0f} real tokens/s, scheduled {speed['scheduled']:,.0f}, "
          f"ratio {speed['scheduled'] / speed['constant']:.4f}; median of the rounds' ratios "
          f"{statistics.median(ratios):.4f}; losses equal at every step: {equal}")
    step = sum(seconds["constant"]) / len(seconds["constant"])
    print(f"the scheduled run's own work: {1e6 * overhead:.1f} us a step, {100 * overhead / step:.4f}% of a constant "
          f"step ({1000 * step:.1f} ms)")


if __name__ == "__main__":
    main()
