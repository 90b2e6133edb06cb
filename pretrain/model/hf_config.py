"""Our ModelConfig <-> transformers' BertConfig and ModernBertConfig, both directions in one place: the export writes
the config of the model's arch, and `pretrain eval` and `--init` read one back into our model, refusing what our
model cannot compute.

Our parameter names are those of `transformers.BertForPreTraining` and `ModernBertForMaskedLM`, so the weights move
as they are. Our BERT computes exact (erf) GELU, absolute position embeddings and no decoder attention; our
ModernBERT exact GELU in its GeGLU and head, no biases but the decoder's, default RoPE in both kinds of layer, and
a global layer every `global_attn_every_n_layers`-th from the first: a config asking for anything else describes
another model.
"""
from __future__ import annotations

from pathlib import Path

from wiki2bert_core.errors import ConfigError, DataError, first_line
from pretrain.config import ModelConfig
from pretrain.model.architectures import ARCHITECTURES, architecture, of_model_type

# what our BERT computes; a BertConfig with another value (or, from older transformers, position embeddings of
# another type) describes another model (our decoder is always the word embeddings)
FIXED = {"hidden_act": "gelu", "position_embedding_type": "absolute", "is_decoder": False,
         "add_cross_attention": False, "tie_word_embeddings": True}
# the fields of the same name and meaning in both
SHARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings",
          "type_vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps",
          "initializer_range")
# what our ModernBERT computes, and its fields of the same name and meaning
MODERNBERT_FIXED = {"hidden_activation": "gelu", "classifier_activation": "gelu", "norm_bias": False,
                    "attention_bias": False, "mlp_bias": False, "decoder_bias": True, "tie_word_embeddings": True,
                    "initializer_cutoff_factor": 2.0}
MODERNBERT_SHARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "initializer_range", "local_attention")
# transformers' layer types, and the fine-tuning classes' pooling (ModernBERT's published models': the mean of the
# tokens, which an MLM-only model suits better than its [CLS] alone)
GLOBAL, LOCAL = "full_attention", "sliding_attention"
CLASSIFIER_POOLING = "mean"


def hf_config(config: ModelConfig, vocab_size: int, pad_token_id: int, architecture_name: str | None = None,
              cls_token_id: int | None = None, sep_token_id: int | None = None):
    """The transformers config of our model with `vocab_size` rows of embeddings (the export keeps only the
    tokenizer's, leaving out the rows that pad the vocabulary to a multiple of 8); `architecture_name`: the class
    it is saved as (default: the arch's with every head; BertForMaskedLM for a BERT without the NSP head).
    ModernBERT needs the ids of [CLS] and [SEP] too."""
    import transformers

    arch = architecture(config.arch)
    architectures = [architecture_name or arch.pretraining_class]
    if config.arch == "bert":
        return transformers.BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id,
                                       hidden_act=FIXED["hidden_act"], tie_word_embeddings=True,
                                       architectures=architectures, **{name: getattr(config, name) for name in SHARED})
    if cls_token_id is None or sep_token_id is None:
        raise ValueError("a ModernBERT config needs the ids of [CLS] and [SEP]")
    return transformers.ModernBertConfig(
        vocab_size=vocab_size, pad_token_id=pad_token_id, cls_token_id=cls_token_id, sep_token_id=sep_token_id,
        bos_token_id=cls_token_id, eos_token_id=sep_token_id, architectures=architectures,
        layer_types=[GLOBAL if config.is_global_layer(i) else LOCAL for i in range(config.num_hidden_layers)],
        rope_parameters={GLOBAL: {"rope_type": "default", "rope_theta": config.global_rope_theta},
                         LOCAL: {"rope_type": "default", "rope_theta": config.local_rope_theta}},
        norm_eps=config.layer_norm_eps, embedding_dropout=config.hidden_dropout_prob,
        mlp_dropout=config.hidden_dropout_prob, attention_dropout=config.attention_probs_dropout_prob,
        classifier_pooling=CLASSIFIER_POOLING, **MODERNBERT_FIXED,
        **{name: getattr(config, name) for name in MODERNBERT_SHARED})


def model_config_of(hf, source: Path) -> ModelConfig:
    """Our ModelConfig for a transformers.BertConfig or ModernBertConfig (read from `source`); ConfigError naming
    `source` if it describes a model ours cannot compute."""
    is_modernbert = hf.model_type == "modernbert"
    for name, ours in (MODERNBERT_FIXED if is_modernbert else FIXED).items():
        value = getattr(hf, name, ours)
        if value != ours:
            raise ConfigError(f"{source}: {name} {value!r}, but this {'ModernBERT' if is_modernbert else 'BERT'} "
                              f"computes only {name} {ours!r}")
    try:
        if not is_modernbert:
            return ModelConfig(vocab_size=hf.vocab_size, pad_token_id=hf.pad_token_id or 0,
                               **{name: getattr(hf, name) for name in SHARED})
        return ModelConfig(arch="modernbert", vocab_size=hf.vocab_size, pad_token_id=hf.pad_token_id or 0,
                           layer_norm_eps=hf.norm_eps, hidden_dropout_prob=_one_dropout(hf, source),
                           attention_probs_dropout_prob=hf.attention_dropout,
                           global_attn_every_n_layers=_global_every(hf.layer_types, source),
                           global_rope_theta=_rope_theta(hf, GLOBAL, source),
                           local_rope_theta=_rope_theta(hf, LOCAL, source),
                           **{name: getattr(hf, name) for name in MODERNBERT_SHARED})
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def _global_every(layer_types: list[str], source: Path) -> int:
    """n such that layers 0, n, 2n, ... are the global ones (with layer 0 alone global, any n from the number of
    layers up does: ModernBERT's 3 where it fits); ConfigError for another pattern."""
    global_layers = [i for i, kind in enumerate(layer_types) if kind == GLOBAL]
    default = ModelConfig.__dataclass_fields__["global_attn_every_n_layers"].default
    every = global_layers[1] if len(global_layers) > 1 else max(len(layer_types), default)
    if [kind == GLOBAL for kind in layer_types] != [i % every == 0 for i in range(len(layer_types))]:
        raise ConfigError(f"{source}: layer_types {layer_types}: this ModernBERT computes a global layer every n-th "
                          f"from the first, the others {LOCAL}")
    return every


def _rope_theta(hf, layer_type: str, source: Path) -> float:
    rope = hf.rope_parameters[layer_type]
    if rope.get("rope_type", "default") != "default":
        raise ConfigError(f"{source}: rope_type {rope['rope_type']!r} in the {layer_type} layers, but this "
                          f"ModernBERT computes only the default RoPE")
    return float(rope["rope_theta"])


def _one_dropout(hf, source: Path) -> float:
    """Our one dropout on the embeddings and the feed-forward output: their two in transformers must agree."""
    if hf.embedding_dropout != hf.mlp_dropout:
        raise ConfigError(f"{source}: embedding_dropout {hf.embedding_dropout} and mlp_dropout {hf.mlp_dropout} "
                          f"differ; this ModernBERT has one dropout for both (set them equal)")
    return float(hf.mlp_dropout)


def read_hf_config(path: Path) -> ModelConfig:
    """Our ModelConfig of a Hugging Face BERT or ModernBERT directory's config.json `path` (vocab_size: the rows its
    weights have)."""
    import transformers

    try:
        hf = transformers.AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a model config ({first_line(e)})") from None
    if of_model_type(hf.model_type) is None:
        raise ConfigError(f"{path}: model_type {hf.model_type!r}, but our models are "
                          f"{', '.join(a.model_type for a in ARCHITECTURES.values())}")
    return model_config_of(hf, path)
