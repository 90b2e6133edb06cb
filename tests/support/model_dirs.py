"""Model directories of every kind pretrain/model/model_dir.py tells apart, written by hand or by transformers: a phase
directory (its checkpoint as DeepSpeed saves one without ZeRO) and Hugging Face directories (whole or in shards)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from wiki2bert_core.wordpiece import write_tokenizer_dir


def write_phase_dir(phase_dir: Path, model, tokens: list[str], tag: str = "global_step7") -> Path:
    """The layout the training loop writes for `model` (our BertForPreTraining), with a checkpoint as DeepSpeed saves
    one without ZeRO, and a tokenizer of `tokens`."""
    (phase_dir / "checkpoints" / tag).mkdir(parents=True)
    (phase_dir / "model_config.json").write_text(json.dumps(dataclasses.asdict(model.config)))
    (phase_dir / "tokenizer").mkdir()
    write_tokenizer_dir(phase_dir / "tokenizer", tokens, lowercase=True)
    torch.save({"module": model.state_dict(), "global_steps": 7},
               phase_dir / "checkpoints" / tag / "mp_rank_00_model_states.pt")
    (phase_dir / "checkpoints" / tag / "meta.json").write_text(json.dumps({"tag": tag, "step": 7, "world_size": 1}))
    (phase_dir / "checkpoints" / "latest").write_text(tag)
    return phase_dir


def write_hugging_face_dir(path: Path, model, tokens: list[str], **save) -> Path:
    """`model` (a transformers model) as save_pretrained writes it (`save`: its options, e.g. max_shard_size), with a
    tokenizer of `tokens`."""
    model.save_pretrained(path, **save)
    write_tokenizer_dir(path, tokens)
    return path
