"""Benchmark of pretraining on CPU: tokens/s of our BERT against `transformers.BertForPreTraining` of the same
size, with the same micro-batch, the same DeepSpeed config and optimizer and the same batches, in one process
(measured in alternating rounds, so that load on a shared machine hits both alike); then `pretrain phase1
--preset mini` itself, end to end, for its tokens/s and the share of time spent waiting for data.

Data: --data DIR (an HDF5 variant directory at seq 128, with --vocab DIR if it holds no vocab.txt), else
random ids in NVIDIA's layout with BERT's vocabulary size (30,522; throughput does not depend on the ids).

    .venv/bin/python bench/pretrain.py [--data DIR] [--micro-batch 32] [--rounds 5] [--steps-per-round 4]
    .venv/bin/python bench/pretrain.py --smoke   # tiny, vocabulary 1,024, 3 CLI steps, 1 round of 1 step
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke_data import RANDOM_SEQ_LEN as SEQ_LEN, write_random_data

ROOT = Path(__file__).resolve().parent.parent
VOCAB_SIZE = 30522  # BERT's, of the random data


def run_cli(data: Path, vocab: Path | None, out: Path, preset: str, micro_batch: int, steps: int) -> dict:
    """`pretrain phase1 --preset <preset>`, global batch = one micro-batch; tokens/s and data wait over steps 3.."""
    cmd = [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out), "--preset", preset,
           "--set", f"global_batch={micro_batch}", "--set", f"micro_batch={micro_batch}", "--set", f"steps={steps}",
           "--set", "log_every=1", "--set", f"checkpoint_every={steps}", "--set", "warmup=0.5"]
    if vocab:
        cmd += ["--vocab", str(vocab)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"pretrain phase1 failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "phase1" / "metrics.jsonl").read_text().splitlines()][2:]
    seconds = sum(micro_batch / r["samples_per_s"] for r in rows)
    return {"tokens_per_s": len(rows) * micro_batch * SEQ_LEN / seconds,
            "data_wait_share": sum(r["data_wait_s"] for r in rows) / seconds, "steps": len(rows),
            "losses": [round(r["loss"], 3) for r in rows], "peak_rss_gb": _children_rss_gb()}


def compare_models(run_dir: Path, data: Path, vocab_size: int, micro_batch: int, rounds: int,
                   steps_per_round: int) -> dict[str, tuple[float, float]]:
    """Both models under deepspeed.initialize with the run's ds_config.json and LAMB, on the same batches."""
    import deepspeed
    import torch
    import transformers

    from pretrain.data.loader import make_loader, model_inputs, open_data
    from pretrain.model.hf_config import hf_config
    from pretrain.config import ModelConfig
    from pretrain.model.bert.model import BertForPreTraining
    from pretrain.optim.optimizers import build_optimizer
    from pretrain.run.deepspeed_settings import single_process_env

    ds_config = json.loads((run_dir / "ds_config.json").read_text())
    config = ModelConfig(**json.loads((run_dir / "model_config.json").read_text()))
    pretraining = open_data(data, SEQ_LEN, vocab_size)
    batches = []
    for batch, _ in zip(make_loader(pretraining, micro_batch, vocab_size, workers=0), range(steps_per_round)):
        batches.append(model_inputs(batch)[0])

    def hf_batch(b: dict) -> dict:
        labels = torch.full_like(b["input_ids"], -100)
        valid = b["masked_lm_positions"] != 0
        labels.scatter_(1, b["masked_lm_positions"], torch.where(valid, b["masked_lm_ids"], -100))
        labels[:, 0] = -100  # the zero-padded slots scattered into [CLS]
        return {"input_ids": b["input_ids"], "token_type_ids": b["token_type_ids"],
                "attention_mask": b["attention_mask"], "labels": labels,
                "next_sentence_label": b["next_sentence_labels"]}

    single_process_env()
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    theirs = transformers.BertForPreTraining(hf_config(config, config.vocab_size, pad_token_id=0))
    theirs.load_state_dict(ours.state_dict())
    engines = {}
    for name, model, inputs in (("wiki2bert", ours, batches), ("transformers", theirs, [hf_batch(b) for b in batches])):
        engine, *_ = deepspeed.initialize(model=model, optimizer=build_optimizer(model, "lamb", lr=1e-3),
                                          config=ds_config)
        engine.train()
        engines[name] = (engine, inputs)
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for round_ in range(rounds + 1):  # round 0 warms up and is not counted
        for name, (engine, inputs) in engines.items():
            start = time.perf_counter()
            for b in inputs:
                engine.backward(engine(**b).loss)
                engine.step()
            if round_ > 0:
                seconds[name].append(time.perf_counter() - start)
    tokens = steps_per_round * micro_batch * SEQ_LEN
    # best round (least disturbed by other load) and the mean over all rounds
    return {name: (tokens / min(s), tokens * len(s) / sum(s)) for name, s in seconds.items()}


def _children_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="HDF5 variant directory (seq 128); default: random data")
    parser.add_argument("--vocab", type=Path, help="directory with vocab.txt, if --data has none")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-per-round", type=int, default=4)
    parser.add_argument("--cli-steps", type=int, default=20)
    parser.add_argument("--preset", default="mini", help="model size (pretrain/model/bert/ PRESETS)")
    parser.add_argument("--smoke", action="store_true", help="random data over 1,024 tokens, tiny, micro-batch 4, "
                                                             "3 CLI steps (2 warm-up), 1 round of 1 step")
    args = parser.parse_args()
    if args.smoke:
        args.data, args.preset, args.micro_batch, args.rounds, args.steps_per_round, args.cli_steps = \
            None, "tiny", 4, 1, 1, 3
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from wiki2bert_core.wordpiece import read_vocab
    from wiki2bert_core.variant_dir import find_vocab_file

    with tempfile.TemporaryDirectory(prefix="bench_pretrain_") as tmp:
        data = args.data or (write_random_data(Path(tmp) / "hu", files=1, samples=64, vocab_size=1024) if args.smoke
                             else write_random_data(Path(tmp) / "hu", files=4, samples=512, vocab_size=VOCAB_SIZE))
        vocab_size = len(read_vocab(find_vocab_file(data, args.vocab)))
        print(f"CPU, {os.cpu_count()} cores (shared machine), torch threads {_threads()}, preset {args.preset}, "
              f"seq {SEQ_LEN}, "
              f"micro-batch {args.micro_batch}, vocabulary {vocab_size:,}, data {'random' if not args.data else data}")
        cli = run_cli(data, args.vocab, Path(tmp) / "run", args.preset, args.micro_batch, args.cli_steps)
        print(f"pretrain phase1 --preset {args.preset} (end to end, {cli['steps']} steps after 2 warm-up): "
              f"{cli['tokens_per_s']:,.0f} tokens/s, waiting for data {100 * cli['data_wait_share']:.1f}% of the time, "
              f"peak RSS {cli['peak_rss_gb']:.2f} GB")
        print(f"  losses: {cli['losses']}")
        speed = compare_models(Path(tmp) / "run" / "phase1", data, vocab_size, args.micro_batch, args.rounds,
                               args.steps_per_round)
        for name, (best, mean) in speed.items():
            print(f"{name + ' BertForPreTraining':<34} {best:>8,.0f} tokens/s best round, {mean:>8,.0f} mean "
                  f"(same DeepSpeed config, LAMB)")
        print(f"speed-up: {speed['wiki2bert'][0] / speed['transformers'][0]:.2f}x best round, "
              f"{speed['wiki2bert'][1] / speed['transformers'][1]:.2f}x mean")


def _threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
