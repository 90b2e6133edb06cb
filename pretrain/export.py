"""Export a pretraining phase's latest checkpoint as a Hugging Face model directory.

The model's parameter names are those of `transformers.BertForPreTraining`, so the export loads our state dict
into that class and lets `save_pretrained` write `config.json` and `model.safetensors` (it stores the decoder
weight, tied to the word embeddings, once, as `from_pretrained` expects). The tokenizer files come from the phase's
`tokenizer/` directory (a copy of the `vocab` stage's).

Checkpoint layout of a phase directory: `model_config.json` (ModelConfig), `tokenizer/`,
`checkpoints/latest` (the tag) and `checkpoints/<tag>/` (DeepSpeed's save_checkpoint). With ZeRO the fp32 master
weights are in the optimizer shards and are consolidated with DeepSpeed's zero_to_fp32; otherwise the weights
are the module state (with DeepSpeed's own bf16/fp16 optimizer and no ZeRO, those are the 16-bit weights the model
trained with, widened to fp32).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
from pathlib import Path

import torch

from core.errors import PipelineError
from core.fileio import remove_tree, write_json
from core.wordpiece import read_vocab, special_token_ids
from pretrain.checkpoint import LATEST, checkpoint_dir
from pretrain.model import ModelConfig

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
MODEL_STATES = "mp_rank_00_model_states.pt"


def load_model_config(phase_dir: Path) -> ModelConfig:
    path = Path(phase_dir) / "model_config.json"
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
        return ModelConfig(**fields)
    except FileNotFoundError:
        raise PipelineError(f"{path}: not found (is {phase_dir} a pretraining phase directory?)") from None
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise PipelineError(f"{path}: not a model config ({e})") from None


def latest_checkpoint(phase_dir: Path) -> tuple[Path, str]:
    """(the checkpoints directory, the tag `latest` names); PipelineError if there is no complete checkpoint."""
    checkpoints = checkpoint_dir(phase_dir)
    latest = checkpoints / LATEST
    if not latest.is_file():
        raise PipelineError(f"{phase_dir}: no checkpoint to export ({latest} not found)")
    tag = latest.read_text(encoding="utf-8").strip()
    if not tag or not (checkpoints / tag).is_dir():
        raise PipelineError(f"{latest}: names checkpoint {tag!r}, which does not exist")
    return checkpoints, tag


def load_checkpoint_weights(checkpoints: Path, tag: str) -> dict[str, torch.Tensor]:
    """The fp32 model state dict of checkpoint `tag` (DeepSpeed's save_checkpoint(checkpoints, tag))."""
    tag_dir = checkpoints / tag
    if any(tag_dir.glob("zero_pp_rank_*_optim_states.pt")):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
            try:
                state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoints), tag)
            except (FileNotFoundError, ValueError) as e:
                raise PipelineError(f"{tag_dir}: cannot consolidate the ZeRO checkpoint ({e})") from None
    else:
        path = tag_dir / MODEL_STATES
        if not path.is_file():
            raise PipelineError(f"{tag_dir}: no {MODEL_STATES} (incomplete checkpoint?)")
        # DeepSpeed's checkpoint holds more than tensors (config, client state), hence weights_only=False
        state = torch.load(path, map_location="cpu", weights_only=False)["module"]
    return {name: t.float() for name, t in state.items()}


def hf_config(config: ModelConfig, pad_token_id: int):
    import transformers

    return transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads, intermediate_size=config.intermediate_size,
        hidden_act="gelu", hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        initializer_range=config.initializer_range, layer_norm_eps=config.layer_norm_eps,
        pad_token_id=pad_token_id, tie_word_embeddings=True, architectures=["BertForPreTraining"])


def export_hf(phase_dir: Path, out_dir: Path) -> Path:
    import transformers

    phase_dir, out_dir = Path(phase_dir), Path(out_dir)
    config = load_model_config(phase_dir)
    tokenizer_dir = phase_dir / "tokenizer"
    vocab = read_vocab(tokenizer_dir / "vocab.txt")
    if len(vocab) > config.vocab_size:
        raise PipelineError(f"{tokenizer_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's "
                            f"{config.vocab_size}")
    checkpoints, tag = latest_checkpoint(phase_dir)
    state = load_checkpoint_weights(checkpoints, tag)
    model = transformers.BertForPreTraining(hf_config(config, special_token_ids(vocab)["[PAD]"]))
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise PipelineError(f"{phase_dir}: checkpoint does not match model_config.json "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise PipelineError(f"{phase_dir}: checkpoint does not match model_config.json ({e})") from None

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    remove_tree(tmp)
    try:
        model.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if (tokenizer_dir / name).is_file():
                shutil.copy2(tokenizer_dir / name, tmp / name)
        write_json(tmp / "pretraining_config.json", {"model_config": dataclasses.asdict(config), "checkpoint": tag})
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        remove_tree(old)
    finally:
        remove_tree(tmp)
    return out_dir


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
    # the model's vocabulary is padded to a multiple of 8: the padding rows are no tokens
    probabilities = logits[:len(tokenizer)].softmax(-1)
    top = probabilities.topk(min(top_k, len(probabilities)))
    return [(tokenizer.convert_ids_to_tokens(int(i)), float(p)) for p, i in zip(top.values, top.indices)]
