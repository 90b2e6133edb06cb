"""Typed config layering shared by both commands: dataclass defaults <- YAML <- --set, each value type-checked.

Every mistake raises ConfigError with one line that names the file (or flag) and the key.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from wiki2bert_core.errors import ConfigError


def build_dataclass(cls: type, values: dict[str, tuple[Any, str]]):
    """Build `cls` from {field: (value, where-it-came-from)}, type-checking each value."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, (value, where) in values.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = coerce(value, hints[key], f"{where}.{key}")
    return cls(**kwargs)


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check `value` against a type annotation; returns the value (ints widened to float, lists as given)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: must not be null")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_describe(value)}")
        item_type = args[0] if args else Any
        items = [coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_describe(value)}")
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): coerce(v, value_type, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_describe(value)}")
        return build_dataclass(annotation, {k: (v, where) for k, v in value.items()})
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {_describe(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_describe(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {_describe(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"{where}: unsupported config type {annotation!r}")


def config_to_dict(config) -> dict:
    return dataclasses.asdict(config)


def _describe(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def read_yaml(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def require_mapping(value: Any, path: Path, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where}: expected a mapping, got {_describe(value)}")
    return value


def check_keys(data: dict, allowed: set[str], path: Path, where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{path}: {where}{key}: unknown key (known: {', '.join(sorted(allowed))})")


def parse_value(raw: str) -> Any:
    """A --set value as YAML (numbers, booleans, lists), else the plain string."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    return value
