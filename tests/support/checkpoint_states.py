"""Bit-for-bit comparison of pretraining checkpoints: what the exact-resume tests assert."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def assert_same(a, b, where: str = "") -> None:
    """Bit-for-bit equality of two checkpoint states (nested dicts, lists, tensors, arrays, RNG states)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__"):  # e.g. DeepSpeed's loss scaler
        assert_same(vars(a), vars(b), where)
    else:
        assert a == b, where


def checkpoint_states(tag_dir: Path) -> dict:
    """The states of a checkpoint's files, without the client's copy of the run config (checkpoint_every may differ
    on purpose)."""
    states = {p.name: torch.load(p, map_location="cpu", weights_only=False) for p in sorted(tag_dir.glob("*.pt"))}
    for state in states.values():
        state.pop("config", None)
    return states
