"""<workdir>/results.jsonl of the bench scripts that record a row as each measured command ends and print their
tables from it again with --report (rehearsal.py, scale.py). Not a bench script itself (tests/test_bench_smoke.py
runs bench/[!_]*.py)."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def start(results: Path) -> None:
    """Makes results' directory and prints a line naming the machine, its cores and load, and where results go."""
    results.parent.mkdir(parents=True, exist_ok=True)
    print(f"{platform.node()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; results in {results}",
          flush=True)


def append(results: Path, row: dict) -> None:
    with open(results, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def latest(results: Path, key: str) -> dict[tuple, dict]:
    """The last row recorded of each (row[key], row["stage"])."""
    rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(r[key], r["stage"]): r for r in rows}
