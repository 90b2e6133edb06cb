"""Export a model directory (pretrain/model/model_dir.py: a pretraining phase's latest checkpoint, or a Hugging Face
BERT, ModernBERT or XLM-R directory) as a Hugging Face model directory in our form: one `model.safetensors`, the
tokenizer files, `pretraining_config.json`.

The model's parameter names are those of `transformers.BertForPreTraining` (of `BertForMaskedLM` for a BERT trained
MLM-only, which has no NSP head), of `ModernBertForMaskedLM` or of `XLMRobertaForMaskedLM` (pretrain/model/arch.py),
so the export loads our state dict into that class and lets `save_pretrained` write `config.json` and
`model.safetensors` (it stores the decoder weight, tied to the word embeddings, once, as `from_pretrained` expects).
`AutoModelForMaskedLM` loads any of them. The model's vocabulary rows are padded to
a multiple of 8 for the GPU; the export keeps exactly the tokenizer's rows (config `vocab_size` == len(tokenizer)),
so no padding row can come out of fill-mask as an empty token. The tokenizer files come from the phase's
`tokenizer/` directory (a copy of the data directory's), or from the Hugging Face directory (a hub folder may hold
`tokenizer.json` alone: the export adds the `tokenizer_config.json` and `special_tokens_map.json` AutoTokenizer
needs). The same model gives the same bytes.

The export never removes what it did not write: `--out` must not exist, be empty, or be a previous export (its
`pretraining_config.json` and only EXPORT_FILES), which is replaced; anything else only with `force`, and never a
directory that belongs to something else, holds one or lies inside one (pretrain/out_dirs.py: a run, a phase, a
model, ...), nor the model directory being exported. The export is written into a temporary directory renamed into
place, so a failure (a full disk) leaves `--out` as it was.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import torch

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import read_json, remove_tree, replace_dir, write_json
from wiki2bert_core.wordpiece import (SPECIAL_TOKENS, SPECIAL_TOKENS_FILE, SPECIAL_TOKENS_MAP, TOKENIZER_FILES,
                                      copy_tokenizer_files, names_by_spelling, special_token_ids, special_token_names,
                                      transformers_name)
from pretrain.model.arch import export_class, takes_token_types
from pretrain.model.hf_config import hf_config
from pretrain.model.model_dir import (HF_CONFIG, PRETRAINING_CONFIG, WEIGHT_FILES, WEIGHT_SHARDS, ModelDir,
                                      OurModel, read_our_model)
from pretrain.out_dirs import EXPORT, check_out_dir

# the names an export writes: save_pretrained's (weights in shards for large models) and ours
EXPORT_FILES = (HF_CONFIG, "generation_config.json", *WEIGHT_FILES, *WEIGHT_SHARDS, PRETRAINING_CONFIG,
                *TOKENIZER_FILES)


def export_hf(model_dir: Path, out_dir: Path, force: bool = False, within: Path | None = None) -> Path:
    """Writes the export into `out_dir`; ConfigError if `out_dir` may not be replaced (see the module's doc), DataError
    if the export cannot be written. `within`: the directory of the command that exports (fine-tuning's --out), which
    `out_dir` may lie inside."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    check_export_out_dir(model_dir, out_dir, force, within)
    read = read_our_model(model_dir, "pretrain export", "export")
    tokenizer = read_tokenizer(read.model_dir)
    return write_export(read, export_model(read, tokenizer), tokenizer, out_dir,
                        {"checkpoint": read.checkpoint and read.checkpoint.tag})


class ModelTokenizer(NamedTuple):
    """A model directory's tokenizer as the export reads it (read_tokenizer)."""
    file: Path  # vocab.txt, else tokenizer.json
    vocab: dict[str, int]  # token -> id
    names: dict[str, str]  # role -> the token playing it


def read_tokenizer(model_dir: ModelDir) -> ModelTokenizer:
    """The model directory's tokenizer (ModelDir.vocabulary: a hub folder may hold tokenizer.json alone) and its
    special tokens by role."""
    tokenizer_file, vocab = model_dir.vocabulary("the export would have no tokenizer")
    return ModelTokenizer(tokenizer_file, vocab, _special_names(tokenizer_file, vocab))


def export_model(read: OurModel, tokenizer: ModelTokenizer):
    """transformers' model of the export's class with `read.model`'s weights, the vocabulary cut to the rows of
    `tokenizer` (read_tokenizer's, of `read`)."""
    import transformers

    config = read.model.config
    vocab = tokenizer.vocab
    if len(vocab) > config.vocab_size:
        raise DataError(f"{tokenizer.file}: {len(vocab)} tokens, more than the model's {config.vocab_size}")
    architecture = export_class(read.model)
    special = special_token_ids(vocab, tokenizer.names)
    model = getattr(transformers, architecture)(hf_config(config, len(vocab), special["[PAD]"], architecture,
                                                          special["[CLS]"], special["[SEP]"]))
    expected = model.state_dict()
    state = {name: _tokenizer_rows(value, expected[name], config.vocab_size)
             for name, value in read.model.state_dict().items() if name in expected}
    model.load_state_dict(state, strict=True)
    return model


def write_export(read: OurModel, model, tokenizer: ModelTokenizer, out_dir: Path, provenance: dict) -> Path:
    """Writes `model` (export_model's, of `read`) with `read`'s tokenizer (`tokenizer`, read_tokenizer's) as an export
    into `out_dir`, which the caller checked; `provenance` goes into pretraining_config.json beside the model config.
    DataError if it cannot be written."""
    from safetensors import SafetensorError

    config = read.model.config
    place = Path(os.path.abspath(out_dir))  # has a name and a parent also when out_dir is "."
    place.parent.mkdir(parents=True, exist_ok=True)
    tmp = place.with_name(f".{place.name}.tmp-{os.getpid()}")
    remove_tree(tmp)
    try:
        try:
            model.save_pretrained(tmp)
            copy_tokenizer_files(read.model_dir.tokenizer_dir, tmp)
            _write_tokenizer_config(tmp, config.max_position_embeddings, tokenizer.names)
            write_json(tmp / PRETRAINING_CONFIG, {"model_config": dataclasses.asdict(config), **provenance})
        except (OSError, SafetensorError) as e:  # SafetensorError: the weights' write failed (a full disk)
            remove_tree(tmp)  # before the free space is measured
            raise DataError(f"{out_dir}: writing the export failed ({e}); "
                            f"{shutil.disk_usage(place.parent).free / 2 ** 30:.1f} GiB free there; {out_dir} is "
                            f"left as it was") from None
        replace_dir(tmp, place)
    finally:
        remove_tree(tmp)
    return out_dir


def check_export_out_dir(model_dir: Path, out_dir: Path, force: bool, within: Path | None = None,
                         command: str = "pretrain export") -> None:
    """ConfigError unless the export may replace `out_dir` (see the module's doc); `command` writes it (also
    `pretrain merge`, once for each model it merges)."""
    if out_dir.resolve() == model_dir.resolve():
        raise ConfigError(f"{out_dir}: is a model directory {command} reads; choose another --out")
    check_out_dir(out_dir, command, EXPORT, replaces=True, within=within)
    if not out_dir.exists():
        return
    names = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else [out_dir.name]
    foreign = [name for name in names if not any(fnmatch.fnmatchcase(name, pattern) for pattern in EXPORT_FILES)]
    if out_dir.is_dir() and (not names or (PRETRAINING_CONFIG in names and not foreign)):
        return
    if not force:
        shown = foreign or names
        listed = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
        what = f"not empty and not an export (it holds {listed})" if out_dir.is_dir() else "a file"
        raise ConfigError(f"{out_dir}: {what}; choose another --out, or pass --force to replace it")


def _special_names(tokenizer_file: Path, vocab: dict[str, int]) -> dict[str, str]:
    """role -> the token playing it: as the tokenizer's special_tokens_map.json names it where `vocab` has that
    token, else by its spelling (names_by_spelling: BERT's, else RoBERTa's; a Hugging Face folder with tokenizer.json
    alone); DataError naming the file for a role none of them finds among its tokens."""
    named, by_spelling = special_token_names(tokenizer_file.parent), names_by_spelling(vocab)
    found = {role: named[role] if named.get(role) in vocab else by_spelling.get(role) for role in SPECIAL_TOKENS}
    missing = [transformers_name(role) for role, token in found.items() if token is None]
    if missing:
        raise DataError(f"{tokenizer_file}: no {', no '.join(missing)} among its tokens (by its folder's "
                        f"{SPECIAL_TOKENS_FILE}, else BERT's or RoBERTa's spelling), so the export cannot name its "
                        f"special tokens; add a {SPECIAL_TOKENS_FILE} that names them")
    return found


def _write_tokenizer_config(directory: Path, max_length: int, names: dict[str, str]) -> None:
    """The export's tokenizer_config.json: the tokenizer's own (or, where the model directory has none, one made from
    tokenizer.json: BERT's for a WordPiece model, with its normalizer's casing, else transformers' generic fast
    tokenizer) with the special tokens named (`names`: role -> token) and model_max_length the model's; and
    special_tokens_map.json where the model directory has none. AutoTokenizer takes the tokenizer class and its mask
    token from these files: config.json's model_type names none for ModernBERT."""
    special = {name: names[role] for name, role in SPECIAL_TOKENS_MAP.items()}
    path = directory / "tokenizer_config.json"
    tokenizer = read_json(directory / "tokenizer.json") if (directory / "tokenizer.json").is_file() else None
    if path.is_file():
        settings = read_json(path)
    elif tokenizer is None or (tokenizer.get("model") or {}).get("type") == "WordPiece":
        settings = {"tokenizer_class": "BertTokenizer", **special}
        if tokenizer is not None:
            normalizer = tokenizer.get("normalizer") or {}
            settings.update(do_lower_case=bool(normalizer.get("lowercase")),
                            strip_accents=bool(normalizer.get("strip_accents")))
    else:
        settings = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False, **special}
    write_json(path, {**settings, "model_max_length": max_length})
    if not (directory / SPECIAL_TOKENS_FILE).is_file():
        write_json(directory / SPECIAL_TOKENS_FILE, special)


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
    pretraining = transformers.AutoConfig.from_pretrained(str(model_dir)).architectures == ["BertForPreTraining"]
    model = (transformers.BertForPreTraining if pretraining else transformers.AutoModelForMaskedLM).from_pretrained(
        str(model_dir)).eval()
    encoded = tokenizer(text, return_tensors="pt", return_token_type_ids=takes_token_types(model))
    positions = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    if len(positions) != 1:
        raise ValueError(f"text must contain the mask token {tokenizer.mask_token} exactly once: {text!r}")
    with torch.no_grad():
        output = model(**encoded)
        logits = (output.prediction_logits if pretraining else output.logits)[0, positions[0]]
    probabilities = logits.softmax(-1)
    top = probabilities.topk(min(top_k, len(probabilities)))
    return [(tokenizer.convert_ids_to_tokens(int(i)), float(p)) for p, i in zip(top.values, top.indices)]

