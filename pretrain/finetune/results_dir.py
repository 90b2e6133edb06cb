"""The directory of fine-tuning results (`pretrain finetune --out`): where each of its files lies, which seeds it holds
finished, and write errors that name the file (pretrain/out_dirs.py tells it from other directories by SETTINGS_FILE
and LOG_FILE).

  settings.json               what the finished seeds' figures depend on: each kind's recipe, --held-out, each
                              model's path and the fingerprints of its files and of its tokenizer's, each task's
                              source and the digest of its examples; and the last command
  githash.log, gitdiff.log, pip_freeze.txt   the code and versions of the last run (pretrain/provenance.py)
  models/<model>/                            the export of a model given as a phase directory (its latest
                                             checkpoint: pretrain/tools/export.py), what is fine-tuned
  tasks/<task>.json                          the task's description and majority baseline (report.py)
  runs/<model>/<task>/seed<k>.json           one seed's figures, written when it has finished
  predictions/<model>/<task>/seed<k>.jsonl   its dev predictions (written just before the figures)
  best/<model>/<task>/                       the best seed's model (--save) and test predictions (best.py)
  results.json, results.md, results.png      every finished seed in the directory (report.py)
  finetune.log                               the log
"""
from __future__ import annotations

import contextlib
import glob
from pathlib import Path
from typing import Iterator

SETTINGS_FILE = "settings.json"
LOG_FILE = "finetune.log"
EXPORTS = "models"  # the exports of models given as phase directories


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError inside names `path` where it names no file (a failed write() or flush(): a full disk)."""
    try:
        yield
    except OSError as e:
        if not e.filename:
            e.filename = str(path)
        raise


def result_path(out: Path, model: str, task: str, seed: int) -> Path:
    return out / "runs" / model / task / f"seed{seed}.json"


def predictions_path(out: Path, model: str, task: str, seed: int) -> Path:
    return out / "predictions" / model / task / f"seed{seed}.jsonl"


def finished_seeds(out: Path, model: str | None = None, task: str | None = None) -> dict[tuple[str, str], list[int]]:
    """(model, task) -> the seeds finished in `out` (those with a figures file), in order; of one model or task
    where named."""
    found: dict[tuple[str, str], list[int]] = {}
    names = "/".join(glob.escape(name) if name else "*" for name in (model, task))
    for path in (out / "runs").glob(f"{names}/seed*.json"):
        number = path.stem.removeprefix("seed")
        if number.isdigit():
            found.setdefault((path.parent.parent.name, path.parent.name), []).append(int(number))
    return {key: sorted(seeds) for key, seeds in sorted(found.items())}
