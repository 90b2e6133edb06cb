"""Misspelled keys in a user's DeepSpeed config: DeepSpeed ignores top-level keys it does not know and unknown keys
in its older (non-pydantic) sections, so `gradient_clippping` would silently train without clipping.

DeepSpeed has no strict mode and no list of its keys, so the check asks DeepSpeed's own parser: the config is
parsed by `DeepSpeedConfig` through dicts that record every key looked up. A key nobody looked up is unknown. Its
pydantic sections (zero_optimization, bf16, tensorboard, ...) are handed over whole and reject unknown keys
themselves; their errors are reported under the key's path in the user's file.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, first_line

WHOLE = "*"  # recorded for a section that was iterated over (handed to a validator) rather than looked up key by key
# DeepSpeedConfig checks these against each other; the user's file may not set them (engine.USER_DS_FORBIDDEN)
BATCH_KEYS = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}


class _Recording(dict):
    """A config dict that records the dotted path of every key looked up in it, and WHOLE when iterated over."""

    def __init__(self, data: dict, seen: set[str], prefix: str = ""):
        super().__init__({key: _Recording(value, seen, f"{prefix}{key}.") if isinstance(value, dict) else value
                          for key, value in data.items()})
        self.seen, self.prefix = seen, prefix

    def __getitem__(self, key):
        self.seen.add(f"{self.prefix}{key}")
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.seen.add(f"{self.prefix}{key}")
        return super().get(key, default)

    def __contains__(self, key):
        self.seen.add(f"{self.prefix}{key}")
        return super().__contains__(key)

    def __iter__(self):
        self.seen.add(self.prefix + WHOLE)
        return super().__iter__()

    def keys(self):
        self.seen.add(self.prefix + WHOLE)
        return super().keys()

    def items(self):
        self.seen.add(self.prefix + WHOLE)
        return super().items()


def check_deepspeed_keys(path: Path, user: dict) -> None:
    """ConfigError naming the file and the key for the first key of `user` DeepSpeed does not know or refuses."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # else importing DeepSpeed looks for a GPU
    from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError
    from pydantic import ValidationError

    seen: set[str] = set()
    try:
        DeepSpeedConfig(_Recording({**user, **BATCH_KEYS}, seen))
    except ValidationError as e:
        error = e.errors()[0]
        loc = tuple(str(part) for part in error["loc"])
        key = _find(user, loc, error.get("input")) or ".".join(loc)
        problem = "not a DeepSpeed setting" if error["type"] == "extra_forbidden" else error["msg"]
        raise ConfigError(f"{path}: {key}: {problem}") from None
    except (DeepSpeedConfigError, AssertionError, ValueError, TypeError, KeyError) as e:  # DeepSpeed's own checks
        raise ConfigError(f"{path}: DeepSpeed refuses it: {first_line(e)}") from None
    unknown = _unknown(user, seen)
    if unknown:
        raise ConfigError(f"{path}: {unknown}: not a DeepSpeed setting (DeepSpeed would ignore it)")


def _unknown(section: dict, seen: set[str], prefix: str = "") -> str | None:
    """The first key of `section` DeepSpeed did not look up. At the top level every key counts; in a nested
    section only when DeepSpeed looked its keys up one by one (else a validator took it whole)."""
    checked = not prefix or (prefix + WHOLE not in seen and any(s.startswith(prefix) for s in seen))
    for key, value in section.items():
        if checked and f"{prefix}{key}" not in seen:
            return f"{prefix}{key}"
        if isinstance(value, dict):
            found = _unknown(value, seen, f"{prefix}{key}.")
            if found:
                return found
    return None


def _find(section: dict, loc: tuple[str, ...], value, prefix: str = "") -> str | None:
    """The dotted path in the user's config of the key a pydantic error names relative to its section."""
    for key, item in section.items():
        path = f"{prefix}{key}"
        if path.split(".")[-len(loc):] == list(loc) and (value is None or item == value):
            return path
        if isinstance(item, dict):
            found = _find(item, loc, value, path + ".")
            if found:
                return found
    return None
