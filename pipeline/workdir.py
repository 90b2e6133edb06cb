"""One run per work directory (an OS lock a killed process releases), and stop signals that never end in exit 0."""
from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Iterator

from wiki2bert_core.dir_lock import lock_directory
from wiki2bert_core.errors import ConfigError, DataError

_received: list[int] = []  # stop signals received while exit_nonzero_after_signal() was active


def lock_work_dir(lang_dir: Path) -> None:
    """Take <workdir>/<lang>/.lock for this process, or fail at once naming the process that holds it."""
    for parent in (lang_dir.parent, lang_dir):
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"--workdir: {parent} is a file, not a directory")
    try:
        holder = lock_directory(lang_dir)
    except OSError as e:
        raise DataError(f"{lang_dir}: cannot write to the work directory ({e.strerror})") from None
    if holder is not None:
        raise DataError(f"{lang_dir}: another pipeline run (pid {holder}) is using this work directory; "
                        "wait for it to finish or use another --workdir")


@contextlib.contextmanager
def exit_nonzero_after_signal() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (so every stage cleans up as on Ctrl-C), and once one arrived the
    process exits 128 + its number even if some library swallowed the exception (one raised inside a destructor
    is only printed, and the run used to finish with exit 0)."""
    received = _received

    def handle(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except SystemExit as e:
        if received and e.code in (None, 0, 1, 130):  # 1: click's "Aborted!"; 130: run_cli's Ctrl-C
            _interrupted(received[0])
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        _interrupted(received[0])


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a stop signal arrived, even one some library swallowed: called before a stage is
    marked done, so an interrupted stage never is."""
    if _received:
        raise KeyboardInterrupt


def _interrupted(signum: int) -> None:
    print("interrupted; re-run the same command to continue", file=sys.stderr)
    sys.exit(128 + signum)
