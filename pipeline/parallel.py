"""Ordered parallel map over independent tasks (parts, shards, stream ranges).

Results come back in task order, so outputs are identical whatever the number of workers.
"""
from __future__ import annotations

import multiprocessing
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def imap_ordered(fn: Callable[[T], R], tasks: Iterable[T], workers: int) -> Iterator[R]:
    """Yield fn(task) for each task, in order; with workers > 1 in a process pool (fn must be picklable)."""
    if workers <= 1:
        for task in tasks:
            yield fn(task)
        return
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=None) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)
