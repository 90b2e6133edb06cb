"""The two kinds of user-facing error and the exit codes the command lines give them (policy: docs/errors.md)."""
from __future__ import annotations

import sys
from typing import Callable


class DataError(Exception):
    """Bad or damaged data, or a failed step (exit 1), in either half; str(e) is one line naming the file and the
    problem."""


class ConfigError(Exception):
    """A usage or configuration mistake (exit 2): a config file, a flag, a setting that does not fit, a path that
    names nothing usable; the message is one line naming file and key."""


def first_line(error: BaseException) -> str:
    """An exception in one line, to quote in a one-line message: its type and the first line of what it says (a
    library's message may run over many lines)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def not_utf8(path, lines: bytes, error: UnicodeDecodeError, first_line: int = 1) -> DataError:
    """The error of `lines` of file `path` (whole lines, the first of them line `first_line`) that do not decode as
    UTF-8: it names the line and the byte of that line where `error` found the bad bytes."""
    line = first_line + lines.count(b"\n", 0, error.start)
    byte = error.start - (lines.rfind(b"\n", 0, error.start) + 1)
    return DataError(f"{path}: line {line}: not UTF-8 (byte {byte} of the line)")


def shown(text: str) -> str:
    """Text as it can be printed: the bytes of a file name that are not UTF-8 (surrogate escapes) as \\xNN."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def run_cli(app: Callable[[], object], interrupted: str) -> None:
    """Run a typer app: one `error:` line and exit 2 for config mistakes, 1 for bad input or a failing
    environment (OSError), 130 on Ctrl-C."""
    try:
        app()
    except ConfigError as e:
        print(f"error: {shown(str(e))}", file=sys.stderr)
        sys.exit(2)
    except DataError as e:
        print(f"error: {shown(str(e))}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        sys.exit(130)
    except OSError as e:  # the environment failed (disk full, read-only, missing directory): no traceback
        print(f"error: {shown(str(e.filename or 'input/output'))}: {shown(str(e.strerror or e))}", file=sys.stderr)
        sys.exit(1)
