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


def imap_ordered(fn: Callable[[T], R], tasks: Iterable[T], workers: int,
                 initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> Iterator[R]:
    """Yield fn(task) for each task, in order; with workers > 1 in a process pool (fn must be picklable).
    initializer(*initargs) runs once in every process that runs fn (this one when workers <= 1), to load what fn
    needs there instead of relying on what a forked worker inherits."""
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        for task in tasks:
            yield fn(task)
        return
    with multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker, initargs=(initializer, initargs),
                                                  maxtasksperchild=None) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)


def _start_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    _worker_signals()
    if initializer is not None:
        initializer(*initargs)


def _worker_signals() -> None:
    """Ctrl-C is the main process's to handle (it stops the pool: SIGTERM, which ends a worker at once), and a
    worker dies with the main process even when that one is killed with SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        pass
