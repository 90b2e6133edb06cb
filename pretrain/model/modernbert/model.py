"""ModernBERT for pretraining (Warner et al. 2024): a pre-LayerNorm Transformer encoder without biases, with rotary
position embeddings, GeGLU feed-forward blocks and alternating attention (every `global_attn_every_n_layers`-th
layer global, the others within a window of `local_attention` tokens), under a masked-LM head. MLM-only: ModernBERT
has no next-sentence prediction.

Module and parameter names are exactly those of `transformers.ModernBertForMaskedLM` (`model.embeddings`,
`model.layers.N.attn.Wqkv`, ..., `head`, `decoder`, the decoder's weight tied to the token embeddings unless the config
unties them), so a state dict of this model loads there unchanged and the export is a plain save; the computation is
that class's (the same logits: tests/test_pretrain/test_modernbert.py). What differs is for speed, as in our BERT
(bert/): the encoder over the real tokens only, the kernels of attention.py (SDPA with a mask, the local layers block by
block within their window, or flash-attention's varlen kernel with its window), the head and decoder on the masked
positions only, gathered first (the final LayerNorm too), and rows holding several instances (packing.py), each with its
own positions from 0 for RoPE.

Inputs and outputs: pretraining.py (token_type_ids and next_sentence_labels are taken and not used).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from pretrain.config import ModelConfig
from pretrain.model.attention import TokenLayout, attend, token_layout
from pretrain.model.pretraining import PretrainingModel

# RoPE base -> (cos, signed sin) of every position of a batch, [..., head_dim]: computed once a forward for each base
Rotary = dict[float, tuple[Tensor, Tensor]]


def rotary_tables(position_ids: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and signed sin [..., head_dim] of the rotation of each position (fp32): frequency i of the pair
    (i, i + d/2) is theta ** (-2i / d), the layout of transformers' ModernBERT (rotate_half); the sin of the first
    half negated, so that `rotate` needs no negation of its own."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=position_ids.device)
                                / head_dim))
    angles = position_ids[..., None].float() * inv_freq
    return torch.cat((angles, angles), dim=-1).cos(), torch.cat((-angles.sin(), angles.sin()), dim=-1)


def rotate(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """x [T, ..., d] rotated by the tables [T, d] of its positions, in fp32, back in x's dtype: transformers'
    x * cos + rotate_half(x) * sin, rotate_half(x) = (-second half, first half), with the sign in the table."""
    x32 = x.float()
    shape = (x.size(0),) + (1,) * (x.dim() - 2) + (x.size(-1),)
    swapped = x32.roll(x.size(-1) // 2, dims=-1)
    return (x32 * cos.view(shape) + swapped * signed_sin.view(shape)).to(x.dtype)


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


class ModernBertAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob
        global_layer = config.is_global_layer(layer)
        self.window = None if global_layer else config.local_attention // 2
        self.theta = config.global_rope_theta if global_layer else config.local_rope_theta
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.out_drop = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, x: Tensor, layout: TokenLayout, rotary: Rotary) -> Tensor:
        """x [T, H]: the real tokens (attention.py)."""
        qkv = self.Wqkv(x).unflatten(-1, (3, self.num_heads, -1))
        q, k = rotate(qkv[:, :2], *rotary[self.theta]).unbind(1)  # query and key in one pass
        y = attend(q, k, qkv[:, 2], layout, self.dropout_p if self.training else 0.0, self.window)
        return self.out_drop(self.Wo(y.flatten(-2)))


class ModernBertMLP(nn.Module):
    """GeGLU: Wi gives the input and the gate (each intermediate_size wide), GELU(input) * gate goes through Wo."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.drop = nn.Dropout(config.hidden_dropout_prob)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        value, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(F.gelu(value) * gate))  # exact (erf) GELU, transformers' "gelu"


class ModernBertEncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        # the embeddings end in a LayerNorm, so the first layer's would repeat it
        self.attn_norm = nn.Identity() if layer == 0 else nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                                                        bias=False)
        self.attn = ModernBertAttention(config, layer)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: Tensor, layout: TokenLayout, rotary: Rotary) -> Tensor:
        x = x + self.attn(self.attn_norm(x), layout, rotary)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertModel(nn.Module):
    """The encoder over the real tokens only (`attention`: a kernel of attention.py), without its final LayerNorm,
    which the caller applies where it reads the output."""

    def __init__(self, config: ModelConfig, attention: str = "mask"):
        super().__init__()
        self.config = config
        self.attention = attention
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, layer) for layer in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor, packed: bool
                ) -> tuple[Tensor, TokenLayout]:
        """The last layer's output [T, H] at the T real tokens, before final_norm (`layout.flat_index` maps
        positions to it)."""
        c = self.config
        layout = token_layout(attention_mask, packed, self.attention)
        input_ids, position_ids = (t.reshape(-1)[layout.real] for t in (input_ids, position_ids))
        head_dim = c.hidden_size // c.num_attention_heads
        rotary = {theta: rotary_tables(position_ids, head_dim, theta)
                  for theta in {c.global_rope_theta, c.local_rope_theta}}
        x = self.embeddings(input_ids)
        for layer in self.layers:
            if c.activation_checkpointing and self.training:
                # keeps only each layer's input; the layer is recomputed (same dropout masks) in backward
                x = checkpoint(layer, x, layout, rotary, use_reentrant=False)
            else:
                x = layer(x, layout, rotary)
        return x, layout


class ModernBertPredictionHead(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(F.gelu(self.dense(x)))


class ModernBertForPreTraining(PretrainingModel):
    """The parameters of transformers' ModernBertForMaskedLM; no NSP head."""
    nsp_head = False

    def __init__(self, config: ModelConfig, attention: str = "mask"):
        super().__init__()
        self.config = config
        self.model = ModernBertModel(config, attention)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    @property
    def encoder(self) -> ModernBertModel:
        return self.model

    def _init_weights(self, module: nn.Module) -> None:
        """As transformers initializes ModernBERT: weights from a normal truncated at 2 standard deviations, std
        initializer_range for the embeddings and the input projections, initializer_range / sqrt(2 * layers) for
        the output projections and the head; zero biases, LayerNorm weights 1."""
        std = self.config.initializer_range
        out_std = std / (2.0 * self.config.num_hidden_layers) ** 0.5
        stds = {ModernBertEmbeddings: {"tok_embeddings": std}, ModernBertMLP: {"Wi": std, "Wo": out_std},
                ModernBertAttention: {"Wqkv": std, "Wo": out_std}, ModernBertPredictionHead: {"dense": out_std}}
        for name, part_std in stds.get(type(module), {}).items():
            weight = getattr(module, name).weight
            nn.init.trunc_normal_(weight, std=part_std, a=-2 * part_std, b=2 * part_std)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
        elif module is self:
            nn.init.zeros_(self.decoder.bias)
            if not self.config.tie_word_embeddings:  # else its weight is the embeddings'
                nn.init.trunc_normal_(self.decoder.weight, std=std, a=-2 * std, b=2 * std)

    def encode(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
               packed: bool) -> tuple[Tensor, TokenLayout]:
        """The last layer's output (token_type_ids are not used), without the final LayerNorm: mlm_logits applies it
        to the rows it reads."""
        return self.model(input_ids, attention_mask, position_ids, packed)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        return self.decoder(self.head(self.model.final_norm(hidden)))

    def training_flops(self, tokens: float, attention_pairs: float, instances: float, predictions: float) -> float:
        """Training FLOPs (forward + backward = 3x forward, matmuls only; as BertForPreTraining.training_flops) of
        `tokens` positions in `instances` sequences with `attention_pairs` (query, key) pairs (the sum of the squared
        lengths) and `predictions` MLM slots. A local layer needs the pairs within its window only: at most
        `local_attention + 1` keys a token (the count is that bound, or all pairs where fewer)."""
        c = self.config
        h = c.hidden_size
        global_layers = sum(c.is_global_layer(layer) for layer in range(c.num_hidden_layers))
        local_pairs = min(attention_pairs, tokens * (2 * (c.local_attention // 2) + 1))
        # per layer: Wqkv, Wo and the GeGLU per token; QK^T + AV per (query, key) pair
        layers = (c.num_hidden_layers * 2 * tokens * (4 * h * h + 3 * h * c.intermediate_size)
                  + 2 * 2 * h * (global_layers * attention_pairs + (c.num_hidden_layers - global_layers) * local_pairs))
        mlm = 2 * h * h + 2 * h * c.vocab_size
        return 3.0 * (layers + predictions * mlm)
