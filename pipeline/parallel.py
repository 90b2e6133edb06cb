"""Executors: where the parallel stages run their independent tasks (dump streams, parts, shards).

A stage calls `ctx.executor.map(fn, tasks)` and gets fn(task) back in task order, so its outputs are the same
whatever the executor and the number of workers. fn must be a module-level function and the tasks plain data
(both pickle), and a task must carry everything fn needs: under Dask, fn runs in a process (maybe on another
machine) that inherited nothing from the one that runs the stage.
- `LocalExecutor` (the default): a process pool on this machine, or the calling process itself with 1 worker.
- `pipeline.dask_executor.DaskExecutor` (`--executor dask`): the workers of a Dask distributed cluster.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
from typing import Callable, ClassVar, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


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
        with multiprocessing.get_context("fork").Pool(self.workers, maxtasksperchild=None) as pool:
            yield from pool.imap(fn, tasks, chunksize=1)
