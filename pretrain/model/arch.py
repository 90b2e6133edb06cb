"""The model architectures (`arch`): one `ArchSpec` each, in one registry. An architecture is one folder under
`pretrain/model/` whose `__init__.py` defines `SPEC` (found on first use: every subpackage of pretrain/model that has
one is registered) and holds its model (`model.py`), presets, recipes (`<phase>.yaml`), checks, Hugging Face config
mapping and activation-memory formula. Everything that builds, checks, reads or estimates a model asks here instead
of naming an architecture itself.

No torch here (nor in the folders' `__init__.py`): `pretrain config` runs in a plain install.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from torch import nn

    from pretrain.config import ModelConfig
    from pretrain.model.pretraining import PretrainingModel

DEFAULT_ARCH = "bert"  # TrainConfig.arch's and ModelConfig.arch's default, and that of runs older than the setting


def _no_problem(*_) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    name: str  # ModelConfig.arch, TrainConfig.arch (--set arch=NAME)
    title: str  # the architecture in messages: "BERT"
    model_type: str  # config.json's model_type
    # model size presets: name -> the ModelConfig fields of the shape (TrainConfig.preset)
    presets: dict[str, dict[str, Any]]
    # its model settings that are not the shape, over the ModelConfig defaults
    defaults: dict[str, Any]
    # the ModelConfig fields not every architecture has that this one uses (refused with an arch that lists others
    # and not them; the fields every arch uses are listed by none)
    own_settings: tuple[str, ...]
    phase1_length: int  # the sequence length of its phase-1 recipe; longer sequences are phase 2's
    recipe_dir: Path  # its recipes: <recipe_dir>/<phase>.yaml, what each phase changes from the TrainConfig defaults
    # (config, attention kernel, nsp_head) -> its pretraining model (pretraining.py), imported only when called
    build: Callable[[ModelConfig, str, bool], PretrainingModel]
    # the transformers classes an export is saved as: with the NSP head, and with the masked-LM head alone
    pretraining_class: str
    masked_lm_class: str
    encoder: str  # the prefix of the encoder's parameters in our model (and in transformers' task classes)
    base_model_parts: tuple[str, ...]  # how a bare encoder's (transformers' base model's) parameter names start
    mlm_head: str  # a parameter only the masked-LM head has
    # a parameter only the NSP head has; None: no next-sentence prediction (objective mlm only, and its default)
    nsp_head: str | None
    windows: bool  # whether it has local (windowed) attention layers: the kernels that take a window only
    # (config, vocab rows, pad id, `architectures`, [CLS] id, [SEP] id) -> the transformers config of the model
    to_hf: Callable[..., Any]
    # (a transformers config of model_type, the file it came from) -> our ModelConfig's fields but arch;
    # ConfigError naming the file for a model ours does not compute
    from_hf: Callable[[Any, Path], dict[str, Any]]
    # bytes of activations one layer keeps for backward (pretrain/tools/estimate.py): (config, tokens x hidden size,
    # bytes of a value, autocast, attention score matrices' size over tokens x hidden: 0 if the kernel keeps none)
    layer_activation_bytes: Callable[[ModelConfig, int, int, bool, float], float]
    # a ModelConfig this architecture cannot compute: ValueError (ModelConfig.__post_init__)
    check_model: Callable[[ModelConfig], None] = _no_problem
    # (model, the data's sequence length) -> what is wrong with training it on that data, or None (prepare.py)
    check_data: Callable[[ModelConfig, int], str | None] = _no_problem
    # other config.json model_types it reads (exported as model_type): RoBERTa's for XLM-R, the same model
    other_model_types: tuple[str, ...] = ()

    @property
    def model_types(self) -> tuple[str, ...]:
        return (self.model_type, *self.other_model_types)

    @property
    def default_objective(self) -> str:
        """What a model of this architecture learns when nothing says otherwise (TrainConfig.objective null)."""
        return "mlm+nsp" if self.nsp_head else "mlm"

    def recipe(self, phase: str) -> Path:
        """The phase's recipe: what it changes from the TrainConfig defaults."""
        return self.recipe_dir / f"{phase}.yaml"

    def phase_of_length(self, seq_len: int) -> str:
        """The phase whose recipe trains at `seq_len`."""
        return "phase2" if seq_len > self.phase1_length else "phase1"


_registry: dict[str, ArchSpec] = {}


def register(arch: ArchSpec) -> None:
    """Adds an architecture; ValueError if its name or model_type is taken."""
    _load_folders()
    taken = {model_type for known in _registry.values() for model_type in known.model_types}
    if arch.name in _registry or taken.intersection(arch.model_types):
        raise ValueError(f"arch {arch.name!r} (model_type {', '.join(arch.model_types)}): already registered")
    _registry[arch.name] = arch


def names() -> tuple[str, ...]:
    """The registered architectures: the folders' by name, then those registered later."""
    _load_folders()
    return tuple(_registry)


def spec(name: str) -> ArchSpec:
    """The architecture `name`; ValueError naming the known ones if there is none."""
    _load_folders()
    if name not in _registry:
        raise ValueError(f"unknown arch {name!r} (known: {', '.join(_registry)})")
    return _registry[name]


def of_model_type(model_type: str) -> ArchSpec | None:
    """The architecture of a config.json's model_type (None: not one of ours)."""
    _load_folders()
    return next((a for a in _registry.values() if model_type in a.model_types), None)


def _load_folders() -> None:
    if _registry:
        return
    package = importlib.import_module(__package__)
    for found in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if found.ispkg:
            folder_spec = getattr(importlib.import_module(f"{__package__}.{found.name}"), "SPEC", None)
            if folder_spec is not None:
                _registry[folder_spec.name] = folder_spec


def pretraining_model(config: ModelConfig, attention: str = "mask", nsp_head: bool = True) -> PretrainingModel:
    """The pretraining model of `config`'s arch; `nsp_head` only where the arch has one."""
    return spec(config.arch).build(config, attention, nsp_head)


def export_class(model: PretrainingModel) -> str:
    """The transformers class a pretraining model is exported as (its heads')."""
    arch = spec(model.config.arch)
    return arch.pretraining_class if model.nsp_head else arch.masked_lm_class


def takes_token_types(model: nn.Module) -> bool:
    """Whether a transformers model's forward takes token type ids (BERT's does, ModernBERT's does not)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters
