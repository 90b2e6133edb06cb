"""Benchmark of scheduled settings' cost on CPU: real tokens/s of `pretrain phase1` with global_batch, mask_rate,
mask_replace and mask_random given as schedules against the same run with them constant. The schedules hold the
constant values at every point ([[0, v], [0.5, v]]), so both runs do the same work and every scheduled path runs (the
batch set and the accumulation boundary each step, each micro-batch's step named by the sampler and masked with that
step's values, the values in each metrics row); the two runs' losses must be equal. Constant and scheduled alternate
in each round, so that load on a shared machine hits both alike; tokens/s is a run's real tokens over the time of its
steps after the first (metrics.jsonl, log_every 1).

    .venv/bin/python bench/schedules.py [--data DIR] [--preset mini] [--micro-batch 16] [--accumulation 2]
                                        [--steps 12] [--rounds 3]
    .venv/bin/python bench/schedules.py --smoke   # tiny model, micro-batch 4, 4 steps, 1 round

--data is an HDF5 variant directory with its vocab.txt; default: random ids in NVIDIA's layout at seq 128.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SEQ_LEN, MAX_PREDICTIONS, VOCAB_SIZE = 128, 20, 1024
TRAINING_KEYS = ("loss", "mlm_loss", "nsp_loss", "grad_norm", "lr")


def write_random_data(root: Path, files: int = 2, samples: int = 256) -> Path:
    """A variant directory with vocab.txt and training/*.hdf5: random ids, full rows, 20 masked positions each."""
    sys.path.insert(0, str(ROOT))
    from wiki2bert_core.wordpiece import SPECIAL_TOKENS

    variant = root / "hdf5" / "seq128"
    (variant / "training").mkdir(parents=True)
    tokens = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIAL_TOKENS))]
    (variant / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    for i in range(files):
        ids = rng.integers(len(SPECIAL_TOKENS), VOCAB_SIZE, (samples, SEQ_LEN), dtype=np.int32)
        ids[:, 0], ids[:, SEQ_LEN // 2], ids[:, -1] = (tokens.index(t) for t in ("[CLS]", "[SEP]", "[SEP]"))
        positions = np.sort(np.stack([rng.choice([p for p in range(1, SEQ_LEN - 1) if p != SEQ_LEN // 2],
                                                 MAX_PREDICTIONS, replace=False) for _ in range(samples)]), axis=1)
        with h5py.File(variant / "training" / f"training_{i:04d}.hdf5", "w") as f:
            f["masked_lm_ids"] = np.take_along_axis(ids, positions, axis=1)
            ids[np.arange(samples)[:, None], positions] = tokens.index("[MASK]")
            f["input_ids"] = ids
            f["input_mask"] = np.ones((samples, SEQ_LEN), np.int32)
            f["segment_ids"] = (np.arange(SEQ_LEN) > SEQ_LEN // 2).astype(np.int32)[None].repeat(samples, 0)
            f["masked_lm_positions"] = positions.astype(np.int32)
            f["next_sentence_labels"] = rng.integers(0, 2, samples, dtype=np.int32)
    return variant


def settings(args, scheduled: bool) -> list[str]:
    """The run's --set items: the constant values, or schedules that hold them at two points."""
    values = {"global_batch": args.micro_batch * args.accumulation, "mask_rate": 0.3, "mask_replace": 0.8,
              "mask_random": 0.1}
    items = [f"{key}=[[0, {value}], [0.5, {value}]]" if scheduled else f"{key}={value}" for key, value in
             values.items()]
    return [*items, f"micro_batch={args.micro_batch}", f"steps={args.steps}", "masking=dynamic", "log_every=1",
            f"checkpoint_every={args.steps}", "eval_every=0", "checkpoint_writes=blocking"]


def run(args, out: Path, scheduled: bool) -> tuple[float, list[dict]]:
    """Real tokens/s of one run (its steps after the first) and its metrics rows."""
    command = [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(args.data), "--out", str(out),
               "--preset", args.preset]
    for item in settings(args, scheduled):
        command += ["--set", item]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True)
    if done.returncode:
        sys.exit(f"pretrain phase1 exited {done.returncode}:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "phase1" / "metrics.jsonl").read_text().splitlines()]
    seconds = [args.micro_batch * args.accumulation / row["samples_per_s"] for row in rows[1:]]  # of each step
    tokens = sum(row["real_tokens_per_s"] * s for row, s in zip(rows[1:], seconds))
    return tokens / sum(seconds), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an HDF5 variant directory (default: random ids at seq 128)")
    parser.add_argument("--preset", default="mini", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--micro-batch", type=int, default=16, help="sequences per micro-batch")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches per step")
    parser.add_argument("--steps", type=int, default=12, help="steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny model, micro-batch 4, 4 steps, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.micro_batch, args.steps, args.rounds = "tiny", 4, 4, 1
    with tempfile.TemporaryDirectory() as tmp:
        args.data = args.data or write_random_data(Path(tmp))
        ratios, results = [], {"constant": [], "scheduled": []}
        for round_ in range(args.rounds):
            speeds = {}
            for mode in results:
                speeds[mode], rows = run(args, Path(tmp) / f"{mode}{round_}", mode == "scheduled")
                results[mode].append(speeds[mode])
                if mode == "constant":
                    constant_rows = rows
            same = [[row[k] for k in TRAINING_KEYS if k in row] for row in rows] == \
                [[row[k] for k in TRAINING_KEYS if k in row] for row in constant_rows]
            ratios.append(speeds["scheduled"] / speeds["constant"])
            print(f"round {round_ + 1}: constant {speeds['constant']:,.0f} real tokens/s, scheduled "
                  f"{speeds['scheduled']:,.0f}, ratio {ratios[-1]:.4f}, losses equal: {same}, load "
                  f"{os.getloadavg()[0]:.2f}")
    print(f"CPU, {os.cpu_count()} cores (shared machine), preset {args.preset}, fp32, micro-batch {args.micro_batch} "
          f"x accumulation {args.accumulation} at seq {SEQ_LEN}, dynamic masking 0.3, {args.steps} steps a run, "
          f"{args.rounds} round(s), data {args.data}")
    print(f"constant: median {statistics.median(results['constant']):,.0f} real tokens/s; scheduled: median "
          f"{statistics.median(results['scheduled']):,.0f}")
    print(f"scheduled / constant: {statistics.median(ratios):.4f} median of {len(ratios)} round(s) "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f})")


if __name__ == "__main__":
    main()
