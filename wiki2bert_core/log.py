"""Logging to stderr and <workdir>/<lang>/pipeline.log, and progress bars that respect --quiet: a live bar on a
terminal, a plain line every PLAIN_EVERY_S seconds (and at the end) when stderr is a file or a pipe."""
from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm

LOGGER_NAME = "wiki2bert"
_FORMAT = "%(asctime)s %(levelname)s %(message)s"
PLAIN_EVERY_S = 30.0  # seconds between a bar's lines when stderr is not a terminal


def setup_logging(log_file: Path | None, quiet: bool = False) -> logging.Logger:
    log = logging.getLogger(LOGGER_NAME)
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    log.setLevel(logging.INFO)
    log.propagate = False
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING if quiet else logging.INFO)
    console.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
    log.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = _FileHandler(log_file, encoding="utf-8", errors="backslashreplace")
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        log.addHandler(file_handler)
    return log


class _FileHandler(logging.FileHandler):
    """A log file that stops taking lines when writing fails (full disk) instead of printing a traceback per line;
    the console handler still shows them, and the failure itself reaches the user as its own error."""
    failed = False

    def emit(self, record):
        if not self.failed:
            super().emit(record)

    def handleError(self, record):
        self.failed = True


def progress(total: float | None = None, desc: str = "", unit: str = "it", quiet: bool = False,
             **kwargs) -> tqdm | QuietBar:
    """A tqdm bar on stderr with rate and ETA; under --quiet a QuietBar. unit='B' gives scaled bytes. When stderr
    is not a terminal (a log file, CI), the bar is written as plain lines instead of a carriage-return stream."""
    if quiet:
        return QuietBar()
    from tqdm import tqdm

    if unit == "B":
        kwargs.setdefault("unit_scale", True)
        kwargs.setdefault("unit_divisor", 1024)
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, mininterval=0.5,
                    **kwargs)
    return tqdm(total=total, desc=desc, unit=unit, file=_PlainLines(sys.stderr), ascii=True,
                mininterval=PLAIN_EVERY_S, maxinterval=PLAIN_EVERY_S, **kwargs)


class _PlainLines:
    """The file a bar writes to when stderr is not a terminal: each redraw ("\\r" + text + padding) becomes one
    timestamped line; the bar's own line ends, cursor moves and a repeat of the last line (closing a bar redraws
    it) are dropped."""

    def __init__(self, stream):
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> None:
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).replace("\r", "").strip()
        if text and text != self.last:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            self.last = text

    def flush(self) -> None:
        self.stream.flush()


class QuietBar:
    """The bar under --quiet: takes a bar's calls and shows nothing, without importing tqdm (20 ms of start-up,
    through importlib.metadata)."""

    def __enter__(self) -> QuietBar:
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, *args, **kwargs) -> None:
        pass
