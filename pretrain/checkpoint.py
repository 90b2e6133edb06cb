"""Checkpoints of a phase, the one place that writes and reads them: DeepSpeed's `save_checkpoint` under
`<phase_dir>/checkpoints/<tag>/`, our own `latest`, the weights alone and the phase's `model_config.json`.

A checkpoint counts once it is complete: every rank has written its files (DeepSpeed's save ends with a barrier),
then rank 0 writes `<tag>/meta.json`, which lists the files, their sizes and sha256, and only then replaces `latest`,
atomically. A crash while saving therefore leaves `latest` on the previous checkpoint; a save that fails (a full
disk) removes its directory and is one error line; DeepSpeed's own `latest` writing is off. The newest `keep`
complete checkpoints are kept; directories of saves that never completed are removed.

Finding the latest checkpoint checks that the files meta.json lists are there with their sizes (a truncated file is
found without loading it); loading one (`load`, `load_weights`) first checks their sha256 (`verify`: flipped bytes,
which would load without complaint), except in checkpoints saved before the checksums were kept; a checkpoint that is
damaged anyway fails to load. Each is one error line naming the file and the previous complete checkpoint, which the
user can make `latest` (docs/errors.md); nothing falls back silently.

The client state holds, for every rank, its data position and its RNG states (python, numpy, torch, CUDA):
DeepSpeed writes the client state only from rank 0, so the training loop gathers all ranks' states into it.
The weights alone (phase 2's start, the export) are read with `load_weights`: with ZeRO the fp32 master weights
are in the optimizer shards and are consolidated with DeepSpeed's zero_to_fp32; otherwise they are the module
state (with DeepSpeed's own bf16/fp16 optimizer and no ZeRO, the 16-bit weights the model trained with, widened).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import pickle
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import atomic_write, read_json, remove_tree, sha256_file, write_json
from pretrain.config import ModelConfig

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"
MODEL_CONFIG = "model_config.json"
MODEL_STATES = "mp_rank_00_model_states.pt"
UNIVERSAL = "universal"  # <tag>/universal/: the checkpoint as DeepSpeed's universal checkpoint, for other rank counts


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


def tag_for(step: int) -> str:
    return f"step{step:08d}"


def latest(phase_dir: Path) -> Checkpoint | None:
    """The phase's latest complete checkpoint, None if it has none; DataError if `latest` names a damaged one."""
    ckpt = checkpoint_dir(phase_dir)
    if not (ckpt / LATEST).is_file():
        return None
    tag = (ckpt / LATEST).read_text(encoding="utf-8").strip()
    damage = _damage(ckpt, tag)
    if damage:
        raise DataError(f"{damage}; {_previous_good(ckpt, tag)}")
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
        rank, world_size = _rank(), _world_size()
        saved = sorted(checkpoint.meta.get("sha256", {}).items())  # none in checkpoints saved before they were kept
        damage = next((f"{checkpoint.path / name}: its sha256 differs from the one saved with the checkpoint "
                       f"(changed on disk since)" for name, digest in saved[rank::world_size]
                       if sha256_file(checkpoint.path / name) != digest), None)
        if world_size > 1:
            found = [None] * world_size
            torch.distributed.all_gather_object(found, damage)
            damage = next((d for d in found if d), None)
    if damage:
        raise DataError(f"{damage}; {_previous_good(ckpt, checkpoint.tag)}")


def _previous_good(ckpt: Path, tag: str) -> str:
    """Names the newest complete checkpoint before `tag`, and how to use it."""
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

        with contextlib.redirect_stdout(io.StringIO()), _unloadable(checkpoint):  # it prints its progress
            state = get_fp32_state_dict_from_zero_checkpoint(str(tag_dir.parent), checkpoint.tag)
    else:
        path = tag_dir / MODEL_STATES
        if not path.is_file():
            raise DataError(f"{tag_dir}: no {MODEL_STATES} (incomplete checkpoint?)")
        with _unloadable(checkpoint):
            # DeepSpeed's checkpoint holds more than tensors (config, client state), hence weights_only=False
            state = torch.load(path, map_location="cpu", weights_only=False)["module"]
    return {name: t.float() for name, t in state.items()}


def save(engine, phase_dir: Path, step: int, meta: dict, client_state: dict, keep: int) -> str:
    """Collective: every rank calls it. Returns the tag. DataError if the files cannot be written."""
    ckpt = checkpoint_dir(phase_dir)
    tag = tag_for(step)
    try:
        engine.save_checkpoint(str(ckpt), tag=tag, client_state=client_state, save_latest=False)
        if engine.global_rank == 0:
            files = [p for p in sorted((ckpt / tag).iterdir()) if p.is_file()]
            write_json(ckpt / tag / META, {**meta, "tag": tag, "step": step,
                                           "files": {p.name: p.stat().st_size for p in files},
                                           "sha256": {p.name: sha256_file(p) for p in files}})
            with atomic_write(ckpt / LATEST) as f:
                f.write(tag)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as a RuntimeError
        shutil.rmtree(ckpt / tag, ignore_errors=True)
        previous = (ckpt / LATEST).read_text(encoding="utf-8").strip() if (ckpt / LATEST).is_file() else None
        raise DataError(f"{ckpt / tag}: saving the checkpoint failed ({_first_line(e)}); "
                            f"{shutil.disk_usage(ckpt).free / 2 ** 30:.1f} GiB free there; the latest checkpoint "
                            f"is still {previous or 'none'}") from None
    if engine.global_rank == 0:
        _prune(ckpt, keep, tag)
    _barrier()
    return tag


def load(engine, checkpoint: Checkpoint, universal: bool = False) -> dict:
    """Loads model, optimizer and LR-scheduler states into `engine`; returns the client state. `universal`: the
    checkpoint was written under ZeRO 1/2 by another number of ranks; it is read as DeepSpeed's universal checkpoint
    (made once, into `<tag>/universal/`), which needs `checkpoint.load_universal` in the engine's config."""
    verify(checkpoint)
    load_dir, tag = checkpoint_dir(checkpoint.phase_dir), checkpoint.tag
    with _unloadable(checkpoint):
        if universal:
            load_dir, tag = make_universal(checkpoint).parent, UNIVERSAL
        path, client_state = engine.load_checkpoint(str(load_dir), tag=tag)
    if path is None:
        raise DataError(f"{checkpoint.path}: DeepSpeed could not load this checkpoint; "
                            f"{_previous_good(checkpoint_dir(checkpoint.phase_dir), checkpoint.tag)}")
    return client_state


def make_universal(checkpoint: Checkpoint) -> Path:
    """DeepSpeed's `ds_to_universal` of the checkpoint (per-tensor fp32 weights and optimizer states, whatever the
    ranks and ZeRO partitions that wrote it) into `<tag>/universal/`: by rank 0, once, into a temporary directory
    renamed into place. Collective: every rank waits for it."""
    out = checkpoint.path / UNIVERSAL
    if _rank() == 0 and not out.is_dir():
        import argparse

        from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal

        partial = checkpoint.path / f"{UNIVERSAL}.partial"
        remove_tree(partial)
        with contextlib.redirect_stdout(sys.stderr):  # its progress report is not our output
            ds_to_universal(argparse.Namespace(input_folder=str(checkpoint.path), output_folder=str(partial),
                                               num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False,
                                               strict=True, inject_missing_state=True))
        partial.rename(out)
    _barrier()
    return out


@contextlib.contextmanager
def _unloadable(checkpoint: Checkpoint):
    """A checkpoint whose files do not load (damaged at their saved size): one line naming it and the previous one."""
    try:
        yield
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as e:
        raise DataError(f"{checkpoint.path}: cannot load this checkpoint ({_first_line(e)}); "
                            f"{_previous_good(checkpoint_dir(checkpoint.phase_dir), checkpoint.tag)}") from None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _prune(ckpt: Path, keep: int, current: str) -> None:
    tags = sorted(d for d in ckpt.iterdir() if d.is_dir())
    complete = [d for d in tags if (d / META).is_file()]
    for d in tags:
        if (d in complete[:-keep] or d not in complete) and d.name != current:
            shutil.rmtree(d, ignore_errors=True)


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _world_size() -> int:
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
