"""Benchmark: `pretrain estimate` against measured memory. Each configuration trains a few steps in a fresh
process (one rank, LAMB, seq 128, DeepSpeed configured as pretrain configures it) and reports its peak memory
above the footprint before the model is made (after a throwaway DeepSpeed engine has loaded DeepSpeed's libraries):
on GPU `torch.cuda.max_memory_allocated`, on CPU the peak RSS with glibc told to return freed memory at once
(MALLOC_MMAP_THRESHOLD_, so RSS follows the live tensors as max_memory_allocated does). It is compared with the
estimate's model states + peak phase, i.e. without the working margin (CUDA context, fragmentation), which neither
measure sees; on CPU, of ZeRO's reduce bucket (torch.empty) only the pages written are resident.

    .venv/bin/python bench/estimate_memory.py [--configs tiny:0 tiny:1 mini:0 mini:1 base:0 base:1] [--micro-batch 8]
    .venv/bin/python bench/estimate_memory.py --configs modernbert/tiny:0 modernbert/mini:0 modernbert/base:0   # ARCH/
    .venv/bin/python bench/estimate_memory.py --smoke   # tiny:1, micro-batch 2: the script end to end
    # GPU: .venv/bin/python bench/estimate_memory.py --precision bf16 --micro-batch 32 \\
    #          --configs base:0 base:1 large:0 large:1 1.5b:1
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:1] = [str(ROOT)]  # not bench/, whose pretrain.py would shadow the package
SEQ_LEN, PREDICTIONS, VOCAB = 128, 20, 30522
MIB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(arch: str, preset: str, zero_stage: int, micro_batch: int, precision: str, steps: int = 3) -> dict:
    """Peak bytes of training `steps` steps, above the footprint before the model exists."""
    cuda = torch.cuda.is_available()
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if cuda else "cpu")
    import deepspeed

    from pretrain.config import model_config
    from pretrain.model.arch import pretraining_model
    from pretrain.optim.optimizers import build_optimizer
    from pretrain.optim.zero_partitions import use_tensor_trust_ratios

    deepspeed.init_distributed(verbose=False)
    warm_up = torch.nn.Linear(2, 2)  # DeepSpeed loads its libraries at the first engine: not the model's memory
    deepspeed.initialize(model=warm_up, optimizer=torch.optim.SGD(warm_up.parameters(), lr=0.1),
                         config={"train_batch_size": 1, "zero_optimization": {"stage": zero_stage},
                                 "zero_allow_untested_optimizer": True, "steps_per_print": 2 ** 62})
    batch = dict(input_ids=torch.randint(5, VOCAB, (micro_batch, SEQ_LEN)),
                 token_type_ids=torch.zeros(micro_batch, SEQ_LEN, dtype=torch.long),
                 attention_mask=torch.ones(micro_batch, SEQ_LEN, dtype=torch.long),
                 masked_lm_positions=torch.arange(1, PREDICTIONS + 1).repeat(micro_batch, 1),
                 masked_lm_ids=torch.randint(5, VOCAB, (micro_batch, PREDICTIONS)),
                 next_sentence_labels=torch.zeros(micro_batch, dtype=torch.long))
    before = torch.cuda.memory_allocated() if cuda else _rss()
    with torch.device("cuda" if cuda else "cpu"):
        model = pretraining_model(model_config(preset, VOCAB, arch))
    config = {"train_batch_size": micro_batch, "train_micro_batch_size_per_gpu": micro_batch,
              "gradient_clipping": 1.0, "zero_optimization": {"stage": zero_stage},
              "zero_allow_untested_optimizer": True, "steps_per_print": 2 ** 62}
    if precision != "fp32":  # as pretrain's engine settings: autocast without ZeRO, DeepSpeed's bf16 with it
        config.update({"torch_autocast": {"enabled": True, "dtype": "bfloat16"}} if zero_stage == 0
                      else {"bf16": {"enabled": True}})
    engine, *_ = deepspeed.initialize(model=model, optimizer=build_optimizer(model, "lamb", lr=1e-4), config=config)
    use_tensor_trust_ratios(engine)
    batch = {k: v.to(engine.device) for k, v in batch.items()}
    for _ in range(steps):
        engine.backward(engine(**batch).loss)
        engine.step()
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"measured": peak - before, "parameters": model.num_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny:0", "tiny:1", "mini:0", "mini:1", "base:0", "base:1"],
                        help="PRESET:ZERO_STAGE, or ARCH/PRESET:ZERO_STAGE (arch bert or modernbert)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--smoke", action="store_true", help="--configs tiny:1 --micro-batch 2")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.configs, args.micro_batch = ["tiny:1"], 2
    if args.worker:
        (arch, preset), stage = _config(args.worker)
        print(json.dumps(worker(arch, preset, int(stage), args.micro_batch, args.precision)))
        return

    from pretrain.tools.estimate import estimate_memory

    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "CPU RSS"
    print(f"1 rank, LAMB, {args.precision}, micro-batch {args.micro_batch} x {SEQ_LEN}, {device}")
    print(f"{'preset':<18}{'ZeRO':>5}{'estimate MiB':>14}{'measured MiB':>14}{'estimate/measured':>19}")
    for item in args.configs:
        (arch, preset), stage = _config(item)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
               "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
        done = subprocess.run([sys.executable, __file__, "--worker", item, "--micro-batch", str(args.micro_batch),
                               "--precision", args.precision], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        measured = json.loads(done.stdout.strip().splitlines()[-1])["measured"]
        d = estimate_memory(preset, VOCAB, int(stage), 1, args.micro_batch, SEQ_LEN, args.precision, "lamb",
                            max_predictions=PREDICTIONS, arch=arch)
        estimate = d["total_bytes"] - d["memory"]["working margin"]
        if not cuda:
            bucket = d["memory"]["ZeRO reduce bucket"]
            estimate -= bucket - min(bucket, 4 * d["parameters"])
        name = preset if arch == "bert" else f"{arch}/{preset}"
        print(f"{name:<18}{stage:>5}{estimate / MIB:>14.0f}{measured / MIB:>14.0f}{estimate / measured:>19.2f}")
    print("(estimate: model states + the peak phase, without the working margin"
          + ("" if cuda else " and the untouched part of ZeRO's reduce bucket") + ")")


def _config(item: str) -> tuple[tuple[str, str], str]:
    """ARCH/PRESET:STAGE (or PRESET:STAGE, BERT) -> ((arch, preset), stage)."""
    name, _, stage = item.partition(":")
    arch, _, preset = name.rpartition("/")
    return (arch or "bert", preset), stage


if __name__ == "__main__":
    main()
