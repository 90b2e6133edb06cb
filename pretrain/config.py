"""The settings of one pretraining phase: a `TrainConfig` dataclass filled from the phase's recipe
(`configs/phase1.yaml`, `configs/phase2.yaml`) <- `--config FILE` <- `--set KEY=VALUE` <- flags such as --preset.

Values are type-checked by the pipeline's loader (`wiki2bert_core.config.build_dataclass`), so a mistake is one
ConfigError line naming the file (or flag) and the key, exactly as for stages.yaml.
"""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.config import build_dataclass, coerce, parse_value, read_yaml

RECIPE_DIR = Path(__file__).resolve().parent / "configs"
PHASES = ("phase1", "phase2")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    preset: str = "base"  # model size: tiny, mini, small, base, large, 1.5b, 5b
    model: dict[str, Any] = dataclasses.field(default_factory=dict)  # ModelConfig overrides
    seq_len: int | None = None  # null: the data's sequence length; a number only asserts it
    global_batch: int = 65536  # sequences per optimizer step, all ranks together
    micro_batch: int = 64  # sequences per forward pass on one rank
    # several whole sequences per row of seq_len (first-fit decreasing over each micro-batch's sequences), so
    # little compute goes to padding; micro-batches and global_batch still count sequences, and losses and
    # gradients are those of the unpacked run. Memory follows the rows: a packed run can take a larger micro_batch
    pack_sequences: bool = True
    steps: int = 7038  # optimizer steps of the whole phase (the schedule's length)
    steps_this_run: int | None = None  # stop (checkpoint and exit) after this many steps; re-run to go on
    lr: float = 6e-3
    warmup: float = 0.2843  # fraction of `steps` with linear warmup
    decay_power: float = 0.5  # then lr * (1 - progress) ** decay_power
    optimizer: Literal["lamb", "lans", "adamw"] = "lamb"
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-6
    weight_decay: float = 0.01  # not on biases and LayerNorm weights
    grad_clip: float = 1.0  # global gradient-norm clipping; 0 disables
    # self-attention kernel (attention.py): mask (SDPA over padded rows), nested (real tokens only, nested jagged
    # tensors), flash (real tokens only, flash-attn's varlen kernel); auto: mask on CPU, the fastest on GPU (measured)
    attention: Literal["auto", "mask", "nested", "flash"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: fp32 on CPU, bf16 (else fp16) on GPU
    zero_stage: int | None = None  # null: by model size (0 below 1B parameters, 1 up to 3B, 2 above)
    seed: int = 12345
    loader_workers: int = 2  # DataLoader worker processes per rank
    checkpoint_every: int = 200  # steps
    keep_checkpoints: int = 3
    log_every: int = 10  # steps
    # held-out evaluation (evaluate.py) every this many steps and at the end of the phase; null: steps // 20
    # (~20 evaluations a phase); 0: off
    eval_every: int | None = None
    eval_samples: int = 10000  # the first this many instances of the held-out files (MLPerf's 10,000)
    eval_data: str | None = None  # held-out HDF5 directory; null: the data directory's test/ split (if it has one)
    flops_profiler_step: int | None = None  # DeepSpeed flops profiler at this step -> flops_profile.txt
    torch_profiler_steps: list[int] = dataclasses.field(default_factory=list)  # -> profile/


# A resumed run may change these; any other difference from the run being resumed is refused.
CHANGEABLE_ON_RESUME = ("steps_this_run", "attention", "loader_workers", "checkpoint_every", "keep_checkpoints",
                        "log_every", "eval_every", "eval_samples", "eval_data", "flops_profiler_step",
                        "torch_profiler_steps")


def recipe_path(phase: str) -> Path:
    return RECIPE_DIR / f"{phase}.yaml"


def load_train_config(phase: str, config_file: Path | None = None, overrides: list[str] = (),
                      values: dict[str, Any] | None = None) -> TrainConfig:
    """`overrides` are --set KEY=VALUE strings (KEY may be dotted: model.hidden_dropout_prob=0);
    `values` are set by other flags (e.g. {"preset": "mini"})."""
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    layers: list[tuple[dict, str]] = [(read_yaml(recipe_path(phase)), f"{recipe_path(phase)}: {phase}")]
    if config_file is not None:
        layers.append((read_yaml(config_file), f"{config_file}: {phase}"))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item}: expected KEY=VALUE")
        layers.append((_nest(key.strip().split("."), parse_value(raw)), f"--set {item}: {phase}"))
    if values:
        layers.append((values, f"command line: {phase}"))

    merged: dict[str, tuple[Any, str]] = {}
    for layer, where in layers:
        for key, value in layer.items():
            if key in merged and isinstance(value, dict) and isinstance(merged[key][0], dict):
                value = deep_merge(merged[key][0], value)
            merged[key] = (value, where)
    config = build_dataclass(TrainConfig, merged)
    _check(config, {key: where for key, (_, where) in merged.items()})
    return config


def _check(c: TrainConfig, where: dict[str, str]) -> None:
    from pretrain.model import PRESETS, ModelConfig

    def fail(key: str, problem: str):
        raise ConfigError(f"{where.get(key.split('.')[0], 'defaults')}.{key}: {problem}")

    if c.preset not in PRESETS:
        fail("preset", f"unknown preset {c.preset!r} (known: {', '.join(PRESETS)})")
    if c.seq_len is not None and c.seq_len < 1:
        fail("seq_len", f"must be at least 1 or null (the data's), got {c.seq_len}")
    for key in ("global_batch", "micro_batch", "steps", "checkpoint_every", "keep_checkpoints", "log_every"):
        if getattr(c, key) < 1:
            fail(key, f"must be at least 1, got {getattr(c, key)}")
    if c.eval_every is not None and c.eval_every < 0:
        fail("eval_every", f"must be 0 (off), positive or null, got {c.eval_every}")
    if c.eval_samples < 1:
        fail("eval_samples", f"must be at least 1, got {c.eval_samples}")
    if c.steps_this_run is not None and c.steps_this_run < 1:
        fail("steps_this_run", f"must be at least 1 or null, got {c.steps_this_run}")
    if not 0 <= c.warmup < 1:
        fail("warmup", f"must be a fraction of the steps in [0, 1), got {c.warmup}")
    if not c.lr > 0:
        fail("lr", f"must be positive, got {c.lr}")
    for key in ("decay_power", "weight_decay", "grad_clip", "eps"):
        if getattr(c, key) < 0:
            fail(key, f"must not be negative, got {getattr(c, key)}")
    if len(c.betas) != 2 or not all(0 <= b < 1 for b in c.betas):
        fail("betas", f"expected two numbers in [0, 1), got {c.betas}")
    if c.zero_stage is not None and c.zero_stage not in (0, 1, 2, 3):
        fail("zero_stage", f"must be 0, 1, 2, 3 or null (by model size), got {c.zero_stage}")
    if c.loader_workers < 0:
        fail("loader_workers", f"must not be negative, got {c.loader_workers}")
    hints = typing.get_type_hints(ModelConfig)
    settable = sorted(set(hints) - {"vocab_size"})
    for key, value in c.model.items():
        if key not in settable:
            hint = " (it comes from the vocabulary)" if key == "vocab_size" else f" (known: {', '.join(settable)})"
            fail(f"model.{key}", "not a model setting" + hint)
        c.model[key] = coerce(value, hints[key], f"{where.get('model', 'model')}.model.{key}")


def _nest(keys: list[str], value: Any) -> dict:
    for key in reversed(keys[1:]):
        value = {key: value}
    return {keys[0]: value}


def deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out
