"""The model architectures (`arch`), in one table: each one's pretraining model, its Hugging Face model type and
classes, the names of its parts in our state dict (which are transformers'), and the attention kernels it runs with.
Everything that builds or reads a model asks here instead of naming BERT or ModernBERT itself.
"""
from __future__ import annotations

import dataclasses
import inspect

from torch import nn

from pretrain.config import ModelConfig
from pretrain.model.pretraining import PretrainingModel


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str  # ModelConfig.arch
    model_type: str  # config.json's model_type
    # the transformers class an export is saved as: with the NSP head, and with the masked-LM head alone
    pretraining_class: str
    masked_lm_class: str
    encoder: str  # the prefix of the encoder's parameters in our model (and in transformers' task classes)
    base_model_parts: tuple[str, ...]  # how a bare encoder's (transformers' base model's) parameter names start
    mlm_head: str  # a parameter only the masked-LM head has
    nsp_head: str | None  # a parameter only the NSP head has (None: the arch has none)
    windows: bool  # whether it has local (windowed) attention layers: the kernels that take a window only


ARCHITECTURES = {
    "bert": Architecture("bert", "bert", "BertForPreTraining", "BertForMaskedLM", "bert",
                         ("embeddings.", "encoder.", "pooler."), "cls.predictions.transform.dense.weight",
                         "cls.seq_relationship.weight", windows=False),
    "modernbert": Architecture("modernbert", "modernbert", "ModernBertForMaskedLM", "ModernBertForMaskedLM", "model",
                               ("embeddings.", "layers.", "final_norm."), "head.dense.weight", None, windows=True),
}


def architecture(arch: str) -> Architecture:
    return ARCHITECTURES[arch]


def of_model_type(model_type: str) -> Architecture | None:
    """The architecture of a config.json's model_type (None: not one of ours)."""
    return next((a for a in ARCHITECTURES.values() if a.model_type == model_type), None)


def pretraining_model(config: ModelConfig, attention: str = "mask", nsp_head: bool = True) -> PretrainingModel:
    """The pretraining model of `config`'s arch; `nsp_head` only for BERT (ModernBERT has none)."""
    if config.arch == "modernbert":
        from pretrain.model.modernbert import ModernBertForPreTraining

        return ModernBertForPreTraining(config, attention)
    from pretrain.model.bert import BertForPreTraining

    return BertForPreTraining(config, attention, nsp_head)


def export_class(model: nn.Module) -> str:
    """The transformers class a pretraining model is exported as (its heads')."""
    arch = architecture(model.config.arch)
    return arch.pretraining_class if model.nsp_head else arch.masked_lm_class


def takes_token_types(model: nn.Module) -> bool:
    """Whether a transformers model's forward takes token type ids (BERT's does, ModernBERT's does not)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters
