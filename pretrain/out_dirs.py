"""Where a `pretrain` command may write: one rule for every --out (phase1/phase2, export, finetune, plot), so that
no command writes into a directory that belongs to something else.

A directory belongs to (`owner`, the first that fits):
    a pretraining phase     model_dir.is_phase_dir: model_config.json or checkpoints/
    a pretraining run       a phase directory phase1/ or phase2/ in it (`pretrain phase1 --out`)
    an export               config.json and pretraining_config.json (`pretrain export --out`)
    a Hugging Face model    config.json (saved by transformers)
    a data variant          variant.json (the hdf5 stage's output, wiki2bert_core/variant_dir.py)
    fine-tuning results     settings.json and finetune.log (`pretrain finetune --out`)
    a pipeline stage        _manifest.json (wiki2bert_core/files.py MANIFEST: a stage's finished directory)
    a pipeline work dir     <workdir>/<lang>/: the lock of wiki2bert_core/dir_lock.py and stage directories
A command's --out may be a new directory, one that belongs to nothing, or one of the kind the command writes (a run
directory, a previous export, earlier fine-tuning results); never a directory of another kind, nor one inside a
directory of any kind but a run directory, which holds its phases and beside them exports and plots (`plot` writes
into the run or phase directory it plots: RUN_DIR/plots). A command that replaces its --out as a whole (export) also
refuses one that holds a directory of any kind. Each refusal is one line, exit 2.
"""
from __future__ import annotations

import os
from pathlib import Path

from wiki2bert_core.dir_lock import LOCK_NAME
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import MANIFEST
from wiki2bert_core.variant_dir import PARAMS_FILE
from pretrain.config import PHASES
from pretrain.finetune.results_dir import LOG_FILE, SETTINGS_FILE
from pretrain.model.model_dir import HF_CONFIG, PRETRAINING_CONFIG, is_phase_dir

PHASE = "pretraining phase directory"
RUN = "pretraining run directory"
EXPORT = "model directory written by `pretrain export`"
MODEL = "Hugging Face model directory"
VARIANT = "data variant directory"
FINETUNE = "directory of fine-tuning results"
STAGE = "pipeline stage directory"
PIPELINE = "pipeline work directory"


def owner(directory: Path) -> str | None:
    """What `directory` belongs to (one of the kinds above), None if nothing."""
    directory = Path(directory)
    if is_phase_dir(directory):
        return PHASE
    if any(is_phase_dir(directory / phase) for phase in PHASES):
        return RUN
    if (directory / HF_CONFIG).is_file():
        return EXPORT if (directory / PRETRAINING_CONFIG).is_file() else MODEL
    if (directory / PARAMS_FILE).is_file():
        return VARIANT
    if (directory / SETTINGS_FILE).is_file() and (directory / LOG_FILE).is_file():
        return FINETUNE
    if (directory / MANIFEST).is_file():
        return STAGE
    if (directory / LOCK_NAME).is_file() and any((child / MANIFEST).is_file() for child in directory.iterdir()):
        return PIPELINE
    return None


def check_out_dir(out: Path, command: str, writes: str | None, replaces: bool = False,
                  within: Path | None = None) -> None:
    """ConfigError (one line) unless `command` may write into `out` (the module's rule): `writes` is the kind it
    writes (None: a plain directory), `replaces` that it replaces `out` as a whole, `within` a directory `out` may lie
    inside whatever it is (the run `plot` plots)."""
    out = Path(out)
    refusal = f"which {command} --out never {'replaces' if replaces else 'writes into'}; choose another --out"
    if out.exists() and not out.is_dir():
        if replaces:
            return  # a file is replaced like a directory of no kind (export: only with --force)
        raise ConfigError(f"{out}: is a file, not a directory; choose another --out")
    file = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if file is not None:
        raise ConfigError(f"{out}: {file} is a file, not a directory; choose another --out")
    kind = owner(out) if out.is_dir() else None
    if kind is not None and kind != writes:
        raise ConfigError(f"{out}: is a {kind}, {refusal}")
    place = out.resolve()
    stop = Path(within).resolve() if within is not None else None
    for parent in place.parents:
        if parent == stop:
            break
        kind = owner(parent)
        if kind is not None and kind != RUN:
            raise ConfigError(f"{out}: lies inside the {kind} {parent}, {refusal}")
    if replaces and out.is_dir():
        for root, dirs, _ in os.walk(out):
            for name in sorted(dirs):
                kind = owner(Path(root) / name)
                if kind is not None:
                    raise ConfigError(f"{out}: holds the {kind} {Path(root) / name}, {refusal}")
