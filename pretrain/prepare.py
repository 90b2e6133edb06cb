"""Run preparation: every check a pretraining phase needs (config, vocabulary, data, the checkpoint to resume or
start from) before anything is written or DeepSpeed is imported, gathered into a `Run`."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from wiki2bert_core.config import changeable_fields, config_to_dict
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import read_json
from wiki2bert_core.wordpiece import read_vocab
from pretrain import checkpoint
from pretrain.attention import available_kernels
from pretrain.checkpoint import Checkpoint
from pretrain.config import ModelConfig, TrainConfig, model_config
from pretrain.data import DataDirectory, open_data
from pretrain.deepspeed_settings import choose_precision, read_user_ds_config
from pretrain.masking import DynamicMasking, MaskingVocab, default_max_predictions, predictions_needed
from wiki2bert_core.variant_dir import find_vocab_file, held_out_files, held_out_split, training_files


@dataclasses.dataclass(frozen=True)
class InitFrom:
    """Phase 2's start: the phase-1 checkpoint whose weights it loads (recorded in hparams.json as `init`)."""
    phase_dir: Path
    tag: str
    step: int

    def to_dict(self) -> dict:
        return {"phase_dir": str(self.phase_dir), "tag": self.tag, "step": self.step}

    @classmethod
    def from_dict(cls, d: dict) -> InitFrom:
        return cls(Path(d["phase_dir"]), d["tag"], int(d["step"]))

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.phase_dir, self.tag, {"step": self.step})


@dataclasses.dataclass(frozen=True)
class Run:
    phase: str
    phase_dir: Path
    config: TrainConfig
    model: ModelConfig
    data: DataDirectory  # its seq_len is the run's (the data's; config.seq_len, when set, only asserts it)
    vocab_dir: Path
    vocab_size: int  # tokens in vocab.txt (the model's vocabulary is this padded to a multiple of 8)
    init: InitFrom | None  # phase 2: the phase-1 checkpoint it started from
    resume: Checkpoint | None  # this phase's own latest checkpoint
    world_size: int
    grad_accumulation: int
    precision: str  # fp32 | bf16 | fp16
    user_ds_config: dict
    eval_files: list[Path] = dataclasses.field(default_factory=list)  # held-out files; [] = no evaluation
    eval_every: int = 0  # steps between evaluations (0: none)
    masking: DynamicMasking | None = None  # None: the files' masks (masking static)

    @property
    def complete(self) -> bool:
        return self.resume is not None and self.resume.step >= self.config.steps


def prepare(phase: str, data_dir: Path, out_dir: Path, config: TrainConfig, vocab_dir: Path | None = None,
            init_dir: Path | None = None, deepspeed_config: Path | None = None,
            preset_flag: str | None = None) -> Run:
    """Every check that can fail before training; ConfigError (exit 2) with one line on the first problem."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = config.micro_batch * world_size
    if config.global_batch % per_step:
        raise ConfigError(f"global_batch {config.global_batch} is not a multiple of micro_batch {config.micro_batch}"
                          f" x {world_size} rank(s) = {per_step}; change global_batch or micro_batch")
    phase_dir = Path(out_dir) / phase
    training_files(data_dir)  # a wrong --data is reported as such, before the vocabulary is looked for
    vocab_dir = find_vocab_file(data_dir, vocab_dir).parent
    vocab = read_vocab(vocab_dir / "vocab.txt")

    resume = checkpoint.latest(phase_dir)
    if resume is not None and not (phase_dir / "hparams.json").is_file():
        raise DataError(f"{phase_dir / 'hparams.json'}: missing, so the checkpoint's settings are unknown")
    init = None
    if phase == "phase2":
        init = (InitFrom.from_dict(read_json(phase_dir / "hparams.json")["init"]) if resume
                else _find_init(Path(init_dir) if init_dir else Path(out_dir) / "phase1"))
        model, config = _continued_model(phase_dir if resume else init.phase_dir, config, preset_flag)
    else:
        try:
            model = model_config(config.preset, len(vocab), **config.model)
        except ValueError as e:
            raise ConfigError(f"model: {e}") from None
    if resume:
        _check_resumable(resume, read_json(phase_dir / "hparams.json"), config)
    if resume or init:
        _check_same_vocab(vocab_dir / "vocab.txt", (phase_dir if resume else init.phase_dir) / "tokenizer" /
                          "vocab.txt", "the vocabulary the model was trained with")
    if len(vocab) > model.vocab_size:
        raise ConfigError(f"{vocab_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's vocabulary "
                          f"({model.vocab_size})")
    if config.attention == "flash" and "flash" not in available_kernels(torch.device("cuda" if torch.cuda.is_available()
                                                                                          else "cpu")):
        raise ConfigError("attention flash: needs a CUDA GPU and the flash-attn package; use auto, mask or nested")
    data = open_data(data_dir, config.seq_len, len(vocab), world_size)
    data.check_positions(model.max_position_embeddings)
    user_ds = read_user_ds_config(deepspeed_config)
    stage = user_ds.get("zero_optimization", {}).get("stage", config.zero_stage)
    if stage == 3 and config.optimizer in ("lamb", "lans"):
        raise ConfigError(f"zero_stage 3: {config.optimizer} needs whole tensors for its trust ratios and ZeRO-3 "
                          f"does not give them; use zero_stage 1 or 2 (same per-tensor ratios) or adamw")
    masking = _dynamic_masking(config, vocab, data.seq_len) if config.masking == "dynamic" else None
    eval_files = _held_out_files(config, data_dir)
    return Run(phase=phase, phase_dir=phase_dir, config=config, model=model, data=data, vocab_dir=vocab_dir,
               vocab_size=len(vocab), init=init, resume=resume, world_size=world_size,
               grad_accumulation=config.global_batch // per_step, precision=choose_precision(config.precision),
               user_ds_config=user_ds, eval_files=eval_files,
               eval_every=config.eval_every if config.eval_every is not None else max(1, config.steps // 20),
               masking=masking)


def _dynamic_masking(config: TrainConfig, vocab: dict[str, int], seq_len: int) -> DynamicMasking:
    """ConfigError if max_predictions is below what mask_rate needs in a sequence of the data's length."""
    needed = int(predictions_needed(config.mask_rate, seq_len))
    if config.max_predictions is not None and config.max_predictions < needed:
        raise ConfigError(f"max_predictions {config.max_predictions}: mask_rate {config.mask_rate} needs {needed} "
                          f"in a sequence of {seq_len} tokens; raise it or leave it null (ceil(mask_rate * seq_len))")
    cap = (config.max_predictions if config.max_predictions is not None
           else default_max_predictions(config.mask_rate, seq_len))
    return DynamicMasking(MaskingVocab.from_vocab(vocab), config.mask_rate, cap, config.whole_word_masking,
                          config.seed)


def _held_out_files(config: TrainConfig, data_dir: Path) -> list[Path]:
    """The files evaluate.py reads: `eval_data`'s (which must have some), else the data directory's test split;
    none when evaluation is off or the data has no test split."""
    if config.eval_every == 0:
        return []
    if config.eval_data is not None:
        return held_out_files(Path(config.eval_data))
    return held_out_split(data_dir)


def _check_resumable(resume: Checkpoint, hparams: dict, config: TrainConfig) -> None:
    before, now = hparams["config"], config_to_dict(config)
    changeable = changeable_fields(TrainConfig)
    for key, value in now.items():
        if key not in changeable and before.get(key) != value:
            raise ConfigError(f"{resume.phase_dir}: resuming a run started with {key}={before.get(key)!r}, now "
                              f"{value!r}; keep the run's settings or use another --out")


def _find_init(init_dir: Path) -> InitFrom:
    found = checkpoint.require_latest(init_dir, "to start phase 2 from; pass --init PHASE1_DIR")
    checkpoint.read_model_config(init_dir)
    return InitFrom(init_dir.resolve(), found.tag, found.step)


def _continued_model(source_dir: Path, config: TrainConfig, preset_flag: str | None
                     ) -> tuple[ModelConfig, TrainConfig]:
    """Phase 2's model: that of the phase-1 run it starts from (or of its own run, when resuming), where only
    training-time settings (the changeable ModelConfig fields) may change."""
    saved = dataclasses.asdict(checkpoint.read_model_config(source_dir))
    hparams = read_json(source_dir / "hparams.json") if (source_dir / "hparams.json").is_file() else {}
    preset = hparams.get("config", {}).get("preset", config.preset)
    if preset_flag is not None and preset_flag != preset:
        raise ConfigError(f"--preset {preset_flag}: phase 2 continues the {preset} model of {source_dir}")
    training_only = changeable_fields(ModelConfig)
    changed = [k for k in config.model if k not in training_only and config.model[k] != saved.get(k)]
    if changed:
        raise ConfigError(f"model.{changed[0]}: phase 2 cannot change the shape of the model in {source_dir} "
                          f"(only {', '.join(training_only)})")
    try:
        model = ModelConfig(**{**saved, **config.model})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None
    return model, dataclasses.replace(config, preset=preset)


def _check_same_vocab(vocab: Path, reference: Path, what: str) -> None:
    if reference.is_file() and reference.read_bytes() != vocab.read_bytes():
        raise ConfigError(f"{vocab}: differs from {what} ({reference})")
