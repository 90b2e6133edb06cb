"""LocalExecutor: results in task order, a task's exception re-raised, a killed worker an error (not a hang),
stopped workers remove their half-written files."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write
from pipeline.executors.local import LocalExecutor


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
