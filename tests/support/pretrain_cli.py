"""The pretraining tests' environment, the one home of it: running `pretrain` (or a script) as a user does, in a
subprocess of its own (no launcher variables inherited, one thread, this checkout's code), under torchrun or as the
ranks of a gloo group started by hand, and reading what a phase logged; and a command refused, run in the tests'
process."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forked_runs

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# this checkout's code, and these modules for test files that are also the script a subprocess runs
ENV = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES} | {
    "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support")])}

# the tiny preset at 8 sequences a step in micro-batches of 4, a metrics row every step (no seq_len: the data's)
TINY = ["--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "log_every=1"]


def torchrun(ranks: int) -> list[str]:
    """The command that starts what follows it (a script, or -m and a module) as `ranks` processes on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]


def rank_envs(world_size: int) -> list[dict[str, str]]:
    """ENV of each rank of a gloo group of `world_size` processes started without a launcher (a free port on
    127.0.0.1 to meet at)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [{**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
             "WORLD_SIZE": str(world_size)} for rank in range(world_size)]


def pretrain(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`pretrain *args` in a process of its own, forked from one that has imported torch already (forked_runs.py)."""
    return forked_runs.run(["-m", "pretrain.cli", *args], [ENV], ENV, timeout)


def start_pretrain(*args: str, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) -> forked_runs.ForkedRun:
    """`pretrain *args` started as pretrain() starts it, not waited for (stderr as text by default)."""
    return forked_runs.ForkedRun(["-m", "pretrain.cli", *args], ENV, ENV, stdout=stdout, stderr=stderr)


def run_ranks(ranks: int, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python *argv` (`-m pretrain.cli ...` or a script) as the ranks of a gloo group (rank_envs), each forked as
    pretrain() is; what torchrun itself does (its signals, restarts, exit codes) is tested under torchrun."""
    return forked_runs.run(list(argv), rank_envs(ranks) if ranks > 1 else [ENV], ENV, timeout)


def start_ranks(ranks: int, *argv: str) -> list[forked_runs.ForkedRun]:
    """The ranks run_ranks() runs, started and not waited for (stdout discarded, stderr as text)."""
    return [forked_runs.ForkedRun(list(argv), env, ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for env in rank_envs(ranks)]


def assert_refused(monkeypatch, capsys, message: str, out: Path, *args: str) -> None:
    """`pretrain *args --out <out>`, run in this process as the console script runs it, exits 2 with one `error:` line
    that holds message, and writes nothing at out."""
    from pretrain.cli import main

    monkeypatch.setattr(sys, "argv", ["pretrain", *args, "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def metrics(phase_dir: Path) -> list[dict]:
    """The rows of a phase's metrics.jsonl."""
    return [json.loads(line) for line in (phase_dir / "metrics.jsonl").read_text().splitlines()]


def wait_for_rows(phase_dir: Path, rows: int, proc: subprocess.Popen, timeout: float = 240) -> list[dict]:
    """metrics.jsonl's rows once it has `rows` of them, while `proc` (the phase) still runs."""
    deadline = time.monotonic() + timeout
    while not ((phase_dir / "metrics.jsonl").is_file() and len(metrics(phase_dir)) >= rows):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return metrics(phase_dir)


def tags(phase_dir: Path) -> list[str]:
    """The checkpoint tags a phase directory holds."""
    from pretrain.model import checkpoint_files
    return sorted(d.name for d in checkpoint_files.checkpoint_dir(phase_dir).iterdir() if d.is_dir())
