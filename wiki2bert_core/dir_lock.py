"""One process at a time in a directory: an OS lock (fcntl.flock) on <directory>/.lock, which the OS releases when
the holding process ends, also by SIGKILL (its forked children do not keep it); the holder writes its pid and host
there for the message of a refused second process. Used by the pipeline for a work directory and by pretraining for a
phase directory."""
from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".lock"
_held: list = []  # the open lock files: closing one (or the process ending) releases its lock


def _close_in_child() -> None:
    """A forked child (a DataLoader or pool worker) closes its copies: the lock is then its parent's alone, and is
    free when the parent dies, also while a child lives on (flock belongs to every copy of the descriptor)."""
    for f in _held:
        f.close()
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def lock_directory(directory: Path) -> str | None:
    """Take <directory>/.lock for the rest of this process, making the directory if needed. None when taken; else
    the holder as it wrote itself into the file ("N on HOST": its pid and host; "?" if unknown). OSError if the
    directory or the file cannot be written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    f = open(directory / LOCK_NAME, "a+", encoding="utf-8")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        return holder
    except OSError:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    _held.append(f)
    return None
