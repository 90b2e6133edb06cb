"""RoBERTa / XLM-R for pretraining: BERT's post-LayerNorm encoder (its layers, pretrain/model/bert/model.py) with
RoBERTa's embeddings and masked-LM head, MLM only.

Module and parameter names are exactly those of `transformers.XLMRobertaForMaskedLM` (and `RobertaForMaskedLM`,
which has the same): `roberta.embeddings.*`, `roberta.encoder.layer.*`, `lm_head.dense/layer_norm/decoder/bias`, so a
state dict of this model loads there unchanged. What differs from BERT's embeddings is what transformers computes
for RoBERTa: position ids start at pad_token_id + 1 (fairseq's numbering, which XLM-R's checkpoints were trained
with), and the one token type row is added to every token (the data's segment ids are not used).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from pretrain.config import ModelConfig
from pretrain.model.attention import TokenLayout
from pretrain.model.bert.model import BertEmbeddings, BertForPreTraining, BertModel
from pretrain.model.pretraining import PretrainingModel


class RobertaEmbeddings(BertEmbeddings):
    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size,
                                                padding_idx=config.pad_token_id)
        self.first_position = config.pad_token_id + 1

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        return super().forward(input_ids, input_ids.new_zeros(input_ids.shape), position_ids + self.first_position)


class RobertaModel(BertModel):
    """BERT's encoder without a pooler (transformers' XLMRobertaForMaskedLM has none) on RoBERTa's embeddings."""

    def __init__(self, config: ModelConfig, attention: str = "mask"):
        super().__init__(config, attention, pooler=False)
        self.embeddings = RobertaEmbeddings(config)


class RobertaLMHead(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        # the decoder's weight is tied to the word embeddings (unless the config unties them) and its bias is
        # `bias`: both keys appear in the state dict, as in transformers
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = self.decoder.bias

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.layer_norm(F.gelu(self.dense(x))))


class RobertaForMaskedLM(PretrainingModel):
    nsp_head = False
    # as BERT's: transformers initialises RoBERTa's weights alike, and the FLOPs are those of BERT without NSP
    _init_weights = BertForPreTraining._init_weights
    training_flops = BertForPreTraining.training_flops

    def __init__(self, config: ModelConfig, attention: str = "mask"):
        super().__init__()
        self.config = config
        self.roberta = RobertaModel(config, attention)
        self.lm_head = RobertaLMHead(config)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.lm_head.decoder.weight = self.roberta.embeddings.word_embeddings.weight

    @property
    def encoder(self) -> RobertaModel:
        return self.roberta

    def encode(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
               packed: bool) -> tuple[Tensor, TokenLayout]:
        return self.roberta(input_ids, token_type_ids, attention_mask, position_ids, packed)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(hidden)
