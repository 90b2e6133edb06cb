"""Our ModelConfig <-> transformers' config of its arch, both directions, each arch's mapping in its folder
(pretrain/model/<arch>/hf.py): the export writes the config of the model's arch, and `pretrain eval` and `--init`
read one back into our model, refusing what our model cannot compute. Our parameter names are those of the arch's
transformers classes, so the weights move as they are."""
from __future__ import annotations

from pathlib import Path

from wiki2bert_core.errors import ConfigError, DataError, first_line
from pretrain.config import ModelConfig
from pretrain.model.arch import names, of_model_type, spec


def hf_config(config: ModelConfig, vocab_size: int, pad_token_id: int, architecture_name: str | None = None,
              cls_token_id: int | None = None, sep_token_id: int | None = None):
    """The transformers config of our model with `vocab_size` rows of embeddings (the export keeps only the
    tokenizer's, leaving out the rows that pad the vocabulary to a multiple of 8); `architecture_name`: the class
    it is saved as (default: the arch's with every head; BertForMaskedLM for a BERT without the NSP head).
    ModernBERT needs the ids of [CLS] and [SEP] too."""
    arch = spec(config.arch)
    return arch.to_hf(config, vocab_size, pad_token_id, [architecture_name or arch.pretraining_class], cls_token_id,
                      sep_token_id)


def model_config_of(hf, source: Path) -> ModelConfig:
    """Our ModelConfig for a transformers config of one of our archs' model types (read from `source`); ConfigError
    naming `source` if it describes a model ours cannot compute."""
    arch = of_model_type(hf.model_type)
    fields = arch.from_hf(hf, source)
    try:
        return ModelConfig(arch=arch.name, **fields)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def read_hf_config(path: Path) -> ModelConfig:
    """Our ModelConfig of a Hugging Face directory's config.json `path` of one of our archs (vocab_size: the rows its
    weights have)."""
    import transformers

    try:
        hf = transformers.AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a model config ({first_line(e)})") from None
    if of_model_type(hf.model_type) is None:
        raise ConfigError(f"{path}: model_type {hf.model_type!r}, but our models are "
                          f"{', '.join(t for name in names() for t in spec(name).model_types)}")
    return model_config_of(hf, path)
