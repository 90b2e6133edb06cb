"""LocalExecutor: results in task order, a task's exception re-raised, a killed worker an error (not a hang),
stopped workers remove their half-written files; a whole `pipeline run` leaves no process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write
from pipeline.executors.local import LocalExecutor
from pipeline.tools.sample_dump import write_sample_dump
from child_processes import run_leaving


def slow_square(n: int) -> int:
    time.sleep(0.02 * (n % 3))  # later tasks often finish first
    return n * n


def fail_on_five(n: int) -> int:
    if n == 5:
        raise ValueError("task 5 is bad")
    return n


def killed_on_three(n: int) -> int:
    if n == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return n


def test_results_come_in_task_order():
    assert list(LocalExecutor(3).map(slow_square, iter(range(40)))) == [n * n for n in range(40)]


def test_a_tasks_exception_is_raised_in_the_caller():
    with pytest.raises(ValueError, match="task 5 is bad"):
        list(LocalExecutor(2).map(fail_on_five, range(10)))


def test_a_killed_worker_is_an_error_not_a_hang():
    started = time.time()
    with pytest.raises(DataError, match=r"a worker process died \(exit code -9\) while running task 3"):
        list(LocalExecutor(2).map(killed_on_three, range(10)))
    assert time.time() - started < 30


WORKERS_PRIVATE_MEMORY = """
import gc, os
from pipeline.executors.local import LocalExecutor
from pipeline.tools.measure import private_bytes

def private_mib_after_a_full_collection(_):
    gc.collect()
    return private_bytes(os.getpid()) / 2**20

inherited = [[i] for i in range(1_000_000)]  # ~100 MiB of objects the collector tracks
print(max(LocalExecutor(workers=2).map(private_mib_after_a_full_collection, range(2))), gc.get_freeze_count())
"""


def test_workers_do_not_copy_the_objects_they_inherit():
    """A worker's collector wrote to every object it inherited from the main process, so each worker came to hold
    its own copy of the main's pages (the shard stage's workers: 7 MiB of their own at 100 MB, 20 at 1 GB); in a
    process of its own, as a command runs it (a test process may have frozen its objects already)."""
    done = subprocess.run([sys.executable, "-c", WORKERS_PRIVATE_MEMORY], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    private_mib, frozen_after = done.stdout.split()
    assert float(private_mib) < 30
    assert frozen_after == "0"


def write_slowly_or_fail(task: tuple[str, str]) -> None:
    kind, path = task
    if kind == "fail":
        time.sleep(0.5)  # the other worker is writing by now
        raise ValueError("stop")
    with atomic_write(Path(path)) as f:
        f.write("half")
        time.sleep(60)


def test_stopped_workers_remove_their_half_written_files(tmp_path):
    started = time.time()
    with pytest.raises(ValueError, match="stop"):
        list(LocalExecutor(2).map(write_slowly_or_fail, [("fail", ""), ("write", str(tmp_path / "out.txt"))]))
    assert time.time() - started < 20
    assert list(tmp_path.iterdir()) == []


# A map whose workers are stopped before they have run at all (a new process that has not yet been scheduled): each
# worker, as it comes out of fork, gets SIGTERM at once (a stand-in for os.fork that raises it in the child). The
# main process holds the stage's handler (SIGTERM raises KeyboardInterrupt) and a cleanup that says which process ran it.
STOPPED_AT_FORK = """
import os, signal, sys
from pipeline.executors.local import LocalExecutor
from pipeline.workdir import exit_nonzero_after_signal

fork = os.fork
def fork_then_sigterm():
    pid = fork()
    if pid == 0:
        signal.raise_signal(signal.SIGTERM)
    return pid
os.fork = fork_then_sigterm
main = os.getpid()
try:
    with exit_nonzero_after_signal():
        print(list(LocalExecutor(2).map(abs, [])), flush=True)
finally:
    print("cleanup by", "the main process" if os.getpid() == main else "a worker", flush=True)
"""


def test_a_worker_stopped_before_it_ran_ends_alone_not_as_the_main_process(tmp_path):
    done = subprocess.run([sys.executable, "-c", STOPPED_AT_FORK], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "cleanup by the main process"], done.stdout + done.stderr


@pytest.mark.slow
def test_a_pipeline_run_leaves_no_process_behind(tmp_path):
    """Every process the run started (its workers, and what they started: quntoken's shells) has ended and been
    reaped the moment the command returns: none is handed to PID 1, which in a container may never reap it."""
    dump = write_sample_dump(tmp_path / "dump", 40)
    code, stderr, left = run_leaving(
        [sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--workdir", tmp_path / "w", "--dump", dump,
         "--workers", "2", "--quiet", "--set", "vocab.vocab_size=1000", "--set", "shard.num_shards=2",
         "--set", "hdf5.dupe_factor=1", "--set", "extract.articles_per_part=10"], cwd=tmp_path)
    assert code == 0, stderr
    assert left == []
