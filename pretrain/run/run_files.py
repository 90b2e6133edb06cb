"""Provenance files of a run directory: hparams.json, ds_config.json, model_config.json, tokenizer/, githash.log,
gitdiff.log and pip_freeze.txt, written by rank 0 before the first step (the last three also by `pretrain
finetune`)."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from wiki2bert_core.config import config_to_dict
from wiki2bert_core.files import write_json
from wiki2bert_core.wordpiece import copy_tokenizer_files
from pretrain.model.model_dir import HPARAMS, TOKENIZER_DIR
from pretrain.model.checkpoint_files import write_model_config
from pretrain.run.prepare import Run


def write_run_files(run: Run, ds_config: dict, num_parameters: int, zero_stage: int) -> None:
    d = run.phase_dir
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / HPARAMS, {
        "phase": run.phase, "config": config_to_dict(run.config), "seed": run.config.seed,
        "model": dataclasses.asdict(run.model), "num_parameters": num_parameters,
        "data_dir": str(Path(run.data.data_dir).resolve()), "data_files": len(run.data.files),
        "data_samples": run.data.samples, "seq_len": run.data.seq_len, "max_predictions": run.data.max_predictions,
        "vocab_dir": str(run.vocab_dir.resolve()), "vocab_tokens": run.vocab_size,
        "init": run.init.to_dict() if run.init else None,
        "world_size": run.world_size, "gradient_accumulation": run.grad_accumulation,
        "precision": run.precision, "zero_stage": zero_stage, "command": sys.argv})
    write_json(d / "ds_config.json", ds_config)
    write_model_config(d, run.model)
    (d / TOKENIZER_DIR).mkdir(exist_ok=True)
    copy_tokenizer_files(run.vocab_dir, d / TOKENIZER_DIR)
    write_code_files(d)


def write_code_files(d: Path) -> None:
    """githash.log, gitdiff.log (the code) and pip_freeze.txt (the versions) into directory `d`."""
    code_dir = Path(__file__).resolve().parents[2]  # the checkout (editable install), else site-packages
    (d / "githash.log").write_text(_git(code_dir, "rev-parse", "HEAD"), encoding="utf-8")
    (d / "gitdiff.log").write_text(_git(code_dir, "diff", "HEAD"), encoding="utf-8")
    versions = {f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()}
    (d / "pip_freeze.txt").write_text("\n".join(sorted(versions, key=str.lower)) + "\n", encoding="utf-8")


def _git(code_dir: Path, *args: str) -> str:
    # installed from a wheel, code_dir is site-packages, which may lie inside some other repository (a .venv in a clone)
    if not (code_dir / "pyproject.toml").is_file():
        return "not a git checkout\n"
    try:
        done = subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "not a git checkout\n"
    return done.stdout if done.returncode == 0 else "not a git checkout\n"
