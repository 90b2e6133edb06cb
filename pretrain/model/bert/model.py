"""BERT for pretraining: masked-LM and next-sentence-prediction heads on a post-LayerNorm Transformer encoder (or the
masked-LM head alone, for MLM-only training).

Module and parameter names are exactly those of `transformers.BertForPreTraining` (without the NSP head, of
`transformers.BertForMaskedLM`: no pooler, no `cls.seq_relationship`), so a state dict of this model loads there
unchanged (export is a plain save). What differs from that implementation is for speed: the encoder computes the
real tokens only, attention through the kernels of `attention.py` (SDPA with a mask, or unpadded), the masked-LM head
(transform + vocabulary projection) runs only on the masked positions, gathered first, and a row may hold several
instances (packed, see packing.py).

Inputs and outputs: pretraining.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from pretrain.model.attention import TokenLayout, attend, token_layout
from pretrain.model.pretraining import PretrainingModel
from pretrain.config import ModelConfig


class BertEmbeddings(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, layout: TokenLayout) -> Tensor:
        """x [T, H]: the real tokens (attention.py)."""
        q, k, v = (proj(x).unflatten(-1, (self.num_heads, -1)) for proj in (self.query, self.key, self.value))
        return attend(q, k, v, layout, self.dropout_p if self.training else 0.0).flatten(-2)


class BertDenseResidualNorm(nn.Module):
    """dense -> dropout -> LayerNorm(residual + x): the output block after attention and after the FFN."""

    def __init__(self, config: ModelConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class BertAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertDenseResidualNorm(config, config.hidden_size)

    def forward(self, x: Tensor, layout: TokenLayout) -> Tensor:
        return self.output(self.self(x, layout), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, transformers' "gelu"


class BertLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertDenseResidualNorm(config, config.intermediate_size)

    def forward(self, x: Tensor, layout: TokenLayout) -> Tensor:
        x = self.attention(x, layout)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.activation_checkpointing = config.activation_checkpointing
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: Tensor, layout: TokenLayout) -> Tensor:
        for layer in self.layer:
            if self.activation_checkpointing and self.training:
                # keeps only each layer's input; the layer is recomputed (same dropout masks) in backward
                x = checkpoint(layer, x, layout, use_reentrant=False)
            else:
                x = layer(x, layout)
        return x


class BertPooler(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, cls: Tensor) -> Tensor:
        """cls [K, H]: the output at each instance's [CLS]."""
        return torch.tanh(self.dense(cls))


class BertModel(nn.Module):
    """The encoder over the real tokens only (`attention`: a kernel of attention.py); the pooler
    only for the NSP head (transformers' BertForMaskedLM has none)."""

    def __init__(self, config: ModelConfig, attention: str = "mask", pooler: bool = True):
        super().__init__()
        self.attention = attention
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if pooler else None

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                packed: bool) -> tuple[Tensor, TokenLayout]:
        """The encoder's output [T, H] at the T real tokens (`layout.flat_index` maps positions to it)."""
        layout = token_layout(attention_mask, packed, self.attention)
        inputs = tuple(t.reshape(-1)[layout.real] for t in (input_ids, token_type_ids, position_ids))
        return self.encoder(self.embeddings(*inputs), layout), layout


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        # the decoder's weight is tied to the word embeddings (by BertForPreTraining, unless the config unties
        # them) and its bias is `bias`: both keys appear in the state dict, as in transformers
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = self.decoder.bias

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.transform(x))


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: ModelConfig, nsp_head: bool = True):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if nsp_head else None


class BertForPreTraining(PretrainingModel):
    """`nsp_head` False: masked LM only (objective mlm), the parameters of transformers' BertForMaskedLM."""

    def __init__(self, config: ModelConfig, attention: str = "mask", nsp_head: bool = True):
        super().__init__()
        self.config = config
        self.nsp_head = nsp_head
        self.bert = BertModel(config, attention, pooler=nsp_head)
        self.cls = BertPreTrainingHeads(config, nsp_head)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    @property
    def encoder(self) -> BertModel:
        return self.bert

    def _init_weights(self, module: nn.Module) -> None:
        """As transformers initializes BERT: normal(0, initializer_range), zero biases, LayerNorm 1/0."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def encode(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
               packed: bool) -> tuple[Tensor, TokenLayout]:
        return self.bert(input_ids, token_type_ids, attention_mask, position_ids, packed)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        return self.cls.predictions(hidden)

    def nsp_logits(self, cls_hidden: Tensor) -> Tensor:
        return self.cls.seq_relationship(self.bert.pooler(cls_hidden))

    def training_flops(self, tokens: float, attention_pairs: float, instances: float, predictions: float) -> float:
        """Training FLOPs (forward + backward = 3x forward, matmuls only) of `tokens` positions in `instances`
        sequences with `attention_pairs` (query, key) pairs (the sum of the squared lengths) and `predictions`
        MLM slots. Activation checkpointing's recomputation is not counted, as in the usual model-FLOPs-utilization
        definition; counting real tokens only gives the FLOPs that are not spent on padding."""
        c = self.config
        h = c.hidden_size
        # per layer: projections + FFN per token, QK^T + AV per (query, key) pair
        layers = c.num_hidden_layers * (2 * tokens * (4 * h * h + 2 * h * c.intermediate_size)
                                        + 2 * 2 * attention_pairs * h)
        pooler_nsp, mlm = (2 * h * h + 2 * h * 2) * self.nsp_head, 2 * h * h + 2 * h * c.vocab_size
        heads = instances * pooler_nsp + predictions * mlm
        return 3.0 * (layers + heads)
