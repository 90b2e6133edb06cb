"""Weights into our model: those of a Hugging Face BERT directory (an export, or any local BERT saved as
BertForPreTraining, BertForMaskedLM, BertModel, ...), read under our names, and any state dict of our names loaded
where it fits (`--init`, `pretrain eval`).

The files are read as stored: `model.safetensors` or `pytorch_model.bin`, or their shards through the `.index.json`.
Our parameter names are those of transformers' BertForPreTraining, so most names are kept; a bare BertModel's
(`embeddings.*`, `encoder.*`, `pooler.*`) get the `bert.` prefix, and the LayerNorm `gamma`/`beta` of older
checkpoints become `weight`/`bias`. Loading copies each tensor into the parameter of its name (a tied parameter under
either of its names) and says which parameters none came for (a head the directory does not hold: left as our model
initialised it) and which tensors fit nothing (a task head, a head the model leaves out). A directory's vocabulary
rows (the tokenizer's, as the export keeps them) fill the first rows of ours, which pads the vocabulary to a
multiple of 8 (wiki2bert_core/wordpiece.py: padded_vocab_size).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, DataError, first_line

# in the order transformers looks for them
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
NSP_HEAD = "cls.seq_relationship.weight"
MLM_HEAD = "cls.predictions.transform.dense.weight"
_BASE_MODEL = ("embeddings.", "encoder.", "pooler.")
_LEGACY = {".gamma": ".weight", ".beta": ".bias"}


def weights_file(model_dir: Path) -> Path:
    """The directory's weights file (or shard index); ConfigError if it has none."""
    found = next((Path(model_dir) / name for name in WEIGHT_FILES if (Path(model_dir) / name).is_file()), None)
    if found is None:
        raise ConfigError(f"{model_dir}: no weights ({', '.join(WEIGHT_FILES)})")
    return found


def weight_names(model_dir: Path) -> set[str]:
    """Our names of the directory's tensors, read without their values."""
    path = weights_file(model_dir)
    if path.name.endswith(".index.json"):
        return {our_name(name) for name in _index(path)}
    return set(_read(path, values=False))


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """The directory's tensors under our names; DataError naming the file if one does not load."""
    path = weights_file(model_dir)
    if path.name.endswith(".index.json"):
        state = {}
        for shard in sorted(set(_index(path).values())):
            state.update(_read(path.parent / shard))
        return state
    return _read(path)


def our_name(name: str) -> str:
    if name.startswith(_BASE_MODEL):
        name = f"bert.{name}"
    return next((name.removesuffix(old) + new for old, new in _LEGACY.items() if name.endswith(old)), name)


def _index(path: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a shard index ({first_line(e)})") from None
    return weight_map


def _read(path: Path, values: bool = True) -> dict[str, torch.Tensor | None]:
    from safetensors import SafetensorError, safe_open

    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as f:
                return {our_name(name): f.get_tensor(name) if values else None for name in f.keys()}
        state = torch.load(path, map_location="cpu", weights_only=True)
        return {our_name(name): value if values else None for name, value in state.items()}
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (named by the shard index)") from None
    except (OSError, SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise DataError(f"{path}: cannot load the weights ({first_line(e)}); the file is damaged or "
                        f"incomplete, export it again") from None


def load_matching(model, state: dict[str, torch.Tensor], source: Path) -> tuple[list[str], list[str]]:
    """Copies `state` (our names) into `model` (a BertForPreTraining); returns the names of the parameters none came
    for and of the tensors nothing took. DataError naming `source` if a tensor's shape does not fit its parameter."""
    groups: dict[int, list[str]] = {}  # a tied parameter appears under each of its names
    targets = model.state_dict(keep_vars=True)
    for name, target in targets.items():
        groups.setdefault(id(target), []).append(name)
    fresh, taken = [], set()
    with torch.no_grad():
        for names in groups.values():
            name = next((n for n in names if n in state), None)
            if name is None:
                fresh.append(names[0])
                continue
            target, value = targets[name], state[name]
            taken.update(n for n in names if n in state)
            if value.shape == target.shape:
                target.copy_(value)
            elif value.dim() and value.shape[1:] == target.shape[1:] and \
                    value.shape[0] < target.shape[0] == model.config.vocab_size:
                target[:value.shape[0]].copy_(value)  # the tokenizer's rows of our padded vocabulary
            else:
                raise DataError(f"{source}: {name} has shape {tuple(value.shape)}, but the model's config gives "
                                f"{tuple(target.shape)}")
    return fresh, sorted(set(state) - taken)


def module_names(names: list[str]) -> list[str]:
    """The modules that hold these parameters, for a log line: cls.seq_relationship.weight -> cls.seq_relationship."""
    return sorted({name.rpartition(".")[0] or name for name in names})
