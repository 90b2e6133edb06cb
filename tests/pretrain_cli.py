"""Running `pretrain` as a user does, in a subprocess of its own (no launcher variables inherited, one thread), and
reading what a phase logged: shared by the pretraining tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                         "MASTER_PORT")} | {"OMP_NUM_THREADS": "1",
                                                                            "PYTHONPATH": str(ROOT)}


def pretrain(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pretrain.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def metrics(phase_dir: Path) -> list[dict]:
    """The rows of a phase's metrics.jsonl."""
    return [json.loads(line) for line in (phase_dir / "metrics.jsonl").read_text().splitlines()]
