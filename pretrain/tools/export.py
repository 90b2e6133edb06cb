"""Export a pretraining phase's latest checkpoint as a Hugging Face model directory.

The model's parameter names are those of `transformers.BertForPreTraining` (of `BertForMaskedLM` for a model trained
MLM-only, which has no NSP head), so the export loads our state dict into that class and lets `save_pretrained`
write `config.json` and `model.safetensors` (it stores the decoder weight, tied to the word embeddings, once, as
`from_pretrained` expects). The model's vocabulary rows are padded to
a multiple of 8 for the GPU; the export keeps exactly the tokenizer's rows (config `vocab_size` == len(tokenizer)),
so no padding row can come out of fill-mask as an empty token. The tokenizer files come from the phase's
`tokenizer/` directory (a copy of the data directory's). The phase directory is read through `pretrain.run.checkpoint`.

The export never removes what it did not write: `--out` must not exist, be empty, or be a previous export (its
`pretraining_config.json` and only EXPORT_FILES), which is replaced; anything else only with `force`, and never a
directory that is, holds or lies inside a pretraining run or checkpoint (RUN_FILES), nor the phase directory being
exported or one of its parents. The export is written into a temporary directory renamed into place, so a failure
(a full disk) leaves `--out` as it was.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import remove_tree, write_json
from wiki2bert_core.wordpiece import TOKENIZER_FILES, copy_tokenizer_files, read_vocab, special_token_ids
from pretrain.run import checkpoint
from pretrain.model.hf_config import hf_config
from pretrain.model.hf_weights import NSP_HEAD

PRETRAINING_CONFIG = "pretraining_config.json"
# the names an export writes: save_pretrained's (weights in shards for large models) and ours
EXPORT_FILES = ("config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
                "model.safetensors.index.json", PRETRAINING_CONFIG, *TOKENIZER_FILES)
# names that mark a pretraining run, phase directory or checkpoint
RUN_FILES = (checkpoint.CHECKPOINTS, checkpoint.MODEL_CONFIG, checkpoint.META, checkpoint.MODEL_STATES, "hparams.json",
             "metrics.jsonl")


def export_hf(phase_dir: Path, out_dir: Path, force: bool = False) -> Path:
    """Writes the export into `out_dir`; ConfigError if `out_dir` may not be replaced (see the module's doc), DataError
    if the export cannot be written."""
    import transformers
    from safetensors import SafetensorError

    phase_dir, out_dir = Path(phase_dir), Path(out_dir)
    check_out_dir(phase_dir, out_dir, force)
    config = checkpoint.read_model_config(phase_dir)
    tokenizer_dir = phase_dir / "tokenizer"
    vocab = read_vocab(tokenizer_dir / "vocab.txt")
    if len(vocab) > config.vocab_size:
        raise DataError(f"{tokenizer_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's "
                            f"{config.vocab_size}")
    latest = checkpoint.require_latest(phase_dir, "to export")
    state = checkpoint.load_weights(latest)
    architecture = "BertForPreTraining" if NSP_HEAD in state else "BertForMaskedLM"
    model = getattr(transformers, architecture)(hf_config(config, len(vocab), special_token_ids(vocab)["[PAD]"],
                                                          architecture))
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

    place = Path(os.path.abspath(out_dir))  # has a name and a parent also when out_dir is "."
    place.parent.mkdir(parents=True, exist_ok=True)
    tmp = place.with_name(f".{place.name}.tmp-{os.getpid()}")
    remove_tree(tmp)
    try:
        try:
            model.save_pretrained(tmp)
            copy_tokenizer_files(tokenizer_dir, tmp)
            write_json(tmp / PRETRAINING_CONFIG, {"model_config": dataclasses.asdict(config), "checkpoint": latest.tag})
        except (OSError, SafetensorError) as e:  # SafetensorError: the weights' write failed (a full disk)
            remove_tree(tmp)  # before the free space is measured
            raise DataError(f"{out_dir}: writing the export failed ({e}); "
                            f"{shutil.disk_usage(place.parent).free / 2 ** 30:.1f} GiB free there; {out_dir} is "
                            f"left as it was") from None
        old = place.with_name(f".{place.name}.old-{os.getpid()}")
        if place.exists() or place.is_symlink():
            os.replace(place, old)
        os.replace(tmp, place)
        remove_tree(old)
    finally:
        remove_tree(tmp)
    return out_dir


def check_out_dir(phase_dir: Path, out_dir: Path, force: bool) -> None:
    """ConfigError unless the export may replace `out_dir` (see the module's doc)."""
    out, phase = out_dir.resolve(), phase_dir.resolve()
    never = "export never replaces a pretraining run or checkpoint; choose another --out"
    if out == phase:
        raise ConfigError(f"{out_dir}: is the phase directory being exported; {never}")
    if out in phase.parents:
        raise ConfigError(f"{out_dir}: holds the phase directory being exported; {never}")
    if not out_dir.exists():
        return
    names = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else [out_dir.name]
    foreign = [name for name in names if not any(fnmatch.fnmatchcase(name, pattern) for pattern in EXPORT_FILES)]
    if out_dir.is_dir() and (not names or (PRETRAINING_CONFIG in names and not foreign)):
        return
    run = next((parent for parent in out.parents if any((parent / name).exists() for name in RUN_FILES)), None)
    if run:
        raise ConfigError(f"{out_dir}: lies inside the pretraining run {run}; {never}")
    held = _run_file(out_dir)
    if held:
        raise ConfigError(f"{out_dir}: holds {held}; {never}")
    if not force:
        shown = foreign or names
        listed = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
        what = f"not empty and not an export (it holds {listed})" if out_dir.is_dir() else "a file"
        raise ConfigError(f"{out_dir}: {what}; choose another --out, or pass --force to replace it")


def _run_file(directory: Path) -> Path | None:
    """The first file or directory under `directory` whose name is one of RUN_FILES."""
    for root, dirs, files in os.walk(directory):
        found = sorted(set(RUN_FILES) & set(dirs + files))
        if found:
            return Path(root) / found[0]
    return None


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
    # the export's own class, in which transformers finds every weight it expects and none it does not
    masked_lm = transformers.AutoConfig.from_pretrained(str(model_dir)).architectures == ["BertForMaskedLM"]
    model = (transformers.BertForMaskedLM if masked_lm else transformers.BertForPreTraining).from_pretrained(
        str(model_dir)).eval()
    encoded = tokenizer(text, return_tensors="pt")
    positions = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if len(positions) != 1:
        raise ValueError(f"text must contain the mask token {tokenizer.mask_token} exactly once: {text!r}")
    with torch.no_grad():
        output = model(**encoded)
        logits = (output.logits if masked_lm else output.prediction_logits)[0, positions[0]]
    probabilities = logits.softmax(-1)
    top = probabilities.topk(min(top_k, len(probabilities)))
    return [(tokenizer.convert_ids_to_tokens(int(i)), float(p)) for p, i in zip(top.values, top.indices)]
