"""Benchmark of ModernBERT pretraining on CPU: real (non-padding) tokens/s and peak memory of our ModernBERT
(pretrain/model/modernbert/model.py: packed rows, the head on the masked positions only) against
`transformers.ModernBertForMaskedLM` of the same config and weights, on the same micro-batches, with the same optimizer
(AdamW, ModernBERT's recipe) under the same DeepSpeed config, in one process, in alternating rounds (load on a shared
machine hits all alike). transformers runs twice: as it comes (logits at every position) and with its own
`sparse_prediction` (logits at the masked positions only). Peak memory: a few training steps of each in a fresh
process, the resident set above the footprint before the model is made (glibc returning freed memory at once, as
`pretrain tune` measures it). Before timing, the script checks that the models' first losses agree.

Data: random ids in rows as the pipeline's doc-sentences variants fill them (lengths uniform between a quarter of
the row and all of it), 30% of each row's tokens to predict (ModernBERT's rate); --data DIR reads a variant directory
instead (its stored masks).

    .venv/bin/python bench/modernbert.py [--preset mini] [--seq 512] [--micro-batch 16] [--rounds 3] [--threads 1]
                                         [--data DIR]
    .venv/bin/python bench/modernbert.py --smoke   # tiny, seq 64, vocabulary 512, 1 round of 1 step, memory of
                                                   # the three models in one process
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("wiki2bert", "transformers", "transformers sparse_prediction")
MASK_RATE = 0.3


def random_batches(seq_len: int, micro_batch: int, count: int, vocab_size: int, seed: int = 0) -> list[dict]:
    """Micro-batches in NVIDIA's layout: [CLS] ... [SEP] of random ids and lengths, 30% of each row predicted."""
    import torch

    rng = np.random.default_rng(seed)
    predictions = int(np.ceil(MASK_RATE * seq_len))
    batches = []
    for _ in range(count):
        lengths = rng.integers(max(4, seq_len // 4), seq_len + 1, micro_batch)
        columns = np.arange(seq_len)
        real = columns[None] < lengths[:, None]
        ids = rng.integers(5, vocab_size, (micro_batch, seq_len)) * real
        ids[:, 0] = 2
        ids[np.arange(micro_batch), lengths - 1] = 3
        positions = np.zeros((micro_batch, predictions), np.int64)
        for i, n in enumerate(lengths):
            chosen = np.sort(rng.choice(np.arange(1, n - 1), min(predictions, round(MASK_RATE * n)), replace=False))
            positions[i, :len(chosen)] = chosen
        masked_ids = np.take_along_axis(ids, positions, 1) * (positions != 0)
        np.put_along_axis(ids, positions, np.where(positions != 0, 4, 2), 1)  # [MASK]; unused slots: [CLS] kept
        batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": real.astype(np.int64),
                 "masked_lm_positions": positions, "masked_lm_ids": masked_ids,
                 "next_sentence_labels": np.zeros(micro_batch, np.int64)}
        batches.append({k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in batch.items()})
    return batches


def data_batches(data: Path, micro_batch: int, count: int) -> tuple[list[dict], int]:
    from wiki2bert_core.variant_dir import find_vocab_file
    from wiki2bert_core.wordpiece import read_vocab
    from pretrain.data.loader import make_loader, model_inputs, open_data

    vocab_size = len(read_vocab(find_vocab_file(data)))
    batches = []
    for batch, _ in zip(make_loader(open_data(data, None, vocab_size), micro_batch, vocab_size, workers=0),
                        range(count)):
        batches.append(model_inputs(batch)[0])
    return batches, vocab_size


def hf_batch(b: dict) -> dict:
    """The batch as transformers takes it: labels at the masked positions, -100 elsewhere; no token type ids."""
    import torch

    labels = torch.full_like(b["input_ids"], -100)
    valid = b["masked_lm_positions"] != 0
    labels.scatter_(1, b["masked_lm_positions"], torch.where(valid, b["masked_lm_ids"], -100))
    labels[:, 0] = -100  # the zero-padded slots scattered into [CLS]
    return {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"], "labels": labels}


def build(name: str, preset: str, vocab_size: int, micro_batch: int):
    """The model `name` (of MODELS) with the weights of seed 0, as a DeepSpeed engine with AdamW, and how it takes
    a micro-batch."""
    import deepspeed
    import torch
    import transformers

    from pretrain.config import load_train_config, model_config
    from pretrain.data.packing import pack_batch
    from pretrain.model.arch import pretraining_model
    from pretrain.model.hf_config import hf_config
    from pretrain.optim.optimizers import build_optimizer
    from pretrain.run.deepspeed_settings import deepspeed_config, single_process_env

    single_process_env()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    c = load_train_config("phase1", overrides=["arch=modernbert", f"preset={preset}", f"micro_batch={micro_batch}",
                                               f"global_batch={micro_batch}"])
    torch.manual_seed(0)
    ours = pretraining_model(model_config(preset, vocab_size, "modernbert"))
    if name == "wiki2bert":
        model, inputs = ours, pack_batch
    else:
        hf = hf_config(ours.config, ours.config.vocab_size, 0, None, 2, 3)
        hf.sparse_prediction = name.endswith("sparse_prediction")
        model, inputs = transformers.ModernBertForMaskedLM(hf), hf_batch
        model.load_state_dict(ours.state_dict())
    optimizer = build_optimizer(model, c.optimizer, lr=c.lr, weight_decay=c.weight_decay, betas=tuple(c.betas),
                                eps=c.eps)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(c, 1, "fp32", {}, 0))
    engine.train()
    return engine, inputs


def peak_memory(names: tuple[str, ...], args, vocab_size: int) -> dict[str, int]:
    """{name: bytes}: the peak resident set of `args.memory_steps` training steps of each model of `names`, one
    after another in one fresh process (one model a process for figures that mean something)."""
    done = subprocess.run([sys.executable, __file__, "--memory-of", ",".join(names), "--preset", args.preset, "--seq",
                           str(args.seq), "--micro-batch", str(args.micro_batch), "--vocab-size", str(vocab_size),
                           "--memory-steps", str(args.memory_steps), *(["--data", str(args.data)] if args.data else [])],
                          capture_output=True, text=True, env=_fresh_env())
    if done.returncode:
        sys.exit(f"memory of {', '.join(names)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fresh_env() -> dict:
    """This environment without the process group of this process (the child sets up its own)."""
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return {**{k: v for k, v in os.environ.items() if k not in launcher}, "PYTHONPATH": str(ROOT)}


def measure_memory(args) -> None:
    """The child process of peak_memory: prints {name: peak bytes} of the models named in --memory-of."""
    import deepspeed  # noqa: F401  (its libraries are loaded before the footprint is taken)

    from pretrain.run.tune import PeakMemory

    batches, vocab_size = batches_of(args, args.memory_steps)
    peaks = {}
    for name in args.memory_of.split(","):
        memory = PeakMemory(cuda=False)
        engine, inputs = build(name, args.preset, vocab_size, args.micro_batch)
        for b in batches:
            engine.backward(engine(**inputs(b)).loss)
            engine.step()
        peaks[name] = memory.peak()
        del engine  # freed before the next model is built
    print(json.dumps(peaks))


def batches_of(args, count: int) -> tuple[list[dict], int]:
    if args.data:
        return data_batches(args.data, args.micro_batch, count)
    return random_batches(args.seq, args.micro_batch, count, args.vocab_size), args.vocab_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--seq", type=int, default=512, help="row length of the random data")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=32000, help="of the random data")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--memory-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for every model (one keeps a shared machine's load off the ratios)")
    parser.add_argument("--data", type=Path, help="HDF5 variant directory (its stored masks) instead of random rows")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)  # MODELS, comma-separated
    parser.add_argument("--smoke", action="store_true", help="tiny, seq 64, vocabulary 512, 1 round of 1 step, the "
                                                             "models' memory in one process")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.seq, args.micro_batch, args.vocab_size, args.rounds, args.steps_per_round = \
            "tiny", 64, 4, 512, 1, 1
        args.memory_steps, args.data = 1, None
    sys.path.insert(0, str(ROOT))
    if args.memory_of:
        return measure_memory(args)
    import torch

    torch.set_num_threads(args.threads)
    batches, vocab_size = batches_of(args, args.steps_per_round)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    positions = sum(b["input_ids"].numel() for b in batches)
    print(f"CPU, {os.cpu_count()} cores (shared machine, load {os.getloadavg()[0]:.1f}), torch threads "
          f"{torch.get_num_threads()}, ModernBERT {args.preset}, rows of {batches[0]['input_ids'].shape[1]}, "
          f"micro-batch {args.micro_batch}, vocabulary {vocab_size:,}, {real / positions:.0%} "
          f"of the positions real, {'data ' + str(args.data) if args.data else 'random rows'}, AdamW (DeepSpeed)")
    engines = {name: build(name, args.preset, vocab_size, args.micro_batch) for name in MODELS}
    with torch.no_grad():
        losses = {name: float(engine(**inputs(batches[0])).loss) for name, (engine, inputs) in engines.items()}
    if max(losses.values()) - min(losses.values()) > 1e-3 * max(losses.values()):
        sys.exit(f"error: the models' losses on the first micro-batch differ: {losses}")
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for round_ in range(args.rounds + 1):  # round 0 warms up and is not counted
        for name, (engine, inputs) in engines.items():
            start = time.perf_counter()
            for b in batches:
                engine.backward(engine(**inputs(b)).loss)
                engine.step()
            if round_ > 0:
                seconds[name].append(time.perf_counter() - start)
        if round_ > 0:
            print(f"round {round_} (load {os.getloadavg()[0]:.1f}): "
                  + ", ".join(f"{name} {real / seconds[name][-1]:,.0f}" for name in engines)
                  + " real tokens/s; wiki2bert / "
                  + ", ".join(f"{name} {seconds[name][-1] / seconds['wiki2bert'][-1]:.2f}x" for name in MODELS[1:]),
                  flush=True)
    peaks = peak_memory(MODELS, args, vocab_size) if args.smoke else \
        {name: peak_memory((name,), args, vocab_size)[name] for name in MODELS}
    speed = {name: (real / min(s), real * len(s) / sum(s)) for name, s in seconds.items()}
    print(f"first loss (same weights and batch): {losses['wiki2bert']:.5f}")
    for name in MODELS:
        print(f"{name:<33} {speed[name][0]:>9,.0f} real tokens/s best round, {speed[name][1]:>9,.0f} mean, "
              f"peak {peaks[name] / 2 ** 20:>7,.0f} MiB")
    for name in MODELS[1:]:
        paired = np.median(np.array(seconds[name]) / np.array(seconds["wiki2bert"]))
        print(f"wiki2bert / {name}: {speed['wiki2bert'][0] / speed[name][0]:.2f}x best round, "
              f"{speed['wiki2bert'][1] / speed[name][1]:.2f}x mean, {paired:.2f}x median of the rounds' ratios, "
              f"memory {peaks['wiki2bert'] / peaks[name]:.2f}x (load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
