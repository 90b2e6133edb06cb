"""Benchmark of packed against padded micro-batches on CPU: real (non-padding) tokens per second of a training step
(forward, backward, LAMB) of the mini model (--preset) at seq 128 and 512, on the same instances of an HDF5 variant,
measured in alternating rounds in one process (so that load on a shared machine hits all layouts alike).

Layouts (the encoder computes the real tokens only in each; they differ in the rows attention runs over): "padded"
(one instance a row, SDPA with a padding mask, as without `pack_sequences`), "packed" (the same instances packed
into as few rows as first-fit decreasing finds, block-diagonal mask) and "packed, nested" (attention over nested
jagged tensors, no padding at all; with --nested).

    .venv/bin/python bench/packing.py --hdf5 /tmp/packing-data/hu/hdf5 [--micro-batch 32] [--rounds 3] [--threads 1]
                                      [--nested]
    .venv/bin/python bench/packing.py --smoke   # a generated sample dump's hdf5 stage, tiny model, every layout

--hdf5 is the `hdf5` stage directory of a pipeline work dir (its seq-128 and seq-512 variants are used).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = {"padded": (False, "mask"), "packed": (True, "mask")}
NESTED = {"packed, nested": (True, "nested")}  # --nested


def variant_dir(hdf5_dir: Path, seq_len: int) -> Path:
    found = sorted(hdf5_dir.glob(f"*seq_len_{seq_len}_*"))
    if not found:
        sys.exit(f"error: {hdf5_dir}: no HDF5 variant for seq_len {seq_len}")
    return found[0]


def measure(hdf5_dir: Path, seq_len: int, micro_batch: int, batches: int, rounds: int, layouts: dict,
            preset: str) -> dict[str, dict]:
    import torch

    from wiki2bert_core.wordpiece import read_vocab
    from wiki2bert_core.variant_dir import find_vocab_file
    from pretrain.data.loader import make_loader, model_inputs, open_data
    from pretrain.config import model_config
    from pretrain.model.bert.model import BertForPreTraining
    from pretrain.optim.optimizers import build_optimizer
    from pretrain.data.packing import pack_batch

    variant = variant_dir(hdf5_dir, seq_len)
    vocab_size = len(read_vocab(find_vocab_file(variant)))
    data = open_data(variant, seq_len, vocab_size)
    unpacked = []
    for batch, _ in zip(make_loader(data, micro_batch, vocab_size, seed=1, workers=0), range(batches)):
        unpacked.append(model_inputs(batch)[0])
    inputs = {name: [pack_batch(b) if packed else b for b in unpacked] for name, (packed, _) in layouts.items()}
    real_tokens = sum(int(b["attention_mask"].sum()) for b in unpacked)
    torch.manual_seed(0)
    model = BertForPreTraining(model_config(preset, vocab_size, max_position_embeddings=max(512, seq_len))).train()
    optimizer = build_optimizer(model, "lamb", lr=1e-4)
    seconds: dict[str, list[float]] = {name: [] for name in layouts}
    for round_ in range(rounds + 1):  # round 0 warms up and is not counted
        for name, (_, kernel) in layouts.items():
            model.attention = kernel
            start = time.perf_counter()
            for b in inputs[name]:
                optimizer.zero_grad(set_to_none=True)
                model(**b).loss.backward()
                optimizer.step()
            if round_:
                seconds[name].append(time.perf_counter() - start)
    results = {}
    for name in layouts:
        rows = sum(b["input_ids"].shape[0] for b in inputs[name])
        results[name] = {"best": real_tokens / min(seconds[name]),
                         "mean": real_tokens * len(seconds[name]) / sum(seconds[name]),
                         "rows": rows / batches, "padding": 1 - real_tokens / (rows * seq_len),
                         # per round against the padded run of the same round: robust to load that drifts
                         "paired": float(np.median(np.array(seconds["padded"]) / np.array(seconds[name])))}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdf5", type=Path, help="a pipeline work dir's hdf5 stage directory (or --smoke)")
    parser.add_argument("--micro-batch", type=int, default=32, help="instances per micro-batch")
    parser.add_argument("--batches", type=int, default=2, help="micro-batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seq", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--nested", action="store_true", help="also the packed batch through the nested kernel")
    parser.add_argument("--preset", default="mini", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (one keeps a shared machine's load off the ratios)")
    parser.add_argument("--smoke", action="store_true",
                        help="generated data, tiny, seq 512, 1 micro-batch of 2, 1 round, --nested")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.smoke:
        from _smoke_data import pipeline_run

        with tempfile.TemporaryDirectory() as tmp:
            args.hdf5 = pipeline_run(Path(tmp), "hdf5") / "hdf5"
            args.preset, args.seq, args.micro_batch, args.batches, args.rounds = "tiny", [512], 2, 1, 1
            args.nested = True
            compare_layouts(args)
    elif args.hdf5 is None:
        parser.error("--hdf5 is required (or --smoke)")
    else:
        compare_layouts(args)


def compare_layouts(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    print(f"CPU, {os.cpu_count()} cores (shared machine, load {os.getloadavg()[0]:.1f}), torch threads "
          f"{torch.get_num_threads()}, "
          f"preset {args.preset}, fp32, {args.micro_batch} instances per micro-batch, {args.batches} micro-batches "
          f"per round, {args.rounds} rounds after a warm-up, data {args.hdf5}")
    for seq_len in args.seq:
        layouts = {**LAYOUTS, **(NESTED if args.nested else {})}
        results = measure(args.hdf5, seq_len, args.micro_batch, args.batches, args.rounds, layouts, args.preset)
        print(f"seq {seq_len}:")
        for name, r in results.items():
            print(f"  {name:<15} {r['best']:>8,.0f} real tokens/s best round, {r['mean']:>8,.0f} mean; "
                  f"{r['rows']:5.1f} rows per micro-batch, padding {100 * r['padding']:4.1f}%")
        padded = results["padded"]
        for name in list(layouts)[1:]:
            print(f"  {name} / padded: {results[name]['best'] / padded['best']:.2f}x best round, "
                  f"{results[name]['mean'] / padded['mean']:.2f}x mean, {results[name]['paired']:.2f}x median of "
                  f"the rounds' ratios")


if __name__ == "__main__":
    main()
