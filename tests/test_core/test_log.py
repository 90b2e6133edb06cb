"""Progress bars: under --quiet a bar takes the same calls, shows nothing and costs no tqdm import; to a stderr that
is not a terminal a bar writes plain lines."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_quiet_bar_takes_a_bars_calls_without_importing_tqdm():
    code = ("import sys\nfrom wiki2bert_core.log import progress\n"
            "with progress(10, 'work', 'B', quiet=True, initial=2) as bar:\n    bar.update(3)\n    bar.set_postfix(loss=1.0)\n"
            "assert 'tqdm' not in sys.modules, 'tqdm imported'\n"
            "with progress(10, 'work', 'B') as bar:\n    bar.update(3)\n"
            "assert 'tqdm' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "work" in done.stderr  # the second, visible bar


def test_a_bar_to_a_stderr_that_is_not_a_terminal_writes_plain_lines():
    code = ("from wiki2bert_core.log import progress\n"
            "with progress(10, 'work', 'step') as bar:\n    for _ in range(10):\n        bar.update(1)\n"
            "        bar.set_postfix(loss=1.0, refresh=False)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,  # bytes: text mode reads \r as \n
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert b"\r" not in done.stderr and b"\x1b" not in done.stderr, done.stderr
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 2, lines  # the start and the end, not a line per update (one line each 30 s)
    assert "work: 100%" in lines[-1] and "10/10" in lines[-1] and "loss=1" in lines[-1]
