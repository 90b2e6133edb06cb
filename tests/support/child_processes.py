"""Which child processes are left: of this process, or of a command after it returned (any state, zombies
included)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Runs argv[1:] as a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so that the descendants the command leaves
# behind become its children instead of PID 1's; right after the command returns, prints its exit code and those
# children as JSON, then kills and reaps them.
_SUBREAPER = r"""
import ctypes, json, os, signal, subprocess, sys
sys.path.insert(0, sys.argv[1])
from child_processes import children
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1) == 0  # PR_SET_CHILD_SUBREAPER
command = subprocess.run(sys.argv[2:], capture_output=True, text=True)
left = children(os.getpid())
print(json.dumps({"returncode": command.returncode, "stderr": command.stderr, "left": left}))
for pid, _, _ in left:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""


def children(pid: int) -> list[tuple[int, str, str]]:
    """(pid, state letter, name) of each child process of `pid`, zombies included."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state, parent = stat[stat.rindex(")") + 2:].split()[:2]
        if int(parent) == pid:
            found.append((int(entry.name), state, name))
    return found


def run_leaving(args: list, cwd: Path, env: dict | None = None) -> tuple[int, str, list[tuple[int, str, str]]]:
    """Runs `args` to its end; (its exit code, its stderr, the processes it started that were left, in any state,
    the moment it returned)."""
    done = subprocess.run([sys.executable, "-c", _SUBREAPER, str(Path(__file__).parent), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, check=True)
    result = json.loads(done.stdout)
    return result["returncode"], result["stderr"], [tuple(child) for child in result["left"]]
