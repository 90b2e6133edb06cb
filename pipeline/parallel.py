"""Ordered parallel map over independent tasks (parts, shards, stream ranges).

Results come back in task order, so outputs are identical whatever the number of workers.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import signal
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")
PR_SET_PDEATHSIG = 1


def imap_ordered(fn: Callable[[T], R], tasks: Iterable[T], workers: int) -> Iterator[R]:
    """Yield fn(task) for each task, in order; with workers > 1 in a process pool (fn must be picklable)."""
    if workers <= 1:
        for task in tasks:
            yield fn(task)
        return
    with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_signals, maxtasksperchild=None) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)


def _worker_signals() -> None:
    """Ctrl-C is the main process's to handle (it stops the pool: SIGTERM, which ends a worker at once), and a
    worker dies with the main process even when that one is killed with SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        pass
