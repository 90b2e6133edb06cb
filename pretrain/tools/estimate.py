"""GPU memory needed per GPU to pretrain a preset, as `pretrain` runs it (DeepSpeed defaults otherwise).

Model states, bytes per parameter (Rajbhandari et al., ZeRO, 2020), each GPU's share after ZeRO partitioning:
- ZeRO 0 (any precision): 4 (fp32 weights) + 4 (fp32 gradients) + 8 (the two Adam moments, which LAMB and LANS
  keep too) = 16. In 16 bits `pretrain` uses torch.autocast here (see engine.deepspeed_config), which holds 16-bit
  copies of the weights (2 bytes) for the forward/backward pass.
- ZeRO 1-3 (DeepSpeed's mixed precision): 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master weights and
  the moments) + 4 (the fp32 gradient partition the optimizer reads) = the "20 bytes per parameter" rule (20 in
  fp32 too: weights and gradients take 4, and the reduced gradient partition is already fp32, so it is no copy). Stage 1 partitions the 16 optimizer-side bytes over the GPUs, stage 2
  also the gradients, stage 3 also the weights. ZeRO 1/2 also allocate a contiguous reduce bucket of
  reduce_bucket_size (5e8) elements, fp32 in stage 1 and 16-bit in stage 2.

Transient memory, in three phases that do not overlap (the peak is the largest):
- forward/backward: activations. Per layer, the arch's formula (`layer_activation_bytes` in pretrain/model/<arch>/):
  for BERT (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022)
  s*b*h*(34 + 5*a*s/h) bytes in 16 bits, for s tokens, b sequences, hidden h, a heads; torch.autocast keeps the
  residual stream and LayerNorm inputs in fp32: 38 instead of 34. The 5*a*s/h part is the attention score matrix:
  the "mask" kernel's (SDPA with a mask may store it), which the unpadded kernels (flash-attention, nested) never
  store (`attention`). In fp32 the 2-byte tensors take 4 bytes: s*b*h*(66 + 9*a*s/h). ModernBERT's is counted the
  same way from what autograd keeps. With activation checkpointing only each layer's input is kept,
  plus one layer's full activations while it is recomputed. Embeddings (LayerNorm input, dropout mask) and the MLM
  head on the masked positions (transform inputs; logits, their fp32 copy, log-softmax and its gradient) come on
  top, and the autocast weight copies.
- gradient all-reduce (ZeRO 0): DeepSpeed flattens the gradients into buckets of up to 5e8 elements.
- optimizer step: fp32 temporaries the size of the tensors the optimizer sees, LAMB 2, LANS 3, StableAdamW 2,
  AdamW 1 (LAMB, LANS and StableAdamW work in buckets of optimizers.BUCKET_NUMEL elements on unflattened parameters;
  under ZeRO they get one flat partition per group).

A working margin covers the CUDA context and NCCL (1 GiB) and allocator fragmentation (10%).
"""
from __future__ import annotations

import functools
import math

import torch

from pretrain.config import ModelConfig, load_train_config, model_config, phase_of_length
from pretrain.model.arch import DEFAULT_ARCH, pretraining_model, spec
from pretrain.model.attention import KERNELS
from pretrain.optim.optimizers import BUCKET_NUMEL, OPTIMIZERS

PRECISIONS = ("fp32", "bf16", "fp16")
# fp32 copies of the optimizer's tensors during step()
OPTIMIZER_TEMPORARIES = {"lamb": 2, "lans": 3, "stableadamw": 2, "adamw": 1}
DEEPSPEED_BUCKET = 500_000_000  # elements: DeepSpeed's default reduce_bucket_size and all-reduce bucket
CONTEXT_BYTES = 1 << 30  # CUDA context, cuBLAS workspaces, NCCL buffers
FRAGMENTATION = 0.10
GIB = 1 << 30

MODEL_STATES = ("parameters", "gradients", "optimizer states", "fp32 gradient partition")
PERSISTENT = MODEL_STATES + ("ZeRO reduce bucket",)
PHASES = {
    "forward/backward": ("activations", "autocast 16-bit weights"),
    "gradient all-reduce": ("all-reduce buffer",),
    "optimizer step": ("optimizer step temporaries",),
}


@functools.lru_cache
def parameter_sizes(preset: str, vocab_size: int, arch: str = DEFAULT_ARCH) -> tuple[int, int]:
    """(number of parameters, elements of the largest tensor)."""
    with torch.device("meta"):  # shapes only, no memory
        model = pretraining_model(model_config(preset, vocab_size, arch))
    return model.num_parameters(), max(p.numel() for p in model.parameters())


def model_state_bytes_per_parameter(precision: str, zero_stage: int, gpus: int) -> dict[str, float]:
    """Bytes per model parameter each GPU keeps for the whole run, by kind, after ZeRO partitioning."""
    def share(partitioned: bool) -> float:
        return 1 / gpus if partitioned else 1.0

    if zero_stage == 0:
        return {"parameters": 4, "gradients": 4, "optimizer states": 8, "fp32 gradient partition": 0}
    width = 4 if precision == "fp32" else 2
    return {
        "parameters": width * share(zero_stage >= 3),
        "gradients": width * share(zero_stage >= 2),
        "optimizer states": 12 / gpus,
        # in fp32, DeepSpeed's .to(fp32) of the reduced gradient partition is no copy (measured: bench/estimate_memory.py)
        "fp32 gradient partition": 4 / gpus if width == 2 else 0,
    }


def activation_bytes(config: ModelConfig, micro_batch: int, seq_len: int, max_predictions: int, precision: str,
                     autocast: bool, activation_checkpointing: bool, scores: bool = True) -> int:
    """`scores`: whether the attention kernel stores the score matrices (see the module's doc)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    sbh = seq_len * micro_batch * hidden
    attention_ratio = config.num_attention_heads * seq_len / hidden * scores
    value_bytes = 4 if precision == "fp32" else 2
    per_layer = spec(config.arch).layer_activation_bytes(config, sbh, value_bytes, autocast, attention_ratio)
    if activation_checkpointing:
        encoder = layers * sbh * value_bytes + per_layer
    else:
        encoder = layers * per_layer
    embeddings = sbh * (value_bytes + 1)
    predictions = micro_batch * max_predictions
    head = predictions * (4 * hidden * value_bytes + config.vocab_size * (value_bytes + 4 + 4 + 4))
    return int(encoder + embeddings + head)


def estimate_memory(preset: str, vocab_size: int, zero_stage: int, gpus: int, micro_batch: int, seq_len: int,
                    precision: str = "bf16", optimizer: str = "lamb", activation_checkpointing: bool = False,
                    max_predictions: int | None = None, arch: str = DEFAULT_ARCH, attention: str = "mask") -> dict:
    """Memory per GPU, in bytes, by kind. max_predictions defaults to the mask_rate of the arch's recipe for seq_len
    (15% for BERT, 30% for ModernBERT) times seq_len, rounded up; `attention`: the kernel (mask stores the attention
    scores, the others do not)."""
    config = model_config(preset, vocab_size, arch)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage}")
    if gpus < 1 or micro_batch < 1:
        raise ValueError(f"gpus and micro-batch must be positive, got {gpus} and {micro_batch}")
    if not 1 <= seq_len <= config.max_position_embeddings:
        raise ValueError(f"sequence length must be 1..{config.max_position_embeddings}, got {seq_len}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if attention not in KERNELS:
        raise ValueError(f"unknown attention kernel {attention!r}; choose one of {', '.join(KERNELS)}")
    if max_predictions is None:
        max_predictions = math.ceil(load_train_config(phase_of_length(seq_len, arch), values={"arch": arch}).mask_rate
                                    * seq_len)

    parameters, largest_tensor = parameter_sizes(preset, vocab_size, arch)
    per_parameter = model_state_bytes_per_parameter(precision, zero_stage, gpus)
    memory = {kind: int(parameters * b) for kind, b in per_parameter.items()}
    memory["ZeRO reduce bucket"] = DEEPSPEED_BUCKET * {1: 4, 2: 2 if precision != "fp32" else 4}.get(zero_stage, 0)
    autocast = zero_stage == 0 and precision != "fp32"

    memory["activations"] = activation_bytes(config, micro_batch, seq_len, max_predictions, precision, autocast,
                                             activation_checkpointing, scores=attention == "mask")
    memory["autocast 16-bit weights"] = 2 * parameters if autocast else 0
    memory["all-reduce buffer"] = 4 * min(parameters, DEEPSPEED_BUCKET) if zero_stage == 0 else 0
    if zero_stage > 0:
        optimizer_elements = parameters / gpus  # one flat partition
    elif optimizer == "adamw":
        optimizer_elements = parameters  # torch's foreach AdamW takes all tensors at once
    else:
        optimizer_elements = min(parameters, max(BUCKET_NUMEL, largest_tensor))
    memory["optimizer step temporaries"] = int(OPTIMIZER_TEMPORARIES[optimizer] * 4 * optimizer_elements)

    phase_bytes = {phase: sum(memory[k] for k in kinds) for phase, kinds in PHASES.items()}
    peak_phase = max(phase_bytes, key=phase_bytes.get)
    persistent = sum(memory[k] for k in PERSISTENT)
    memory["working margin"] = int(CONTEXT_BYTES + FRAGMENTATION * (persistent + phase_bytes[peak_phase]))
    return {
        "arch": arch, "attention": attention, "preset": preset, "parameters": parameters,
        "vocab_size": config.vocab_size, "zero_stage": zero_stage,
        "gpus": gpus, "precision": precision, "optimizer": optimizer, "micro_batch": micro_batch,
        "seq_len": seq_len, "max_predictions": max_predictions, "activation_checkpointing": activation_checkpointing,
        "memory": memory,
        "model_states_bytes": sum(memory[k] for k in MODEL_STATES),
        "model_state_bytes_per_parameter": sum(per_parameter.values()),
        "persistent_bytes": persistent,
        "phase_bytes": phase_bytes,
        "peak_phase": peak_phase,
        "total_bytes": persistent + phase_bytes[peak_phase] + memory["working margin"],
    }


def format_estimate(d: dict) -> str:
    checkpointing = "on" if d["activation_checkpointing"] else "off"
    memory = d["memory"]

    def row(name: str, size: int, indent: int = 2, note: str = "") -> str:
        return f"{' ' * indent}{name:<{32 - indent}}{size / GIB:>9.2f}{note}"

    lines = [
        f"{d['arch']} preset {d['preset']}: {d['parameters'] / 1e6:,.1f}M parameters (vocabulary "
        f"{d['vocab_size']:,})",
        f"{d['precision']}, {d['optimizer']}, ZeRO stage {d['zero_stage']} over {d['gpus']} GPU(s), "
        f"micro-batch {d['micro_batch']} x {d['seq_len']} tokens ({d['max_predictions']} predictions), "
        f"attention {d['attention']}, activation checkpointing {checkpointing}",
        "",
        f"{'memory per GPU':<32}{'GiB':>9}",
    ]
    lines += [row(kind, memory[kind], indent=4) for kind in MODEL_STATES if memory[kind]]
    lines.append(row("model states", d["model_states_bytes"],
                     note=f"   ({d['model_state_bytes_per_parameter']:.2f} bytes/parameter)"))
    lines += [row(kind, memory[kind]) for kind in PERSISTENT if kind not in MODEL_STATES and memory[kind]]
    for phase, kinds in PHASES.items():
        if d["phase_bytes"][phase]:
            lines.append(f"  during {phase}" + ("  (peak)" if phase == d["peak_phase"] else ""))
            lines += [row(kind, memory[kind], indent=4) for kind in kinds if memory[kind]]
    lines += [row("working margin", memory["working margin"]), "  " + "-" * 39, row("total", d["total_bytes"])]
    return "\n".join(lines)
