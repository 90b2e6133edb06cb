"""Our ModelConfig <-> transformers' BertConfig, both directions in one place: the export writes a BertConfig, and
`pretrain eval` and `--init` read one back into our model, refusing what our model cannot compute.

Our parameter names are those of `transformers.BertForPreTraining`, so the weights move as they are; the model
computes exact (erf) GELU, absolute position embeddings and no decoder attention, so a config asking for anything
else describes another model.
"""
from __future__ import annotations

from pathlib import Path

from wiki2bert_core.errors import ConfigError, DataError, first_line
from pretrain.config import ModelConfig

# what our model computes; a BertConfig with another value (or, from older transformers, position embeddings of
# another type) describes another model (our decoder is always the word embeddings)
FIXED = {"hidden_act": "gelu", "position_embedding_type": "absolute", "is_decoder": False,
         "add_cross_attention": False, "tie_word_embeddings": True}
# the fields of the same name and meaning in both
SHARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings",
          "type_vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps",
          "initializer_range")


def hf_config(config: ModelConfig, vocab_size: int, pad_token_id: int, architecture: str = "BertForPreTraining"):
    """The transformers.BertConfig of our model with `vocab_size` rows of embeddings (the export keeps only the
    tokenizer's, leaving out the rows that pad the vocabulary to a multiple of 8); `architecture`: BertForMaskedLM
    for a model without the NSP head."""
    import transformers

    return transformers.BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, hidden_act=FIXED["hidden_act"],
                                   tie_word_embeddings=True, architectures=[architecture],
                                   **{name: getattr(config, name) for name in SHARED})


def model_config_of(hf, source: Path) -> ModelConfig:
    """Our ModelConfig for a transformers.BertConfig (read from `source`); ConfigError naming `source` if it
    describes a model ours cannot compute."""
    for name, ours in FIXED.items():
        value = getattr(hf, name, ours)
        if value != ours:
            raise ConfigError(f"{source}: {name} {value!r}, but this BERT computes only {name} {ours!r}")
    try:
        return ModelConfig(vocab_size=hf.vocab_size, pad_token_id=hf.pad_token_id or 0,
                           **{name: getattr(hf, name) for name in SHARED})
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def read_hf_config(path: Path) -> ModelConfig:
    """Our ModelConfig of a Hugging Face BERT directory's config.json `path` (vocab_size: the rows its weights
    have)."""
    import transformers

    try:
        hf = transformers.BertConfig.from_pretrained(str(path))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: not a BERT config ({first_line(e)})") from None
    return model_config_of(hf, path)
