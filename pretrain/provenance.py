"""The code and versions a result was made with: githash.log, gitdiff.log and pip_freeze.txt, written into a
pretraining phase directory (pretrain/run/run_files.py) and a directory of fine-tuning results."""
from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path


def write_code_files(d: Path) -> None:
    """githash.log, gitdiff.log (the code) and pip_freeze.txt (the versions) into directory `d`."""
    code_dir = Path(__file__).resolve().parents[1]  # the checkout (editable install), else site-packages
    (d / "githash.log").write_text(_git(code_dir, "rev-parse", "HEAD"), encoding="utf-8")
    (d / "gitdiff.log").write_text(_git(code_dir, "diff", "HEAD"), encoding="utf-8")
    (d / "pip_freeze.txt").write_text("\n".join(installed_versions()) + "\n", encoding="utf-8")


def installed_versions() -> list[str]:
    """`name==version` of every installed distribution, sorted as pip freeze sorts them. Read from the header of each
    one's metadata file: `Distribution.metadata` parses the whole file, long description included (~2 ms a
    distribution, 0.4 s at every phase's start in an environment of 200)."""
    versions = set()
    for dist in importlib.metadata.distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        header = dict(line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines()
                      if ":" in line and not line[:1].isspace())
        if "Name" in header:
            versions.add(f"{header['Name'].strip()}=={header.get('Version', '').strip()}")
    return sorted(versions, key=str.lower)


def _git(code_dir: Path, *args: str) -> str:
    # installed from a wheel, code_dir is site-packages, which may lie inside some other repository (a .venv in a clone)
    if not (code_dir / "pyproject.toml").is_file():
        return "not a git checkout\n"
    try:
        done = subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "not a git checkout\n"
    return done.stdout if done.returncode == 0 else "not a git checkout\n"
