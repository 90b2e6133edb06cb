"""Progress bars: under --quiet a bar takes the same calls, shows nothing and costs no tqdm import."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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
