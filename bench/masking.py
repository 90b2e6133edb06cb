"""Benchmark of the loader's cost with dynamic masking on CPU: the time a training step (forward, backward, LAMB of
the mini model, micro-batch 32 at seq 128, packed as by default) waits for its batch, with the files' masks (static)
against dynamic masks (single tokens, whole words), and the time the reading process spends on one micro-batch
(what a worker does in the background, or the loop itself with loader_workers 0). The modes alternate within each
round and, for the reading times, batch by batch, in one process, so that load on a shared machine hits them alike.

    .venv/bin/python bench/masking.py --data DIR [--micro-batch 32] [--steps 20] [--rounds 3] [--workers 2]
    .venv/bin/python bench/masking.py          # a generated sample dump through the pipeline (its seq-128 variant)
    .venv/bin/python bench/masking.py --smoke  # the same data, tiny model, micro-batch 8, 3 steps, 1 round

--data is an HDF5 variant directory at seq 128 with its vocab.txt (the whole-word mode reads its `##` pieces).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"static": None, "dynamic": False, "dynamic, whole words": True}  # mode -> whole_word (None: static)
WARMUP_BATCHES = 2  # per loader: worker start-up and the first files' reads are not waits of a running loop
READ_BATCHES = 200  # micro-batches read in the process itself, per mode (median time; files cached as a worker does)


def measure(data_dir: Path, preset: str, micro_batch: int, steps: int, rounds: int, workers: int,
            rate: float) -> dict[str, dict]:
    import torch

    from wiki2bert_core.variant_dir import find_vocab_file
    from wiki2bert_core.wordpiece import read_vocab
    from pretrain.config import model_config
    from pretrain.data.loader import BatchPlan, BatchReader, make_loader, open_data
    from pretrain.data.masking import DynamicMasking
    from wiki2bert_core.masking import MaskingVocab, default_max_predictions
    from pretrain.model.bert.model import BertForPreTraining
    from pretrain.optim.optimizers import build_optimizer

    vocab = read_vocab(find_vocab_file(data_dir))
    data = open_data(data_dir, None, len(vocab))
    maskings = {mode: None if whole_word is None else
                DynamicMasking(MaskingVocab.from_vocab(vocab), rate, default_max_predictions(rate, data.seq_len),
                               whole_word, seed=1)
                for mode, whole_word in MODES.items()}
    torch.manual_seed(0)
    model = BertForPreTraining(model_config(preset, len(vocab))).train()
    optimizer = build_optimizer(model, "lamb", lr=1e-4)
    waits: dict[str, list[float]] = {mode: [] for mode in MODES}
    computes: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, masking in maskings.items():
            batches = iter(make_loader(data, micro_batch, len(vocab), seed=1, workers=workers, pack=True,
                                       masking=masking))
            for _ in range(WARMUP_BATCHES):
                next(batches)
            for _ in range(steps):
                start = time.perf_counter()
                batch = next(batches)
                waited = time.perf_counter()
                batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
                optimizer.zero_grad(set_to_none=True)
                model(**batch).loss.backward()
                optimizer.step()
                waits[mode].append(waited - start)
                computes[mode].append(time.perf_counter() - waited)
            del batches  # its workers exit
    readers = {mode: BatchReader(data, len(vocab), pack=True, masking=masking) for mode, masking in maskings.items()}
    reading: dict[str, list[float]] = {mode: [] for mode in MODES}
    for item, _ in zip(BatchPlan(data, micro_batch, seed=1), range(READ_BATCHES)):
        for mode, reader in readers.items():  # alternating, item by item: load hits the modes alike
            start = time.perf_counter()
            reader[item]
            reading[mode].append(time.perf_counter() - start)
    return {mode: {"step": statistics.mean(w + c for w, c in zip(waits[mode], computes[mode])),
                   "wait": statistics.mean(waits[mode]), "reading": statistics.median(reading[mode])}
            for mode in MODES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an HDF5 variant directory at seq 128 (default: generated)")
    parser.add_argument("--preset", default="mini", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--micro-batch", type=int, default=32, help="sequences per micro-batch")
    parser.add_argument("--steps", type=int, default=20, help="measured steps per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (the loader_workers default)")
    parser.add_argument("--mask-rate", type=float, default=0.15)
    parser.add_argument("--smoke", action="store_true", help="tiny model, micro-batch 8, 3 steps, 1 round")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.smoke:
        args.preset, args.micro_batch, args.steps, args.rounds = "tiny", 8, 3, 1
    with tempfile.TemporaryDirectory() as tmp:
        if args.data is None:
            from _smoke_data import pipeline_run

            args.data = sorted((pipeline_run(Path(tmp), "hdf5") / "hdf5").glob("*seq_len_128_*"))[0]
        report(args, measure(args.data, args.preset, args.micro_batch, args.steps, args.rounds, args.workers,
                                  args.mask_rate))


def report(args, results: dict[str, dict]) -> None:
    import torch

    print(f"CPU, {os.cpu_count()} cores (shared machine), torch threads {torch.get_num_threads()}, preset "
          f"{args.preset}, fp32, micro-batch {args.micro_batch} at seq 128, packed, {args.workers} loader workers, "
          f"mask rate {args.mask_rate}, "
          f"{args.steps} steps per mode in each of {args.rounds} rounds, data {args.data}")
    print(f"{'mode':<22} {'step ms':>8} {'wait ms':>8} {'wait share':>10} {'reading ms':>10}")
    for mode, r in results.items():
        print(f"{mode:<22} {1000 * r['step']:8.1f} {1000 * r['wait']:8.2f} {100 * r['wait'] / r['step']:9.2f}% "
              f"{1000 * r['reading']:10.2f}")
    static = results["static"]
    for mode in list(results)[1:]:
        r = results[mode]
        print(f"{mode} - static: wait {1000 * (r['wait'] - static['wait']):+.2f} ms a step "
              f"({100 * (r['wait'] - static['wait']) / static['step']:+.2f}% of a step); reading "
              f"{1000 * (r['reading'] - static['reading']):+.2f} ms a micro-batch "
              f"({100 * (r['reading'] - static['reading']) / static['step']:+.2f}% of a step)")


if __name__ == "__main__":
    main()
