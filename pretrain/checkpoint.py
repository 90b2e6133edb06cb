"""Checkpoints of a phase: DeepSpeed's `save_checkpoint` under `<phase_dir>/checkpoints/<tag>/`, our own `latest`.

A checkpoint counts once it is complete: every rank has written its files (DeepSpeed's save ends with a barrier),
then rank 0 writes `<tag>/meta.json` and only then replaces `latest`, atomically. A crash while saving therefore
leaves `latest` on the previous checkpoint; DeepSpeed's own `latest` writing is off. The newest `keep` complete
checkpoints are kept; directories of saves that never completed are removed.

(The weights alone, e.g. for phase 2's start or the export, are read by `pretrain.export.load_checkpoint_weights`.)
The client state holds, for every rank, its data position and its RNG states (python, numpy, torch, CUDA):
DeepSpeed writes the client state only from rank 0, so the training loop gathers all ranks' states into it.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from core.errors import ConfigError
from core.fileio import atomic_write, write_json

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"


def checkpoint_dir(phase_dir: Path) -> Path:
    return Path(phase_dir) / CHECKPOINTS


def tag_for(step: int) -> str:
    return f"step{step:08d}"


def latest(phase_dir: Path) -> tuple[str, dict] | None:
    """(tag, meta) of the phase's latest complete checkpoint, None if it has none."""
    ckpt = checkpoint_dir(phase_dir)
    if not (ckpt / LATEST).is_file():
        return None
    tag = (ckpt / LATEST).read_text(encoding="utf-8").strip()
    try:
        meta = json.loads((ckpt / tag / META).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        raise ConfigError(f"{ckpt / LATEST}: names checkpoint {tag!r}, whose {META} is missing or unreadable") \
            from None
    return tag, meta


def save(engine, phase_dir: Path, step: int, meta: dict, client_state: dict, keep: int) -> str:
    """Collective: every rank calls it. Returns the tag."""
    ckpt = checkpoint_dir(phase_dir)
    tag = tag_for(step)
    engine.save_checkpoint(str(ckpt), tag=tag, client_state=client_state, save_latest=False)
    if engine.global_rank == 0:
        write_json(ckpt / tag / META, {**meta, "tag": tag, "step": step})
        with atomic_write(ckpt / LATEST) as f:
            f.write(tag)
        _prune(ckpt, keep, tag)
    _barrier()
    return tag


def load(engine, phase_dir: Path, tag: str) -> dict:
    """Loads model, optimizer and LR-scheduler states into `engine`; returns the client state."""
    path, client_state = engine.load_checkpoint(str(checkpoint_dir(phase_dir)), tag=tag)
    if path is None:
        raise ConfigError(f"{checkpoint_dir(phase_dir) / tag}: DeepSpeed could not load this checkpoint")
    return client_state


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


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
