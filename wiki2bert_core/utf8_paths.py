"""Paths must be UTF-8: logs, manifests, reports and run files name them as text, so a path holding other bytes (on
Linux a str with surrogate escapes, b'caf\\xe9' -> 'caf\\udce9') is refused before any work, in one line, rather than
failing halfway through a run: on the command lines naming its flag (ConfigError), in a directory the user named
naming the file (DataError: the data is renamed, not the command changed)."""
import os
from pathlib import Path

import typer

from wiki2bert_core.errors import ConfigError, DataError, shown


def utf8_path(param: typer.CallbackParam, value):
    """typer callback of every path option and argument: the value unchanged, or ConfigError when the path, resolved
    as the commands store it (a relative one in the current directory, a link to where it leads), is not UTF-8.
    URLs are taken as given."""
    for item in _items(value):
        text = str(item)
        _check(param, text if "://" in text else os.path.realpath(text))
    return value


def utf8_text(param: typer.CallbackParam, value):
    """typer callback of the text options that may end up in paths or manifests (--lang, --set)."""
    for item in _items(value):
        _check(param, str(item))
    return value


def utf8_names(paths: list[Path]) -> list[Path]:
    """The files found in a directory the user named, unchanged; DataError naming the first whose name is not
    UTF-8."""
    for path in paths:
        if not _is_utf8(str(path)):
            raise DataError(f"{shown(str(path))}: the file name is not UTF-8 (the logs, manifests and run files name "
                            "it as text); rename it")
    return paths


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _items(value) -> list:
    return [v for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]


def _check(param: typer.CallbackParam, text: str) -> None:
    if not _is_utf8(text):
        name = max(param.opts, key=len) if param.param_type_name == "option" else param.name.upper()
        raise ConfigError(f"{name}: {shown(text)}: not UTF-8 (the logs, manifests and run files name it as text); "
                          "rename it, or give a path whose names are UTF-8")
