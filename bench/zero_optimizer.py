"""Benchmark: the optimizer step of LAMB/LANS under ZeRO 1 and 2 against ZeRO 0 (per-tensor trust ratios in all
three), on the same model, ranks and batches. Per engine step it times the client optimizer's `step()` (summed over
the calls ZeRO makes, one per parameter group, including the all-reduce of the per-tensor norms) and DeepSpeed's
whole `engine.step()` (gradient reduction, clipping, step, all-gather of the weights); medians over the steps after
the first two, and the ratio to ZeRO 0.

    .venv/bin/python bench/zero_optimizer.py [--preset small] [--ranks 2] [--steps 6] [--precision fp32]
    .venv/bin/python bench/zero_optimizer.py --smoke   # tiny, 2 ranks, 3 steps, LAMB: the script end to end
    # GPU (8 GPUs, bf16): .venv/bin/python bench/zero_optimizer.py --preset 1.5b --ranks 8 --precision bf16

Starts `--ranks` processes with torchrun (gloo on CPU, NCCL on GPU) and prints a table from rank 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:1] = [str(ROOT)]  # not bench/, whose pretrain.py would shadow the package
SEQ_LEN, PREDICTIONS, VOCAB = 128, 20, 30522


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _batch(micro_batch: int, device) -> dict:
    g = torch.Generator().manual_seed(0)
    return {k: v.to(device) for k, v in dict(
        input_ids=torch.randint(5, VOCAB, (micro_batch, SEQ_LEN), generator=g),
        token_type_ids=torch.zeros(micro_batch, SEQ_LEN, dtype=torch.long),
        attention_mask=torch.ones(micro_batch, SEQ_LEN, dtype=torch.long),
        masked_lm_positions=torch.arange(1, PREDICTIONS + 1).repeat(micro_batch, 1),
        masked_lm_ids=torch.randint(5, VOCAB, (micro_batch, PREDICTIONS), generator=g),
        next_sentence_labels=torch.zeros(micro_batch, dtype=torch.long)).items()}


def measure(preset: str, optimizer_name: str, stage: int, precision: str, micro_batch: int, steps: int) -> dict:
    import deepspeed

    from pretrain.config import model_config
    from pretrain.model.bert.model import BertForPreTraining
    from pretrain.optim.optimizers import build_optimizer
    from pretrain.optim.zero_partitions import use_tensor_trust_ratios

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = BertForPreTraining(model_config(preset, VOCAB))
    optimizer = build_optimizer(model, optimizer_name, lr=1e-3)
    world = int(os.environ["WORLD_SIZE"])
    config = {"train_batch_size": micro_batch * world, "train_micro_batch_size_per_gpu": micro_batch,
              "gradient_clipping": 1.0, "zero_optimization": {"stage": stage},
              "zero_allow_untested_optimizer": True, "steps_per_print": 2 ** 62}
    if precision != "fp32":
        config.update({"torch_autocast": {"enabled": True, "dtype": "bfloat16"}} if stage == 0
                      else {"bf16": {"enabled": True}})  # as pretrain's train.deepspeed_config does
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    use_tensor_trust_ratios(engine)
    client = engine.basic_optimizer
    inner_step, spent = client.step, []

    def timed_step(*args, **kwargs):
        _sync()
        start = time.perf_counter()
        out = inner_step(*args, **kwargs)
        _sync()
        spent.append(time.perf_counter() - start)
        return out

    client.step = timed_step
    batch = _batch(micro_batch, engine.device)
    optimizer_s, engine_s = [], []
    for _ in range(steps):
        engine.backward(engine(**batch).loss)
        spent.clear()
        _sync()
        start = time.perf_counter()
        engine.step()
        _sync()
        engine_s.append(time.perf_counter() - start)
        optimizer_s.append(sum(spent))
    engine.destroy()
    return {"optimizer_step_s": statistics.median(optimizer_s[2:]), "engine_step_s": statistics.median(engine_s[2:]),
            "parameters": model.num_parameters()}


def worker(args) -> None:
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not torch.cuda.is_available() else "cuda")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rows = []
    for optimizer_name in args.optimizers:
        for stage in (0, 1, 2):
            rows.append({"optimizer": optimizer_name, "zero": stage,
                         **measure(args.preset, optimizer_name, stage, args.precision, args.micro_batch, args.steps)})
    if int(os.environ["RANK"]) == 0:
        print(json.dumps(rows))
    from pretrain.run.train import leave_process_groups
    leave_process_groups()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--optimizers", nargs="+", default=["lamb", "lans"])
    parser.add_argument("--smoke", action="store_true", help="--preset tiny --ranks 2 --steps 3 --optimizers lamb")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:  # 3 steps: the medians are over steps 3..
        args.preset, args.ranks, args.steps, args.optimizers = "tiny", 2, 3, ["lamb"]
    if args.worker:
        return worker(args)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.ranks),
           __file__, "--worker", "--preset", args.preset, "--steps", str(args.steps), "--micro-batch",
           str(args.micro_batch), "--precision", args.precision, "--optimizers", *args.optimizers]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr[-4000:])
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    print(f"{args.preset} ({rows[0]['parameters']:,} parameters), {args.ranks} ranks, {args.precision}, {device}, "
          f"micro-batch {args.micro_batch}, medians of steps 3..{args.steps}")
    print(f"{'optimizer':<10}{'ZeRO':>5}{'optimizer step ms':>19}{'x ZeRO-0':>10}{'engine.step ms':>16}{'x ZeRO-0':>10}")
    for row in rows:
        base = next(r for r in rows if r["optimizer"] == row["optimizer"] and r["zero"] == 0)
        print(f"{row['optimizer']:<10}{row['zero']:>5}{row['optimizer_step_s'] * 1e3:>19.1f}"
              f"{row['optimizer_step_s'] / base['optimizer_step_s']:>10.2f}{row['engine_step_s'] * 1e3:>16.1f}"
              f"{row['engine_step_s'] / base['engine_step_s']:>10.2f}")


if __name__ == "__main__":
    main()
