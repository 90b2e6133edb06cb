"""Executors: where the parallel stages run their independent tasks (dump streams, parts, shards).

A stage calls `ctx.executor.map(fn, tasks)` and gets fn(task) back in task order, so its outputs are the same
whatever the executor and the number of workers. fn must be a module-level function and the tasks plain data
(both pickle), and a task must carry everything fn needs: under Dask, fn runs in a process (maybe on another
machine) that inherited nothing from the one that runs the stage.
- `LocalExecutor` (the default): a process pool on this machine, or the calling process itself with 1 worker.
- `pipeline.dask_executor.DaskExecutor` (`--executor dask`): the workers of a Dask distributed cluster.
"""
from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import signal
from typing import Callable, ClassVar, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")
PR_SET_PDEATHSIG = 1


class Executor(Protocol):
    name: str
    workers: int  # tasks that run at once

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """fn(task) for each task, in task order."""


@dataclasses.dataclass(frozen=True)
class LocalExecutor:
    workers: int = 1
    name: ClassVar[str] = "local"

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            for task in tasks:
                yield fn(task)
            return
        with multiprocessing.get_context("fork").Pool(self.workers, initializer=_worker_signals,
                                                      maxtasksperchild=None) as pool:
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
