"""What a command costs while it runs (Linux /proc): wall and CPU seconds, CPU seconds of its main process's main
thread (the work no worker process or thread shares), peak RSS of its main process and of its largest descendant,
the largest descendant's peak private memory, and the peak size of a directory it writes. Used by `pipeline plan`
(pipeline/tools/plan.py) and bench/rehearsal.py."""
from __future__ import annotations

import dataclasses
import os
import resource
import subprocess
import threading
import time
from pathlib import Path

from wiki2bert_core.errors import ConfigError

POLL_S = 0.1  # how often the processes are read
DISK_POLL_S = 0.5  # how often the directory is walked for its size, at the most
# the walk waits at least this many times its own duration: a work directory of tens of thousands of files (a 1 GB
# run's) took 13% of a core walked every 0.5 s, CPU taken from the run being measured
DISK_POLL_SPACING = 50


@dataclasses.dataclass
class Cost:
    wall_s: float
    cpu_s: float  # user + sys of the whole process tree
    # user + sys of the main process's main thread (as last read, at most POLL_S before it ended): its other threads
    # (sentencepiece's trainer, tokenizers') share work as worker processes do
    main_cpu_s: float
    main_rss: int  # peak RSS of the main process, bytes
    worker_rss: int  # peak RSS of its largest descendant (0: none)
    # peak private memory (USS, polled) of its largest descendant: a forked worker's RSS also counts the pages it
    # shares with the main process it was forked from, which are in memory once
    worker_private: int
    disk_peak: int  # peak size of the watched directory, bytes (0: none watched)
    returncode: int


def directory_bytes(path: Path) -> int:
    """Bytes of the files under `path`, a file of several hard links once (the hdf5 stage's cache links its
    outputs); symbolic links not followed, files that vanish while it walks skipped."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    if stat.st_nlink > 1:
                        if (stat.st_dev, stat.st_ino) in seen:
                            continue
                        seen.add((stat.st_dev, stat.st_ino))
                    total += stat.st_size
            except OSError:
                pass
    return total


def measure(command: list[str], watch: Path | None = None, **popen) -> Cost:
    """Run `command` (Popen's keyword arguments in `popen`) to its end and measure it."""
    if not Path("/proc/self/status").exists():
        raise ConfigError("measuring a run reads /proc: Linux only")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, **popen)
    watcher = _Watcher(process.pid, watch)
    returncode = process.wait()
    wall = time.perf_counter() - started
    watcher.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Cost(wall, cpu, watcher.main_cpu, watcher.main_rss, watcher.worker_rss, watcher.worker_private,
                watcher.disk_peak, returncode)


class _Watcher:
    """Polls the process tree of `pid` in a thread (and the size of `watch`, if given)."""

    def __init__(self, pid: int, watch: Path | None):
        self.pid, self.watch = pid, watch
        self.main_cpu = 0.0
        self.main_rss = self.worker_rss = self.worker_private = 0
        self.disk_peak = directory_bytes(watch) if watch else 0
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        next_disk = 0.0
        while not self._stop.is_set():
            self.main_cpu = max(self.main_cpu, _thread_cpu(self.pid, self._ticks))
            self.main_rss = max(self.main_rss, _peak_rss(self.pid))
            for child in _descendants(self.pid):
                self.worker_rss = max(self.worker_rss, _peak_rss(child))
                # smaps_rollup walks the mappings: 0.6 ms for a stage's worker, ~0.6% of a core at POLL_S; read less
                # often, a stage shorter than the spacing lost its workers' figure
                self.worker_private = max(self.worker_private, private_bytes(child))
            if self.watch and time.monotonic() >= next_disk:
                walk_started = time.monotonic()
                self.disk_peak = max(self.disk_peak, directory_bytes(self.watch))
                walked = time.monotonic() - walk_started
                next_disk = time.monotonic() + max(DISK_POLL_S, DISK_POLL_SPACING * walked)
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.watch:
            self.disk_peak = max(self.disk_peak, directory_bytes(self.watch))


def _peak_rss(pid: int) -> int:
    """The peak RSS (VmHWM) of a live process, bytes; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def private_bytes(pid: int) -> int:
    """The private memory (smaps_rollup's Private_Clean + Private_Dirty) of a live process, bytes; 0 once gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Private_"))


def _thread_cpu(pid: int, ticks: int) -> float:
    """user + sys seconds of the main thread of a live process; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                stack.append(child)
    return found
