"""Weights into our model: those of a Hugging Face BERT, XLM-R/RoBERTa or ModernBERT directory (an export, or any local
BERT saved as BertForPreTraining, BertForMaskedLM, BertModel, ..., an XLMRobertaForMaskedLM, RobertaForMaskedLM or
XLMRobertaModel, a ModernBertForMaskedLM or ModernBertModel), read under our names, and any state dict of our names
loaded where it fits (`--init`, `pretrain eval`, `pretrain export`).

A weights file (pretrain/model/model_dir.py finds it) is read as stored: `model.safetensors` or `pytorch_model.bin`, or
the shards an `.index.json` names. Our parameter names are those of transformers' BertForPreTraining,
XLMRobertaForMaskedLM and ModernBertForMaskedLM, so most names are kept; a bare base model's (BertModel's and
XLMRobertaModel's `embeddings.*`, `encoder.*`, `pooler.*`; ModernBertModel's `embeddings.*`, `layers.*`, `final_norm.*`)
get the encoder's prefix (`bert.`, `roberta.`, `model.`: arch.py), and the LayerNorm `gamma`/`beta` of older BERT
checkpoints become `weight`/`bias`. Loading copies each tensor into the parameter of its name (a tied parameter under
either of its names) and says which parameters none came for (a head the directory does not hold: left as our model
initialised it) and which tensors fit nothing (a task head, a head the model leaves out). A directory's vocabulary rows
(the tokenizer's, as the export keeps them) fill the first rows of ours, which pads the vocabulary to a multiple of 8
(wiki2bert_core/wordpiece.py: padded_vocab_size).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, DataError, first_line
from pretrain.model.arch import ArchSpec

INDEX_SUFFIX = ".index.json"  # a shard index: {"weight_map": {tensor name: shard file name}}
_LEGACY = {".gamma": ".weight", ".beta": ".bias"}


def tensor_names(weights_file: Path, arch: ArchSpec) -> set[str]:
    """Our names of the tensors of a weights file (or of the shards its index names) of a model of `arch`, read
    without their values."""
    if weights_file.name.endswith(INDEX_SUFFIX):
        return {our_name(name, arch) for name in _index(weights_file)}
    return set(_read(weights_file, arch, values=False))


def read_tensors(weights_file: Path, arch: ArchSpec) -> dict[str, torch.Tensor]:
    """The tensors of a weights file (or of the shards its index names) of a model of `arch` under our names;
    DataError naming the file if one does not load."""
    if weights_file.name.endswith(INDEX_SUFFIX):
        state = {}
        for shard in shard_files(weights_file):
            state.update(_read(shard, arch))
        return state
    return _read(weights_file, arch)


def shard_files(index_file: Path) -> list[Path]:
    """The shards a shard index names, in name order."""
    return [index_file.parent / name for name in sorted(set(_index(index_file).values()))]


def our_name(name: str, arch: ArchSpec) -> str:
    if name.startswith(arch.base_model_parts):
        name = f"{arch.encoder}.{name}"
    return next((name.removesuffix(old) + new for old, new in _LEGACY.items() if name.endswith(old)), name)


def _index(path: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a shard index ({first_line(e)})") from None
    return weight_map


def _read(path: Path, arch: ArchSpec, values: bool = True) -> dict[str, torch.Tensor | None]:
    from safetensors import SafetensorError, safe_open

    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as f:
                return {our_name(name, arch): f.get_tensor(name) if values else None for name in f.keys()}
        state = torch.load(path, map_location="cpu", weights_only=True)
        return {our_name(name, arch): value if values else None for name, value in state.items()}
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (named by the shard index)") from None
    except (OSError, SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise DataError(f"{path}: cannot load the weights ({first_line(e)}); the file is damaged or "
                        f"incomplete, export it again") from None


def match_names(model, names: set[str]) -> tuple[list[str], list[str]]:
    """Which parameters of `model` (a pretraining model) tensors of these names (ours) would fill: the names of those
    none would fill (one name per tied group) and of the tensors nothing would take."""
    groups: dict[int, list[str]] = {}  # a tied parameter appears under each of its names
    for name, target in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(target), []).append(name)
    fresh = [group[0] for group in groups.values() if not any(name in names for name in group)]
    taken = {name for group in groups.values() for name in group}
    return fresh, sorted(names - taken)


def load_matching(model, state: dict[str, torch.Tensor], source: Path) -> tuple[list[str], list[str]]:
    """Copies `state` (our names) into `model` (a pretraining model); returns match_names' lists. DataError naming
    `source` if a tensor's shape does not fit its parameter."""
    targets = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, value in state.items():
            target = targets.get(name)
            if target is None:
                continue
            if value.shape == target.shape:
                target.copy_(value)
            elif value.dim() and value.shape[1:] == target.shape[1:] and \
                    value.shape[0] < target.shape[0] == model.config.vocab_size:
                target[:value.shape[0]].copy_(value)  # the tokenizer's rows of our padded vocabulary
            else:
                raise DataError(f"{source}: {name} has shape {tuple(value.shape)}, but the model's config gives "
                                f"{tuple(target.shape)}")
    return match_names(model, set(state))


def module_names(names: list[str]) -> list[str]:
    """The modules that hold these parameters, for a log line: cls.seq_relationship.weight -> cls.seq_relationship."""
    return sorted({name.rpartition(".")[0] or name for name in names})


def init_new_rows(model, new_token_pieces: dict[int, list[int]]) -> None:
    """Each new token's row of the vocabulary's tensors (the input embeddings, the masked-LM decoder's weight, unless
    tied to them, and bias) set to the mean of the rows of the pieces the original tokenizer splits it into
    (prepare.py: Run.new_token_pieces): the initialisation of IndoBERTweet (Koto et al., 2021) and of Fast Vocabulary
    Transfer (Gee et al., 2022), which keeps a new token's first predictions near those of its pieces."""
    from torch import nn

    tensors = {}
    for name, module in model.named_modules():
        if (isinstance(module, nn.Embedding) and name.endswith(("word_embeddings", "tok_embeddings"))) or \
                (isinstance(module, nn.Linear) and name.endswith("decoder")):
            tensors |= {id(t): t for t in (module.weight, getattr(module, "bias", None)) if t is not None}
    with torch.no_grad():
        for tensor in tensors.values():
            for new, pieces in new_token_pieces.items():
                tensor[new] = tensor[pieces].mean(0)

