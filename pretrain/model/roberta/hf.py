"""Our RoBERTa's ModelConfig -> transformers' XLMRobertaConfig; back, BERT's mapping (bert/hf.py) reads it, and a
RobertaConfig, which has the same fields: our RoBERTa computes what our BERT does (exact GELU, absolute positions, no
decoder attention) on RoBERTa's embeddings, and a config asking for anything else
describes another model."""
from __future__ import annotations

from pretrain.model.bert import hf as bert_hf


def to_hf(config, vocab_size: int, pad_token_id: int, architectures: list[str], cls_token_id: int | None = None,
          sep_token_id: int | None = None):
    import transformers

    if cls_token_id is None or sep_token_id is None:
        raise ValueError("a RoBERTa config needs the ids of <s> and </s>")
    return transformers.XLMRobertaConfig(bos_token_id=cls_token_id, eos_token_id=sep_token_id,
                                         **bert_hf.config_fields(config, vocab_size, pad_token_id, architectures))

