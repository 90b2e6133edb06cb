"""The parallel stages on Dask distributed: `pipeline run --executor dask [--scheduler tcp://HOST:PORT]`.

Without a scheduler address, `dask_executor` starts a LocalCluster of `--workers` single-threaded worker processes
on this machine for the command's duration; with one, it connects to that scheduler and waits for its first worker
(Slurm, Kubernetes: docs/cluster.md). Workers read the stage inputs and write the stage outputs themselves, so the work dir must be on
a filesystem every worker mounts at the same path: each worker must find a token file the client wrote there,
or the command stops before any stage runs. Dask is an optional extra: `pip install 'wiki2bert[dask]'`.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import secrets
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator, TypeVar

from wiki2bert_core.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")
TASKS_PER_WORKER = 2  # tasks queued per worker thread ahead of the result the stage waits for
CONNECT_TIMEOUT_S = 30
FIRST_WORKER_TIMEOUT_S = 600  # a batch system may take a while to start the first worker job


class DaskExecutor:
    """Executor over a connected dask.distributed Client: tasks are submitted a window at a time (memory stays
    bounded however many tasks there are) and their results handed back in task order."""
    name: ClassVar[str] = "dask"

    def __init__(self, client, workers: int):
        self.client = client
        self.workers = workers

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        window: collections.deque = collections.deque()
        try:
            for task in tasks:
                window.append(self.client.submit(fn, task, pure=False))
                if len(window) >= TASKS_PER_WORKER * self.workers:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            if window:  # an error or a stage that stopped early: drop the work still queued
                self.client.cancel(list(window))


@contextlib.contextmanager
def dask_executor(scheduler: str | None, workers: int, workdir: Path) -> Iterator[DaskExecutor]:
    """A DaskExecutor on the scheduler at `scheduler`, or on a LocalCluster of `workers` processes; checks first
    that every worker sees `workdir`."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--executor dask: Dask distributed is not installed (pip install 'wiki2bert[dask]')"
                          ) from None
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                       dashboard_address=":0", silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout=CONNECT_TIMEOUT_S))
            except (OSError, TimeoutError, ValueError) as e:
                raise ConfigError(f"--scheduler {scheduler}: cannot connect ({e})") from None
        try:
            client.wait_for_workers(1, timeout=FIRST_WORKER_TIMEOUT_S)
        except TimeoutError:
            raise ConfigError(f"--scheduler {scheduler}: no worker joined in {FIRST_WORKER_TIMEOUT_S} s") from None
        check_workers_see(client, workdir, scheduler or "LocalCluster")
        threads = sum(client.nthreads().values())
        yield DaskExecutor(client, threads)


def check_workers_see(client, workdir: Path, where: str) -> None:
    """ConfigError unless every worker reads back the token file the client writes under workdir."""
    token = secrets.token_hex(16)
    path = workdir / ".state" / f"dask-token-{token}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token, encoding="utf-8")
    try:
        seen = client.run(read_token, str(path))
    finally:
        path.unlink()
    blind = sorted(worker for worker, value in seen.items() if value != token)
    if blind:
        more = f" and {len(blind) - 1} more" if len(blind) > 1 else ""
        raise ConfigError(f"--scheduler {where}: worker {blind[0]}{more} cannot see the work dir {workdir} "
                          f"(no token file {path.name} there): put --workdir on a filesystem every worker mounts "
                          f"at the same path (docs/cluster.md)")


def read_token(path: str) -> str | None:
    """Runs on each worker: the token file's content, or None when the worker cannot read it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
