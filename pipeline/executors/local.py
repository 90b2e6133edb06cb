"""Executors: where the parallel stages run their independent tasks (dump streams, parts, shards).

A stage calls `ctx.executor.map(fn, tasks)` and gets fn(task) back in task order, so its outputs are the same
whatever the executor and the number of workers. fn must be a module-level function and the tasks plain data
(both pickle), and a task must carry everything fn needs: under Dask, fn runs in a process (maybe on another
machine) that inherited nothing from the one that runs the stage.
- `LocalExecutor` (the default): worker processes on this machine, or the calling process itself with 1 worker.
- `pipeline.executors.dask_cluster.DaskExecutor` (`--executor dask`): the workers of a Dask distributed cluster.
"""
from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import time
from typing import Callable, ClassVar, Iterable, Iterator, Protocol, TypeVar

from wiki2bert_core.child_processes import die_with_parent
from wiki2bert_core.errors import DataError

T = TypeVar("T")
R = TypeVar("R")
STOP_GRACE_S = 5.0  # how long stopped workers get to remove their half-written files before SIGKILL
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Executor(Protocol):
    name: str
    workers: int  # tasks that run at once

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """fn(task) for each task, in task order."""


@dataclasses.dataclass(frozen=True)
class LocalExecutor:
    """Forked worker processes, each with its own pipe: no lock is shared between processes, so a worker killed at
    any moment (a signal to the whole process group, the OOM killer) cannot hang the others or the main process,
    as multiprocessing.Pool's shared queues can. A worker that dies is an error; on any exception (Ctrl-C
    included) the workers are stopped at once."""
    workers: int = 1
    name: ClassVar[str] = "local"

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            for task in tasks:
                yield fn(task)
            return
        context = multiprocessing.get_context("fork")
        pipes, processes = [], []
        try:
            _start_workers(context, fn, pipes, processes, self.workers)
            yield from _ordered_results(enumerate(tasks), pipes, processes, window=4 * self.workers)
        finally:  # SIGTERM first: a worker's half-written files go on its way out (atomic_write), then SIGKILL
            for process in processes:
                process.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
                if process.exitcode is None:
                    process.kill()
                    process.join()


def _start_workers(context, fn: Callable, pipes: list, processes: list, count: int) -> None:
    """Fork `count` workers serving fn, appending their pipes and processes."""
    # the workers' collector leaves the objects they inherit alone: its full passes wrote to every one of them,
    # copying the main process's pages into each worker (the shard stage's workers: 7 MiB of their own at 100 MB,
    # 20 at 1 GB, over 10x the tasks; docs/performance.md#rehearsal). A caller that froze objects itself (a test
    # process, a training run) keeps its own freeze: unfreezing would take that back too
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    try:
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(fn, theirs), daemon=True)
            # a stop signal waits until the worker has its own handlers: a worker stopped before (a map of a few
            # tasks stops its workers at once; a new process may not have run yet) ran the main process's, and
            # went on as the main process in its copy of the stack, removing the stage's partial output
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                process.start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            theirs.close()
            pipes.append(mine)
            processes.append(process)
    finally:
        if ours:
            gc.unfreeze()


def _ordered_results(tasks: Iterator[tuple[int, T]], pipes: list, processes: list, window: int) -> Iterator[R]:
    """Hand each idle worker the next task (at most `window` ahead of the next result due) and yield the results in
    task order."""
    idle, busy = list(pipes), {}  # busy: pipe -> task number
    done: dict[int, R] = {}  # results that came back before an earlier one
    next_out, sent, exhausted = 0, 0, False
    while True:
        while idle and not exhausted and sent < next_out + window:
            item = next(tasks, None)
            if item is None:
                exhausted = True
                break
            pipe = idle.pop()
            pipe.send(item[1])
            busy[pipe] = item[0]
            sent += 1
        if not busy:
            return
        for pipe in multiprocessing.connection.wait(list(busy)):
            try:
                ok, value = pipe.recv()
            except EOFError:
                process = processes[pipes.index(pipe)]
                process.join()
                raise DataError(f"a worker process died (exit code {process.exitcode}) while running task "
                                    f"{busy[pipe]}: killed for lack of memory?") from None
            if not ok:
                raise value
            done[busy.pop(pipe)] = value
            idle.append(pipe)
        while next_out in done:
            yield done.pop(next_out)
            next_out += 1


def _serve(fn: Callable[[T], R], pipe) -> None:
    """A worker: fn(task) for each task that comes down the pipe, the result (or the exception) sent back."""
    _worker_signals()
    while True:
        try:
            task = pipe.recv()
        except EOFError:  # the main process closed its end: done
            return
        try:
            result = (True, fn(task))
        except Exception as e:
            result = (False, e)
        try:
            pipe.send(result)
        except (TypeError, AttributeError, pickle.PicklingError) as e:  # an exception (or result) that cannot pickle
            pipe.send((False, RuntimeError(f"{result[1]!r} (not picklable: {e})")))


def _worker_signals() -> None:
    """Ctrl-C is the main process's to handle (it stops the workers); SIGTERM ends a worker by an exception, so that
    the files it was writing are removed on the way out; and a worker dies with the main process even when that one
    is killed with SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the main process while it forked this one
    die_with_parent()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
