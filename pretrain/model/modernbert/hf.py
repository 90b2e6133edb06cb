"""Our ModernBERT's ModelConfig <-> transformers' ModernBertConfig, both directions. Our ModernBERT computes exact
GELU in its GeGLU and head, no biases but the decoder's, default RoPE in both kinds of layer, and a global layer
every `global_attn_every_n_layers`-th from the first: a config asking for anything else describes another model."""
from __future__ import annotations

from pathlib import Path

from wiki2bert_core.errors import ConfigError
from pretrain.config import ModelConfig

# what our ModernBERT computes, and its fields of the same name and meaning
FIXED = {"hidden_activation": "gelu", "classifier_activation": "gelu", "norm_bias": False,
         "attention_bias": False, "mlp_bias": False, "decoder_bias": True, "initializer_cutoff_factor": 2.0}
SHARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "max_position_embeddings", "initializer_range", "local_attention", "tie_word_embeddings")
# transformers' layer types, and the fine-tuning classes' pooling (ModernBERT's published models': the mean of the
# tokens, which an MLM-only model suits better than its [CLS] alone)
GLOBAL, LOCAL = "full_attention", "sliding_attention"
CLASSIFIER_POOLING = "mean"


def to_hf(config, vocab_size: int, pad_token_id: int, architectures: list[str], cls_token_id: int | None = None,
          sep_token_id: int | None = None):
    import transformers

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
        classifier_pooling=CLASSIFIER_POOLING, **FIXED, **{name: getattr(config, name) for name in SHARED})


def from_hf(hf, source: Path) -> dict:
    for name, ours in FIXED.items():
        value = getattr(hf, name, ours)
        if value != ours:
            raise ConfigError(f"{source}: {name} {value!r}, but this ModernBERT computes only {name} {ours!r}")
    return dict(vocab_size=hf.vocab_size, pad_token_id=hf.pad_token_id or 0, layer_norm_eps=hf.norm_eps,
                hidden_dropout_prob=_one_dropout(hf, source), attention_probs_dropout_prob=hf.attention_dropout,
                global_attn_every_n_layers=_global_every(hf.layer_types, source),
                global_rope_theta=_rope_theta(hf, GLOBAL, source), local_rope_theta=_rope_theta(hf, LOCAL, source),
                **{name: getattr(hf, name) for name in SHARED})


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
