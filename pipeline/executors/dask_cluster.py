"""The parallel stages on Dask distributed: `pipeline run --executor dask [--scheduler tcp://HOST:PORT]`.

Without a scheduler address, `dask_executor` starts a LocalCluster of `--workers` single-threaded worker processes
on this machine for the command's duration; with one, it connects to that scheduler and waits for its first worker
(Slurm, Kubernetes: docs/cluster.md). Workers read the stage inputs and write the stage outputs themselves, so the work dir must be on
a filesystem every worker mounts at the same path: each worker must find a token file the client wrote there,
or the command stops before any stage runs. Dask is an optional extra: `pip install 'wiki2bert[dask]'`.

Two of Dask's defaults are changed (DASK_SETTINGS, in this process and the LocalCluster's workers; a cluster's own
should do the same, docs/cluster.md): its nanny starts workers with MALLOC_TRIM_THRESHOLD_ set, and its scheduler and
client keep the last 1,000 messages of each connection, task arguments included.

A scheduler left without workers would keep the stage's tasks pending for ever; the stage stops once it has had
none for WORKER_WAIT_S. A LocalCluster's worker processes hold named semaphores (multiprocessing's, in
/dev/shm) that a killed command cannot remove: their names are recorded in the work dir, and the next run removes them.
When the LocalCluster has closed, the resource tracker its processes started is stopped too, so that the command
leaves no process behind.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator, TypeVar

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.log import LOGGER_NAME

T = TypeVar("T")
R = TypeVar("R")
TASKS_PER_WORKER = 2  # tasks queued per worker thread ahead of the result the stage waits for
CONNECT_TIMEOUT_S = 30  # to connect to --scheduler and hear it answer as a Dask scheduler
WORKER_WAIT_S = 600  # for the first worker, and for a new one when none is left: a batch system may take a while
WORKER_POLL_S = 1.0  # how often a stage waiting for a task asks the scheduler how many workers it has
SEMAPHORES = "dask-semaphores.txt"  # under .state: the named semaphores of this run's LocalCluster
SEMAPHORE_PATH = re.compile(r"/dev/shm/sem\.mp-[A-Za-z0-9_]+")  # multiprocessing's (SemLock._make_name)
# Dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which turns glibc's adaptive mmap threshold
# off: every allocation over 128 KiB became an mmap of its own, and the filter stage had 100x the page faults and
# 1.4x the CPU of the local executor's workers (docs/performance.md#rehearsal). Ours keep the allocator's defaults.
# low-level-log-length: the length of Dask's debugging logs (BatchedSend's recent messages, transition and stimulus
# logs, profile history). The scheduler's log of what it sent each worker held the last 1,000 tasks' arguments: the
# command's process grew by ~500 MB with tasks of 200 KB (a sequential dump's page batches).
DASK_SETTINGS = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                 "distributed.admin.low-level-log-length": 0}
log = logging.getLogger(LOGGER_NAME)  # the command's console and pipeline.log


class DaskExecutor:
    """Executor over a connected dask.distributed Client: tasks are submitted a window at a time (memory stays
    bounded however many tasks there are) and their results handed back in task order."""
    name: ClassVar[str] = "dask"

    def __init__(self, client, workers: int, where: str):
        self.client = client
        self.workers = workers
        self.where = where  # the flag that chose the cluster, for messages: "--scheduler ADDRESS", "--executor dask"

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        window: collections.deque = collections.deque()
        try:
            for number, task in enumerate(tasks):
                window.append((number, self.client.submit(fn, task, pure=False)))
                if len(window) >= TASKS_PER_WORKER * self.workers:
                    yield self._result(*window.popleft())
            while window:
                yield self._result(*window.popleft())
        finally:
            if window:  # an error or a stage that stopped early: drop the work still queued
                self.client.cancel([future for _, future in window])

    def _result(self, number: int, future):
        """The task's result, or the exception the task raised; DataError when workers died running it (Dask's
        allowed-failures), or when the scheduler has had no worker for WORKER_WAIT_S.

        The wait is on an event Dask sets when the task has finished or failed, not a poll by
        `future.result(timeout=...)`: that poll's TimeoutError cannot be told from one the task raised, and its
        timeout also covers fetching the result from the worker, so a task that finished during a poll would be
        reported as "timed out after 1 s". Once the task is done, its result is fetched without a timeout."""
        from distributed.scheduler import KilledWorker

        finished = threading.Event()
        future.add_done_callback(lambda _: finished.set())
        no_worker_since = None
        while not finished.wait(WORKER_POLL_S):
            if self.client.nthreads():
                no_worker_since = None
            elif no_worker_since is None:
                no_worker_since = time.monotonic()
                log.warning("%s: no worker left; waiting up to %d s for one to join", self.where, WORKER_WAIT_S)
            elif time.monotonic() - no_worker_since > WORKER_WAIT_S:
                raise DataError(f"{self.where}: no worker left for {WORKER_WAIT_S} s while tasks were waiting "
                                f"(the workers died or were stopped); start workers and re-run to continue")
        try:
            return future.result()
        except KilledWorker as e:
            deaths = e.allowed_failures + 1
            # Dask blames every task in progress on a worker that dies: the one that killed it, or one beside it
            raise DataError(f"{self.where}: the worker running task {number} died {deaths} time{'s' * (deaths > 1)} "
                            f"(out of memory?); the last was {e.last_worker.address}") from None


@contextlib.contextmanager
def dask_executor(scheduler: str | None, workers: int, workdir: Path) -> Iterator[DaskExecutor]:
    """A DaskExecutor on the scheduler at `scheduler`, or on a LocalCluster of `workers` processes; checks first
    that every worker sees `workdir`."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--executor dask: Dask distributed is not installed (pip install 'wiki2bert[dask]')"
                          ) from None
    where = f"--scheduler {scheduler}" if scheduler else "--executor dask"
    with contextlib.ExitStack() as stack:
        stack.enter_context(dask.config.set(DASK_SETTINGS))
        if scheduler is None:
            stack.callback(_stop_resource_tracker)  # the last to run: after the cluster has closed
            record = workdir / ".state" / SEMAPHORES
            stack.callback(record.unlink, missing_ok=True)  # runs once the cluster has closed them
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                       dashboard_address=":0", silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
            record_semaphores(record)
        else:
            check_is_scheduler(scheduler)
            try:
                client = stack.enter_context(Client(scheduler, timeout=CONNECT_TIMEOUT_S))
            except (OSError, TimeoutError, ValueError) as e:
                raise ConfigError(f"--scheduler {scheduler}: cannot connect ({e})") from None
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except TimeoutError:
            raise ConfigError(f"{where}: no worker joined in {WORKER_WAIT_S} s") from None
        check_workers_see(client, workdir, where)
        threads = sum(client.nthreads().values())
        yield DaskExecutor(client, threads, where)


def _stop_resource_tracker() -> None:
    """Ends (and reaps) multiprocessing's resource tracker, which the LocalCluster's worker processes started in this
    process: left alone it ends only after this process has exited, a process for PID 1 to reap."""
    from multiprocessing import resource_tracker

    resource_tracker._resource_tracker._stop()


def check_is_scheduler(scheduler: str) -> None:
    """ConfigError unless `scheduler` answers as a Dask scheduler within CONNECT_TIMEOUT_S. Client's own timeout
    covers only the TCP connect: a port that accepts and says nothing would hang it in the handshake, and one that
    answers other bytes (a web server) gets them read as a frame length ("Unable to allocate 3.07 EiB")."""
    from distributed.comm import connect

    async def identity() -> dict:
        comm = await connect(scheduler, timeout=CONNECT_TIMEOUT_S)
        try:
            await comm.write({"op": "identity"})
            return await comm.read()
        finally:
            comm.abort()

    try:  # a second more than connect's own timeout, so that nothing accepting gets connect's error (OSError)
        reply = asyncio.run(asyncio.wait_for(identity(), CONNECT_TIMEOUT_S + 1))
    except TimeoutError:
        raise ConfigError(f"--scheduler {scheduler}: no Dask scheduler answered in {CONNECT_TIMEOUT_S} s "
                          f"(the port of another program?)") from None
    except OSError as e:
        raise ConfigError(f"--scheduler {scheduler}: cannot connect ({e})") from None
    except Exception as e:  # bytes that are not Dask's: a frame length of exabytes, msgpack that does not parse
        raise ConfigError(f"--scheduler {scheduler}: not a Dask scheduler (its answer does not read as Dask's "
                          f"protocol: {type(e).__name__})") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise ConfigError(f"--scheduler {scheduler}: a Dask {kind or 'server'}, not a scheduler (give the "
                          f"scheduler's address, tcp://HOST:8786 by default)")


def record_semaphores(record: Path) -> None:
    """Writes to `record` the named semaphores this process and its LocalCluster's processes hold: they go when the
    cluster closes, but a killed command leaves them in /dev/shm, for the next run to remove."""
    import psutil  # a dependency of distributed

    held = set()
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            held.update(m.path for m in process.memory_maps() if SEMAPHORE_PATH.fullmatch(m.path))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("".join(f"{path}\n" for path in sorted(held)), encoding="utf-8")


def remove_leftover_semaphores(workdir: Path) -> None:
    """Removes the semaphores a killed run recorded (record_semaphores); only names of multiprocessing's form
    that the record lists, never another program's."""
    record = workdir / ".state" / SEMAPHORES
    if not record.exists():
        return
    for path in record.read_text(encoding="utf-8").splitlines():
        if SEMAPHORE_PATH.fullmatch(path):
            Path(path).unlink(missing_ok=True)
    record.unlink()


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
        raise ConfigError(f"{where}: worker {blind[0]}{more} cannot see the work dir {workdir} "
                          f"(no token file {path.name} there): put --workdir on a filesystem every worker mounts "
                          f"at the same path (docs/cluster.md)")


def read_token(path: str) -> str | None:
    """Runs on each worker: the token file's content, or None when the worker cannot read it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
