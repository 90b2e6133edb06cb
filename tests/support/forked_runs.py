"""`pretrain` commands (and the tests' own worker scripts) forked from a process that has already imported torch,
DeepSpeed and transformers, instead of started afresh: a fresh process spends ~4.5 of the ~6.5 CPU-seconds of a tiny phase on those imports, and the
suite starts well over a hundred of them. Each command is still a process of its own (its pid, signals, exit code,
stdout and stderr, environment and working directory); what a fork does not redo is the imports, so tests of what a
fresh process imports or prints at import time start one with subprocess instead.

The preloaded process (`python forked_runs.py SOCKET`, one per test process, started at its first command) forks
a child for each request on a Unix socket, sends back the child's pid and, once it has ended, its wait status.
`ForkedRun` is the part of subprocess.Popen the tests use."""
from __future__ import annotations

import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# with what a phase imports once started and load_communication_op below: a tiny phase's own CPU 1.25 -> 0.84 s
PRELOADED = ("torch", "deepspeed", "transformers", "pretrain.cli", "pretrain.run.train", "pretrain.run.prepare",
             "pretrain.run.evaluate", "pretrain.tools.export", "pretrain.finetune.run", "pretrain.model.pretraining",
             "pretrain.model.bert", "pretrain.model.modernbert", "pretrain.model.roberta",
             "pretrain.optim.zero_partitions", "deepspeed.runtime.zero.stage_1_and_2", "deepspeed.module_inject",
             "torch.utils.tensorboard", "torch.utils.cpp_extension",
             # DeepSpeed imports it at every ZeRO engine's start (is_zero_supported_optimizer), and with it torch's
             # compiler (torch.compile at its import): 5.3 CPU-seconds a rank
             "deepspeed.runtime.zero.muon.muon_optimizer")
REAP_INTERVAL_S = 0.01


# --- the preloaded process ------------------------------------------------------------------------------

def serve(path: str) -> tuple[dict, list[int]]:
    """Preload, then fork a child for each request; return (the request, its stdin/stdout/stderr) in the child."""
    import importlib
    from wiki2bert_core.child_processes import die_with_parent

    die_with_parent()
    for module in PRELOADED:
        importlib.import_module(module)
    from pretrain import load_communication_op

    load_communication_op()  # DeepSpeed probes its ops (a compiler run) and loads this one once a process: once for all
    # the children's collector passes would otherwise walk (and so copy, page by page) every object preloaded here
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection its status goes back on
    while True:
        if select.select([listener], [], [], REAP_INTERVAL_S)[0]:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                for other in waiting.values():
                    other.close()
                return json.loads(message), fds
            for fd in fds:
                os.close(fd)
            connection.send(str(pid).encode())
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            connection.send(str(status).encode())
            connection.close()


def become(request: dict, fds: list[int]) -> None:
    """In the forked child: the request's standard streams, environment and directory."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])


# --- the tests' side ------------------------------------------------------------------------------------

class _Server:
    process: subprocess.Popen | None = None
    path: str = ""

    @classmethod
    def socket_path(cls, env: dict[str, str]) -> str:
        """The preloaded process's socket, the process started (with `env`: no launcher variables) if it is not
        running."""
        if cls.process is None or cls.process.poll() is not None:
            cls.path = os.path.join(tempfile.mkdtemp(prefix="forked-runs-"), "socket")
            cls.process = subprocess.Popen([sys.executable, __file__, cls.path], env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, text=True)
            for line in cls.process.stdout:  # after what the imports print (DeepSpeed: its accelerator)
                if line == "ready\n":
                    break
            else:
                raise RuntimeError(f"the preloaded process ended (exit code {cls.process.wait()})")
            atexit.register(cls.stop, cls.process, os.path.dirname(cls.path))
        return cls.path


    @staticmethod
    def stop(process: subprocess.Popen, directory: str) -> None:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _stream(choice, inherited: int) -> tuple[int, int | None]:
    """(the fd the child gets, the read end kept here or None) for a Popen stdout/stderr argument."""
    if choice == subprocess.PIPE:
        read, write = os.pipe()
        return write, read
    if choice == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_WRONLY), None
    return os.dup(inherited), None


class _Reader(threading.Thread):
    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.text = pipe, ""
        self.start()

    def run(self) -> None:
        with self.pipe:
            self.text = self.pipe.read()


class ForkedRun:
    """`python *argv` forked from the preloaded process, argv `-m pretrain.cli ...` or a script and its arguments:
    pid, returncode, poll, wait, communicate, send_signal, kill and the stdout/stderr pipes, as
    subprocess.Popen has them (text mode)."""

    def __init__(self, argv: list[str], env: dict[str, str], preload_env: dict[str, str], stdout=None,
                 stderr=None):
        assert argv[:2] == ["-m", "pretrain.cli"] or not argv[0].startswith("-"), argv
        self.args = [sys.executable, *argv]
        self.returncode: int | None = None
        out_fd, out_read = _stream(stdout, 1)
        err_fd, err_read = (os.dup(out_fd), None) if stderr == subprocess.STDOUT else _stream(stderr, 2)
        stdin_fd = os.open(os.devnull, os.O_RDONLY)
        request = {"argv": argv, "env": env, "cwd": os.getcwd()}
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._connection.connect(_Server.socket_path(preload_env))
            socket.send_fds(self._connection, [json.dumps(request).encode()], [stdin_fd, out_fd, err_fd])
            self.pid = int(self._connection.recv(64))
        finally:
            for fd in (stdin_fd, out_fd, err_fd):
                os.close(fd)
        self.stdout = os.fdopen(out_read, "r") if out_read is not None else None
        self.stderr = os.fdopen(err_read, "r") if err_read is not None else None
        self._readers: dict = {}

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None and select.select([self._connection], [], [], timeout)[0]:
            self.returncode = os.waitstatus_to_exitcode(int(self._connection.recv(64)))
            self._connection.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """As Popen's: the pipes read to their end (by a thread each, kept across a timeout), then the exit."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._readers:
            self._readers = {f: _Reader(f) for f in (self.stdout, self.stderr) if f is not None}
        for reader in self._readers.values():
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return tuple(self._readers[f].text if f in self._readers else None for f in (self.stdout, self.stderr))

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run(argv: list[str], envs: list[dict[str, str]], preload_env: dict[str, str], timeout: float
        ) -> subprocess.CompletedProcess:
    """subprocess.run(..., capture_output=True, text=True, timeout=timeout) of a ForkedRun for each env (the ranks
    of a group: their outputs one after another, the first failing rank's exit code)."""
    processes = [ForkedRun(argv, env, preload_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for env in envs]
    deadline = time.monotonic() + timeout
    try:
        outputs = [process.communicate(timeout=max(0.0, deadline - time.monotonic())) for process in processes]
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
            process.wait()
        raise
    failed = [process.returncode for process in processes if process.returncode]
    return subprocess.CompletedProcess(processes[0].args, failed[0] if failed else 0,
                                       "".join(out for out, _ in outputs), "".join(err for _, err in outputs))


if __name__ == "__main__":
    request, fds = serve(sys.argv[1])
    become(request, fds)
    if request["argv"][0] == "-m":
        import pretrain.cli

        sys.argv = [pretrain.cli.__file__, *request["argv"][2:]]  # as `python -m pretrain.cli` has it
        pretrain.cli.main()
    else:
        import runpy

        sys.argv = request["argv"]
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python script` has it
        runpy.run_path(sys.argv[0], run_name="__main__")
