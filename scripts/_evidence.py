"""What the evidence scripts (scripts/*_evidence.py) share: running the commands, subsets of the downstream tasks, a
run's held-out figures."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
HUWIKI = DATA / "wiki" / "huwiki-20240920-pages-articles-multistream.xml.bz2"


def env(threads: int) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def cli(tool: str, *args, threads: int, log: Path) -> subprocess.Popen:
    """`tool` (pipeline or pretrain) with `args`, its output into `log`; started, not waited for."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        process = subprocess.Popen([sys.executable, "-m", f"{tool}.cli", *map(str, args)], env=env(threads),
                                   stdout=f, stderr=subprocess.STDOUT)
    process.log = log
    return process


def wait(*processes: subprocess.Popen) -> None:
    for p in processes:
        if p.wait():
            sys.exit(f"error: {' '.join(map(str, p.args[2:4]))} exited {p.returncode}: see {p.log}")


def task_subset(task: Path, examples: dict[str, int], out: Path) -> Path:
    """A copy of the task directory `task` whose training and dev files (JSON arrays) hold `examples[split]` of their
    examples (0: all), drawn at random (seed 0), and whose split subdirectories of CoNLL files (NerKor's train/,
    devel/) hold their first `examples[split] // 100` files (at least one; a NerKor file holds ~100-200
    sentences); the other files as they are."""
    target = out / task.name
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(task.iterdir()):
        split = next((s for s in examples if s in path.name), None)
        if split and examples[split] and path.suffix == ".json":
            rows = json.loads(path.read_text(encoding="utf-8"))
            picked = sorted(random.Random(0).sample(range(len(rows)), min(examples[split], len(rows))))
            (target / path.name).write_text(json.dumps([rows[i] for i in picked], ensure_ascii=False), encoding="utf-8")
        elif split and path.is_dir():
            (target / path.name).mkdir(exist_ok=True)
            files = sorted(p for p in path.iterdir() if p.is_file())
            for file in files[:max(1, examples[split] // 100) if examples[split] else len(files)]:
                shutil.copyfile(file, target / path.name / file.name)
        elif path.is_file():
            shutil.copyfile(path, target / path.name)
    return target


def evaluations(run: Path, phase: str = "phase1") -> dict[int, dict]:
    """step -> the held-out figures of each evaluation of a run's phase."""
    rows = [json.loads(line) for line in (run / phase / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "eval_mlm_accuracy" in r}
