"""GPU benchmark of pretraining throughput: BERT base and large, bf16, phase 1 (seq 128) and phase 2 (seq 512), and
ModernBERT-base at its phase 1 (seq 1,024) and phase 2 (seq 8,192), padded and packed micro-batches -- sequences/s,
real (non-padding) tokens/s, model FLOPs utilization (real tokens only; ModernBERT's local layers counted with the
pairs in their window) and peak memory of a training step (forward, backward, LAMB for BERT, AdamW for ModernBERT as
their recipes), beside NVIDIA's published A100-80GB figures for BERT-large (one GPU, fp16: 580 sequences/s at seq
128, 210 at 512).

For each (model, seq, layout) it tries the variants that may make it faster -- attention kernel (SDPA with a mask,
nested jagged tensors, flash-attn varlen when importable), SDPA backend for the mask kernel, torch.compile, a
larger micro-batch -- and reports the fastest, with every variant's figure. One command, nothing to install:

    .venv/bin/python bench/gpu.py [--hdf5 DIR] [--presets base large] [--steps 20]
    .venv/bin/python bench/gpu.py --smoke        # CPU, tiny model, sizes and vocabulary: the script end to end

Data: --hdf5 (a pipeline work dir's hdf5 stage directory: its variants of each sequence length) gives the
instances; without it, random ids whose lengths follow the huwiki dev data's fill (86% of the row at seq 128, 55% at
512; half the rows full and the others of uniform length at 1,024 and 8,192), 15% predicted for BERT and 30% for
ModernBERT.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NVIDIA_A100_LARGE = {128: 580, 512: 210}  # sequences/s, BERT-large, one A100-80GB, fp16 (NVIDIA's DeepLearningExamples)
MICRO_BATCH = {("base", 128): 128, ("base", 512): 32, ("large", 128): 64, ("large", 512): 16,
               ("modernbert", "base", 1024): 16, ("modernbert", "base", 8192): 2}
FULL_SHARE = {128: 0.70, 512: 0.08}  # random data: share of full-length instances, the rest uniform in [8, seq]
MASK_RATE = {"bert": 0.15, "modernbert": 0.3}  # the recipes' share of tokens to predict
MAX_PREDICTIONS = {128: 20, 512: 80}  # NVIDIA's slots for BERT's 15%
OPTIMIZER = {"bert": "lamb", "modernbert": "adamw"}


@dataclasses.dataclass(frozen=True)
class Variant:
    packed: bool
    kernel: str  # attention.py kernel
    backend: str | None  # SDPA backend forced for the mask kernel (None: PyTorch chooses)
    compiled: bool
    micro_batch: int

    def __str__(self) -> str:
        parts = ["packed" if self.packed else "padded", self.kernel]
        parts += [self.backend] if self.backend else []
        parts += ["compiled"] if self.compiled else []
        return f"{'/'.join(parts)}, micro-batch {self.micro_batch}"


def random_batches(seq_len: int, micro_batch: int, count: int, vocab_size: int, seed: int = 0,
                   mask_rate: float = 0.15) -> list[dict]:
    """Micro-batches in NVIDIA's HDF5 layout with random ids and lengths, `mask_rate` of each row predicted."""
    import torch

    rng = np.random.default_rng(seed)
    predictions = max(MAX_PREDICTIONS.get(seq_len, 1), int(np.ceil(mask_rate * seq_len)))
    batches = []
    for _ in range(count):
        full = rng.random(micro_batch) < FULL_SHARE.get(seq_len, 0.5)
        lengths = np.where(full, seq_len, rng.integers(min(8, seq_len), seq_len + 1, micro_batch))
        columns = np.arange(seq_len)
        real = columns[None] < lengths[:, None]
        positions = np.zeros((micro_batch, predictions), np.int64)
        for i, n in enumerate(lengths):
            chosen = np.sort(rng.choice(np.arange(1, n), min(predictions, max(1, int(mask_rate * n))),
                                        replace=False))
            positions[i, :len(chosen)] = chosen
        batch = {"input_ids": rng.integers(5, vocab_size, (micro_batch, seq_len)) * real,
                 "token_type_ids": (columns[None] >= lengths[:, None] // 2) * real,
                 "attention_mask": real.astype(np.int64), "masked_lm_positions": positions,
                 "masked_lm_ids": rng.integers(5, vocab_size, positions.shape) * (positions != 0),
                 "next_sentence_labels": rng.integers(0, 2, micro_batch)}
        batches.append({k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in batch.items()})
    return batches


def hdf5_batches(hdf5_dir: Path, seq_len: int, micro_batch: int, count: int) -> tuple[list[dict], int]:
    from wiki2bert_core.wordpiece import read_vocab
    from wiki2bert_core.variant_dir import find_vocab_file
    from pretrain.data.loader import make_loader, model_inputs, open_data

    found = sorted(hdf5_dir.glob(f"*seq_len_{seq_len}_*"))
    if not found:
        sys.exit(f"error: {hdf5_dir}: no HDF5 variant for seq_len {seq_len}")
    vocab_size = len(read_vocab(find_vocab_file(found[0])))
    data = open_data(found[0], seq_len, vocab_size)
    batches = []
    for batch, _ in zip(make_loader(data, micro_batch, vocab_size, workers=0), range(count)):
        batches.append(model_inputs(batch)[0])
    return batches, vocab_size


def measure(model, optimizer, batches: list[dict], variant: Variant, device, dtype, steps: int) -> dict:
    """Train steps over `batches` (cycled); sequences/s, real tokens/s, seconds and peak memory of the timed
    steps after two warm-up steps."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pretrain.data.packing import pack_batch

    inputs = [{k: v.to(device) for k, v in (pack_batch(b) if variant.packed else b).items()} for b in batches]
    model.attention = variant.kernel
    forward = torch.compile(model, dynamic=True) if variant.compiled else model
    backend = sdpa_kernel(getattr(SDPBackend, variant.backend)) if variant.backend else contextlib.nullcontext()
    autocast = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    cuda = device.type == "cuda"

    def step(b):
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            out = forward(**b)
        out.loss.backward()
        optimizer.step()

    with backend:
        for b in inputs[:2]:
            step(b)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for i in range(steps):
            step(inputs[i % len(inputs)])
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    sequences = sum(inputs[i % len(inputs)]["next_sentence_labels"].numel() for i in range(steps))
    real = sum(int((inputs[i % len(inputs)]["attention_mask"] != 0).sum()) for i in range(steps))
    lengths = [_lengths(inputs[i % len(inputs)]) for i in range(steps)]
    flops = sum(model.training_flops(float(n.sum()), float((n ** 2).sum()), n.numel(),
                                     float((inputs[i % len(inputs)]["masked_lm_positions"] != 0).sum()))
                for i, n in enumerate(lengths))
    return {"sequences_per_s": sequences / seconds, "real_tokens_per_s": real / seconds,
            "tflops": flops / seconds / 1e12,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else float("nan")}


def _lengths(batch):
    from pretrain.model.attention import instance_lengths

    return instance_lengths(batch["attention_mask"]).double()


def variants(device, micro_batch: int, smoke: bool, windows: bool) -> list[Variant]:
    from pretrain.model.attention import available_kernels

    kernels = available_kernels(device, windows)
    found = []
    for packed in (False, True):
        for kernel in kernels if packed else ["mask"]:  # padded: compute spent on padding, the baseline
            backends = [None] + (["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"]
                                 if kernel == "mask" and device.type == "cuda" else [])
            for backend in backends:
                for compiled in (False,) if smoke else (False, True):
                    for mb in (micro_batch, 2 * micro_batch):
                        found.append(Variant(packed, kernel, backend, compiled, mb))
    return found


def run_case(arch: str, preset: str, seq_len: int, args, device, dtype) -> dict[str, tuple[Variant, dict]]:
    """The fastest padded and the fastest packed variant of one (arch, preset, seq_len), printing each variant."""
    import torch

    from pretrain.config import model_config
    from pretrain.model.arch import pretraining_model, spec
    from pretrain.optim.optimizers import build_optimizer

    base_mb = args.micro_batch or MICRO_BATCH.get((preset, seq_len) if arch == "bert" else (arch, preset, seq_len), 8)
    # BERT: position embeddings for the sequence and the dropout of its presets; ModernBERT's presets hold 8,192
    settings = (dict(max_position_embeddings=max(512, seq_len), hidden_dropout_prob=0.1,
                     attention_probs_dropout_prob=0.1) if arch == "bert" else
                dict(max_position_embeddings=max(8192, seq_len)))
    best: dict[str, tuple[Variant, dict]] = {}
    cache: dict[int, tuple[list[dict], int]] = {}
    for variant in variants(device, base_mb, args.smoke, spec(arch).windows):
        if variant.micro_batch not in cache:
            cache[variant.micro_batch] = (hdf5_batches(args.hdf5, seq_len, variant.micro_batch, args.batches)
                                          if args.hdf5 else
                                          (random_batches(seq_len, variant.micro_batch, args.batches, args.vocab_size,
                                                          mask_rate=MASK_RATE[arch]), args.vocab_size))
        batches, vocab_size = cache[variant.micro_batch]
        torch.manual_seed(0)
        with torch.device(device):
            model = pretraining_model(model_config(preset, vocab_size, arch, **settings))
        model.train()
        optimizer = build_optimizer(model, OPTIMIZER[arch], lr=1e-4)
        try:
            result = measure(model, optimizer, batches, variant, device, dtype, args.steps)
        except (RuntimeError, NotImplementedError, AssertionError) as e:  # OOM, a backend or compile refusing
            print(f"    {str(variant):<48} failed: {str(e).splitlines()[0][:90]}", flush=True)
            result = None
        finally:
            del model, optimizer
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if result is None:
            continue
        print(f"    {str(variant):<48} {result['sequences_per_s']:>9,.1f} seq/s {result['real_tokens_per_s']:>12,.0f} "
              f"real tokens/s {result['tflops']:>7.1f} TFLOP/s {result['peak_memory_gb']:>6.1f} GB", flush=True)
        layout = "packed" if variant.packed else "padded"
        if layout not in best or result["sequences_per_s"] > best[layout][1]["sequences_per_s"]:
            best[layout] = (variant, result)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdf5", type=Path, help="a pipeline work dir's hdf5 stage directory (else random data)")
    parser.add_argument("--presets", nargs="+", default=["base", "large"], help="BERT's")
    parser.add_argument("--seq", type=int, nargs="+", default=[128, 512], help="BERT's")
    parser.add_argument("--modernbert-presets", nargs="+", default=["base"], help="none: no ModernBERT rows")
    parser.add_argument("--modernbert-seq", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--micro-batch", type=int, help="default: by model and seq (tried at 1x and 2x)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--batches", type=int, default=4, help="distinct micro-batches cycled through")
    parser.add_argument("--vocab-size", type=int, default=30522, help="of the random data (default: BERT's)")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, tiny model, seq 32, vocabulary 1024: the script end to end")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from pretrain.run.metrics import peak_tflops

    if args.smoke:
        device, dtype = torch.device("cpu"), torch.bfloat16
        args.presets, args.seq, args.steps, args.batches, args.vocab_size = ["tiny"], [32], 2, 2, 1024
        args.modernbert_presets, args.modernbert_seq = ["tiny"], [64]
        args.micro_batch = args.micro_batch or 4
    elif not torch.cuda.is_available():
        sys.exit("error: no CUDA GPU; bench/gpu.py measures a GPU (--smoke runs it on CPU with tiny sizes)")
    else:
        device, dtype = torch.device("cuda"), torch.bfloat16
        torch.backends.cuda.matmul.allow_tf32 = True
    peak = peak_tflops() if device.type == "cuda" else None
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (smoke test, figures mean nothing)"
    print(f"{name}, torch {torch.__version__}, bf16 autocast, LAMB (BERT) / AdamW (ModernBERT), {args.steps} timed "
          f"steps per variant, data {args.hdf5 or 'random (huwiki-like lengths)'}; peak {peak or 'unknown'} TFLOP/s",
          flush=True)
    gc.freeze()  # the collection after each variant (freeing its model) then walks the variant's objects, not torch's
    cases = [("bert", preset, seq_len) for preset in args.presets for seq_len in args.seq]
    cases += [("modernbert", preset, seq_len) for preset in args.modernbert_presets if preset != "none"
              for seq_len in args.modernbert_seq]
    summary = []
    for arch, preset, seq_len in cases:
        print(f"{arch} {preset}, seq {seq_len}:", flush=True)
        for layout, (variant, r) in run_case(arch, preset, seq_len, args, device, dtype).items():
            summary.append((arch, preset, seq_len, layout, variant, r))
    print("\nfastest per case:")
    print(f"{'model':<16} {'seq':>5} {'layout':<7} {'seq/s':>9} {'real tok/s':>12} {'MFU':>6} {'peak GB':>8}  "
          f"{'NVIDIA A100 large':>17}  variant")
    for arch, preset, seq_len, layout, variant, r in summary:
        mfu = f"{100 * r['tflops'] / peak:5.1f}%" if peak else "   n/a"
        nvidia = (f"{NVIDIA_A100_LARGE[seq_len]} seq/s" if (arch, preset) == ("bert", "large")
                  and seq_len in NVIDIA_A100_LARGE else "")
        print(f"{arch + ' ' + preset:<16} {seq_len:>5} {layout:<7} {r['sequences_per_s']:>9,.1f} "
              f"{r['real_tokens_per_s']:>12,.0f} {mfu:>6} {r['peak_memory_gb']:>8.1f}  {nvidia:>17}  {variant}")


if __name__ == "__main__":
    main()
