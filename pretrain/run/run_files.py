"""Provenance files of a run directory: hparams.json, ds_config.json, model_config.json, tokenizer/, and the code and
versions of pretrain/provenance.py (githash.log, gitdiff.log, pip_freeze.txt), written by rank 0 before the first
step."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from wiki2bert_core.config import config_to_dict
from wiki2bert_core.files import write_json
from wiki2bert_core.wordpiece import copy_tokenizer_files
from pretrain.model.model_dir import HPARAMS, TOKENIZER_DIR
from pretrain.model.checkpoint_files import write_model_config
from pretrain.provenance import write_code_files
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
