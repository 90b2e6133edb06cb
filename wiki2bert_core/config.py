"""Typed config layering shared by both commands: dataclass defaults <- YAML <- --set, each value type-checked.

`layered` is the one place where layers are merged. Every mistake raises ConfigError with one line that names the
layer (file or flag) and the key. Each setting is described once, by the comment on its dataclass field
(`field_descriptions`); a field declared `changeable()` may differ from the settings of the work it continues.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

from wiki2bert_core.errors import ConfigError


class SettingError(ConfigError):
    """A value that does not fit its (dotted) key, found while a config dataclass is built: by the type checks or by
    the dataclass's own __post_init__. `layered` names the layer that set the key."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


def check_minimum(config, minimum: int, *names: str) -> None:
    """For a config dataclass's __post_init__: SettingError for the first of its fields `names` below `minimum`."""
    for name in names:
        if (value := getattr(config, name)) < minimum:
            raise SettingError(name, f"must not be negative, got {value}" if minimum == 0 else
                               f"must be at least {minimum}, got {value}")


def layered(cls: type, layers: Iterable[tuple[Mapping, str]]):
    """Build config dataclass `cls` from layers of (mapping, where it came from), each over the ones before.

    A key's value replaces the one before it, but mappings are merged key by key, and a dotted key is the nested one
    ({"model.dropout": 0} is {"model": {"dropout": 0}}); a key no layer sets keeps the dataclass default. An error
    reads `<where>.<key>: <problem>`, where being the last layer that set the key (or a mapping above it)."""
    layers = list(layers)
    values: dict = {}
    for layer, _ in layers:
        values = deep_merge(values, _nest_dotted_keys(layer))
    origins = layer_origins(layers)
    try:
        return _build(cls, values)
    except SettingError as e:
        parts = re.split(r"(?=[.\[])", e.key)  # model.x -> model, .x; variants[0].y -> variants, [0], .y
        where = next((origins[k] for k in ("".join(parts[:n]) for n in range(len(parts), 0, -1)) if k in origins),
                     f"{cls.__name__} defaults")
        raise ConfigError(f"{where}.{e.key}: {e.problem}") from None


def layer_origins(layers: Iterable[tuple[Mapping, str]]) -> dict[str, str]:
    """Dotted key -> the last of `layers` (mapping, where it came from) that set it (or a mapping above it)."""
    origins: dict[str, str] = {}
    for layer, where in layers:
        origins.update((key, where) for key in _dotted_keys(_nest_dotted_keys(layer)))
    return origins


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, mappings merged key by key (neither is changed)."""
    out = dict(base)
    for key, value in update.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _nest_dotted_keys(layer: Mapping) -> dict:
    nested: dict = {}
    for key, value in layer.items():
        first, *rest = str(key).split(".")
        for part in reversed(rest):
            value = {part: value}
        nested = deep_merge(nested, {first: value})
    return nested


def _dotted_keys(mapping: dict, prefix: str = "") -> Iterator[str]:
    for key, value in mapping.items():
        yield f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _dotted_keys(value, f"{prefix}{key}.")


def _build(cls: type, values: Mapping, prefix: str = ""):
    """`cls(**values)`, each value checked against its field's type."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise SettingError(f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = coerce(value, hints[key], f"{prefix}{key}")
    try:
        return cls(**kwargs)
    except SettingError as e:  # a nested dataclass's own check names its key from where it sits
        if not prefix:
            raise
        raise SettingError(f"{prefix}{e.key}", e.problem) from None


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check the value of `key` (dotted) against a type annotation; returns the value (ints widened to float,
    lists as given). SettingError if it does not fit."""
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
                return coerce(value, arg, key)
            except SettingError as e:
                errors.append(e)
        raise errors[0] if errors else SettingError(key, "must not be null")
    if origin is typing.Literal:
        if value not in args:
            raise SettingError(key, f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise SettingError(key, f"expected a list, got {_describe(value)}")
        item_type = args[0] if args else Any
        items = [coerce(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise SettingError(key, f"expected a mapping, got {_describe(value)}")
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): coerce(v, value_type, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise SettingError(key, f"expected a mapping, got {_describe(value)}")
        return _build(annotation, value, f"{key}.")
    if annotation is bool:
        if not isinstance(value, bool):
            raise SettingError(key, f"expected true or false, got {_describe(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingError(key, f"expected an integer, got {_describe(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingError(key, f"expected a number, got {_describe(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise SettingError(key, f"expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"{key}: unsupported config type {annotation!r}")


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


def parse_setting(item: str, form: str = "KEY=VALUE") -> tuple[str, Any]:
    """A --set KEY=VALUE string: (KEY, its value as parse_value reads it); ConfigError naming the `form` expected
    if it is not one."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item}: expected {form}")
    return key.strip(), parse_value(raw)


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


def changeable(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose value may differ from the settings of the work it continues, which stays valid: a
    stage's output made with another value is still current (download retries), a resumed run may change it
    (log_every), phase 2 may change it from phase 1's model (dropout)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"changeable": True})


def added_later(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field added after work was made with its class, whose default (`default`, or what
    `default_factory` makes: an empty dict) gives the outputs made before it existed: left out of a stage's config
    hash while it has that default, so that work stays current."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"added_later": True})


def hashed_values(config) -> dict:
    """What of config dataclass `config` decides the work made with it, as config_to_dict gives it: every field but
    those declared `changeable()`, and those declared `added_later()` while they have their default, at any depth
    (in nested dataclasses, and lists of them)."""
    return {f.name: _hashed(getattr(config, f.name)) for f in dataclasses.fields(config)
            if not f.metadata.get("changeable")
            and not (f.metadata.get("added_later") and getattr(config, f.name) == _default(f))}


def _default(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def _hashed(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return hashed_values(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_hashed(v) for v in value)
    if isinstance(value, dict):
        return {k: _hashed(v) for k, v in value.items()}
    return value


def changeable_fields(cls: type) -> tuple[str, ...]:
    """The fields of config dataclass `cls` declared `changeable()`."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("changeable"))


def field_descriptions(cls: type) -> dict[str, str]:
    """Field name -> the comment that documents it in the source of config dataclass `cls` (a comment at the end of
    its line, or comment lines right above it): the one description of each parameter."""
    lines, _ = inspect.getsourcelines(cls)
    descriptions, above = {}, []
    for line in lines[1:]:
        code, _, comment = line.strip().partition("# ")
        field = re.match(r"(\w+)\s*:", code)
        if not code and comment:
            above.append(comment.strip())
        elif field and not code.startswith(("def ", "return ")):
            descriptions[field.group(1)] = " ".join(above + ([comment.strip()] if comment else []))
            above = []
        elif code.startswith("def "):
            break
        else:
            above = []
    return {f.name: descriptions.get(f.name, "") for f in dataclasses.fields(cls)}


def config_lines(cls: type, values: Mapping[str, Any], prefix: str = "", changeable_note: str = "") -> list[str]:
    """What the `config` commands print for the fields of config dataclass `cls`: one line a key,
    `<prefix><key>: <value as JSON>  # <description>`, with `[<changeable_note>]` after the changeable ones. A
    mapping of names to config dataclasses (the filter's rule sets) gives the lines of each, `<key>.<name>.` before."""
    descriptions, marked, hints = field_descriptions(cls), changeable_fields(cls), typing.get_type_hints(cls)
    lines = []
    for key, value in values.items():
        item_cls = nested_dataclass(hints[key])
        if item_cls is not None:
            lines += [line for name, item in value.items()
                      for line in config_lines(item_cls, item, f"{prefix}{key}.{name}.", changeable_note)]
        else:
            lines.append(f"{prefix}{key}: {json.dumps(value, ensure_ascii=False)}  # {descriptions[key]}"
                         + (f" [{changeable_note}]" if key in marked else ""))
    return lines


def nested_dataclass(annotation: Any) -> type | None:
    """The config dataclass of a field typed as a mapping of names to one (dict[str, RuleSet]), else None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1]
    return None
