"""Our BERT's ModelConfig <-> transformers' BertConfig, both directions. Our BERT computes exact (erf) GELU, absolute
position embeddings and no decoder attention: a config asking for anything else describes another model."""
from __future__ import annotations

from pathlib import Path

from wiki2bert_core.errors import ConfigError

# what our BERT computes; a BertConfig with another value (or, from older transformers, position embeddings of
# another type) describes another model
FIXED = {"hidden_act": "gelu", "position_embedding_type": "absolute", "is_decoder": False,
         "add_cross_attention": False}
# the fields of the same name and meaning in both
SHARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings",
          "type_vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps",
          "initializer_range", "tie_word_embeddings")


def config_fields(config, vocab_size: int, pad_token_id: int, architectures: list[str]) -> dict:
    """The BertConfig fields of our model (those of any config class with BertConfig's fields)."""
    return dict(vocab_size=vocab_size, pad_token_id=pad_token_id, hidden_act=FIXED["hidden_act"],
                architectures=architectures,
                **{name: getattr(config, name) for name in SHARED})


def to_hf(config, vocab_size: int, pad_token_id: int, architectures: list[str], cls_token_id: int | None = None,
          sep_token_id: int | None = None):
    import transformers

    return transformers.BertConfig(**config_fields(config, vocab_size, pad_token_id, architectures))


def from_hf(hf, source: Path) -> dict:
    for name, ours in FIXED.items():
        value = getattr(hf, name, ours)
        if value != ours:
            raise ConfigError(f"{source}: {name} {value!r}, but this BERT computes only {name} {ours!r}")
    return dict(vocab_size=hf.vocab_size, pad_token_id=hf.pad_token_id or 0,
                **{name: getattr(hf, name) for name in SHARED})
