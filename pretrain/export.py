"""Export a pretraining phase's latest checkpoint as a Hugging Face model directory.

The model's parameter names are those of `transformers.BertForPreTraining`, so the export loads our state dict
into that class and lets `save_pretrained` write `config.json` and `model.safetensors` (it stores the decoder
weight, tied to the word embeddings, once, as `from_pretrained` expects). The model's vocabulary rows are padded to
a multiple of 8 for the GPU; the export keeps exactly the tokenizer's rows (config `vocab_size` == len(tokenizer)),
so no padding row can come out of fill-mask as an empty token. The tokenizer files come from the phase's
`tokenizer/` directory (a copy of the data directory's). The phase directory is read through `pretrain.checkpoint`.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import remove_tree, write_json
from wiki2bert_core.wordpiece import copy_tokenizer_files, read_vocab, special_token_ids
from pretrain import checkpoint
from pretrain.hf_config import hf_config


def export_hf(phase_dir: Path, out_dir: Path) -> Path:
    import transformers

    phase_dir, out_dir = Path(phase_dir), Path(out_dir)
    config = checkpoint.read_model_config(phase_dir)
    tokenizer_dir = phase_dir / "tokenizer"
    vocab = read_vocab(tokenizer_dir / "vocab.txt")
    if len(vocab) > config.vocab_size:
        raise DataError(f"{tokenizer_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's "
                            f"{config.vocab_size}")
    latest = checkpoint.require_latest(phase_dir, "to export")
    state = checkpoint.load_weights(latest)
    model = transformers.BertForPreTraining(hf_config(config, len(vocab), special_token_ids(vocab)["[PAD]"]))
    expected = model.state_dict()
    state = {name: _tokenizer_rows(value, expected[name], config.vocab_size) if name in expected else value
             for name, value in state.items()}
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise DataError(f"{phase_dir}: checkpoint does not match model_config.json "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise DataError(f"{phase_dir}: checkpoint does not match model_config.json ({e})") from None

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    remove_tree(tmp)
    try:
        model.save_pretrained(tmp)
        copy_tokenizer_files(tokenizer_dir, tmp)
        write_json(tmp / "pretraining_config.json", {"model_config": dataclasses.asdict(config),
                                                     "checkpoint": latest.tag})
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        remove_tree(old)
    finally:
        remove_tree(tmp)
    return out_dir


def _tokenizer_rows(value: torch.Tensor, expected: torch.Tensor, padded_vocab_size: int) -> torch.Tensor:
    """A vocabulary-sized tensor (embeddings, decoder weight and bias) cut to the tokenizer's rows."""
    if value.shape[:1] == (padded_vocab_size,) and value.shape[1:] == expected.shape[1:]:
        return value[:expected.shape[0]]
    return value


def fill_mask(model_dir: Path, text: str, top_k: int = 5) -> list[tuple[str, float]]:
    """The top_k tokens (and probabilities) the exported model predicts for the one mask token in `text`, among the
    tokenizer's tokens."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.BertForPreTraining.from_pretrained(str(model_dir)).eval()
    encoded = tokenizer(text, return_tensors="pt")
    positions = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if len(positions) != 1:
        raise ValueError(f"text must contain the mask token {tokenizer.mask_token} exactly once: {text!r}")
    with torch.no_grad():
        logits = model(**encoded).prediction_logits[0, positions[0]]
    probabilities = logits.softmax(-1)
    top = probabilities.topk(min(top_k, len(probabilities)))
    return [(tokenizer.convert_ids_to_tokens(int(i)), float(p)) for p, i in zip(top.values, top.indices)]
