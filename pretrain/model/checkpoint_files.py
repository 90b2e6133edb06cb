"""A phase's checkpoints as files, read: what makes one complete, finding the latest, checking it, the weights alone,
and the phase's `model_config.json`. What reads a phase directory (model_dir.py: `eval`, `--init`, `export`,
`finetune`; the loop when it resumes) reads it here, without the training loop; writing checkpoints is the loop's
(pretrain/run/checkpoint.py).

    <phase_dir>/model_config.json       our ModelConfig
    <phase_dir>/checkpoints/latest      the tag of the newest complete checkpoint, replaced atomically
    <phase_dir>/checkpoints/<tag>/      DeepSpeed's files of one checkpoint (`save_checkpoint`) and our meta.json,
                                        written last: the files with their sizes and sha256, the step, the world size

Finding the latest checkpoint checks that the files meta.json lists are there with their sizes (a truncated file is
found without loading it); loading one (`load_weights`, and the loop's resume) first checks their sha256 (`verify`:
flipped bytes, which would load without complaint), except in checkpoints saved before the checksums were kept; a
checkpoint that is damaged anyway fails to load. Each is one error line naming the file and the previous complete
checkpoint, which the user can make `latest` (docs/errors.md); nothing falls back silently.

The weights alone (phase 2's start, the export) are read with `load_weights`: with ZeRO the fp32 master weights are in
the optimizer shards and are consolidated with DeepSpeed's zero_to_fp32; otherwise they are the module state (with
DeepSpeed's own bf16/fp16 optimizer and no ZeRO, the 16-bit weights the model trained with, widened).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import pickle
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, DataError, first_line
from wiki2bert_core.files import read_json, sha256_file, write_json
from pretrain.config import ModelConfig

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"
MODEL_CONFIG = "model_config.json"
MODEL_STATES = "mp_rank_00_model_states.pt"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: `<phase_dir>/checkpoints/<tag>/` and its meta.json (step, world_size, ...)."""
    phase_dir: Path
    tag: str
    meta: dict

    @property
    def path(self) -> Path:
        return checkpoint_dir(self.phase_dir) / self.tag

    @property
    def step(self) -> int:
        return self.meta["step"]


def checkpoint_dir(phase_dir: Path) -> Path:
    return Path(phase_dir) / CHECKPOINTS


def latest(phase_dir: Path) -> Checkpoint | None:
    """The phase's latest complete checkpoint, None if it has none; DataError if `latest` names a damaged one."""
    ckpt = checkpoint_dir(phase_dir)
    if not (ckpt / LATEST).is_file():
        return None
    tag = (ckpt / LATEST).read_text(encoding="utf-8").strip()
    damage = _damage(ckpt, tag)
    if damage:
        raise DataError(f"{damage}; {previous_good(ckpt, tag)}")
    return Checkpoint(Path(phase_dir), tag, read_json(ckpt / tag / META))


def _damage(ckpt: Path, tag: str) -> str | None:
    """What is wrong with checkpoint `tag`, as far as can be seen without loading it ("<path>: <problem>")."""
    if not tag or not (ckpt / tag).is_dir():
        return f"{ckpt / LATEST}: names checkpoint {tag!r}, which does not exist"
    meta = read_json(ckpt / tag / META, default=None)
    if not isinstance(meta, dict):
        return f"{ckpt / tag / META}: missing or unreadable, so checkpoint {tag} is incomplete"
    for name, size in meta.get("files", {}).items():  # checkpoints written before the list was kept have none
        path = ckpt / tag / name
        if not path.is_file():
            return f"{path}: missing from checkpoint {tag}"
        if path.stat().st_size != size:
            return f"{path}: {path.stat().st_size} bytes, but {size} were saved (truncated or overwritten)"
    return None


def verify(checkpoint: Checkpoint) -> None:
    """DataError naming the file and the previous complete checkpoint if a file is missing, or its size or sha256
    differs from those meta.json holds. Collective when torch.distributed is initialized: each rank hashes its share
    of the files."""
    ckpt = checkpoint_dir(checkpoint.phase_dir)
    damage = _damage(ckpt, checkpoint.tag)
    if damage is None:
        distributed = torch.distributed.is_initialized()
        rank = torch.distributed.get_rank() if distributed else 0
        world_size = torch.distributed.get_world_size() if distributed else 1
        saved = sorted(checkpoint.meta.get("sha256", {}).items())  # none in checkpoints saved before they were kept
        damage = next((f"{checkpoint.path / name}: its sha256 differs from the one saved with the checkpoint "
                       f"(changed on disk since)" for name, digest in saved[rank::world_size]
                       if sha256_file(checkpoint.path / name) != digest), None)
        if world_size > 1:
            found = [None] * world_size
            torch.distributed.all_gather_object(found, damage)
            damage = next((d for d in found if d), None)
    if damage:
        raise DataError(f"{damage}; {previous_good(ckpt, checkpoint.tag)}")


def previous_good(ckpt: Path, tag: str) -> str:
    """Names the newest complete checkpoint in `ckpt` (a phase's checkpoints/) before `tag`, and how to use it."""
    for earlier in sorted((d.name for d in ckpt.iterdir() if d.is_dir() and d.name < tag), reverse=True):
        if _damage(ckpt, earlier) is None:
            return (f"the previous complete checkpoint is {ckpt / earlier}: to go on from it, write "
                    f"'{earlier}' into {ckpt / LATEST}")
    return "no earlier complete checkpoint is left"


def by_tag(phase_dir: Path, tag: str) -> Checkpoint:
    """The complete checkpoint `tag` of the phase; ConfigError if there is none of that name."""
    meta = read_json(checkpoint_dir(phase_dir) / tag / META, default=None)
    if not isinstance(meta, dict):
        known = sorted(d.name for d in checkpoint_dir(phase_dir).glob("step*") if (d / META).is_file())
        raise ConfigError(f"{checkpoint_dir(phase_dir) / tag}: no complete checkpoint of that tag "
                          f"(complete: {', '.join(known) or 'none'})")
    return Checkpoint(Path(phase_dir), tag, meta)


def require_latest(phase_dir: Path, purpose: str) -> Checkpoint:
    """The latest checkpoint; ConfigError (the user named a directory without one) if there is none."""
    found = latest(phase_dir) if Path(phase_dir).is_dir() else None
    if found is None:
        raise ConfigError(f"{phase_dir}: no checkpoint {purpose} ({checkpoint_dir(phase_dir) / LATEST} not found)")
    return found


def read_model_config(phase_dir: Path) -> ModelConfig:
    """The phase's model_config.json: ConfigError if missing (not a phase directory), DataError if damaged."""
    path = Path(phase_dir) / MODEL_CONFIG
    if not path.is_file():
        raise ConfigError(f"{path}: not found (is {phase_dir} a pretraining phase directory?)")
    fields = read_json(path)
    try:
        return ModelConfig(**fields)
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: not a model config ({e})") from None


def write_model_config(phase_dir: Path, config: ModelConfig) -> None:
    write_json(Path(phase_dir) / MODEL_CONFIG, dataclasses.asdict(config))


def load_weights(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """The checkpoint's model state dict, in fp32."""
    verify(checkpoint)
    tag_dir = checkpoint.path
    if any(tag_dir.glob("zero_pp_rank_*_optim_states.pt")):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        with contextlib.redirect_stdout(io.StringIO()), unloadable(checkpoint):  # it prints its progress
            state = get_fp32_state_dict_from_zero_checkpoint(str(tag_dir.parent), checkpoint.tag)
    else:
        path = tag_dir / MODEL_STATES
        if not path.is_file():
            raise DataError(f"{tag_dir}: no {MODEL_STATES} (incomplete checkpoint?)")
        with unloadable(checkpoint):
            # DeepSpeed's checkpoint holds more than tensors (config, client state), hence weights_only=False
            state = torch.load(path, map_location="cpu", weights_only=False)["module"]
    return {name: t.float() for name, t in state.items()}


@contextlib.contextmanager
def unloadable(checkpoint: Checkpoint):
    """A checkpoint whose files do not load (damaged at their saved size): one line naming it and the previous one."""
    try:
        yield
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as e:
        raise DataError(f"{checkpoint.path}: cannot load this checkpoint ({first_line(e)}); "
                        f"{previous_good(checkpoint_dir(checkpoint.phase_dir), checkpoint.tag)}") from None
