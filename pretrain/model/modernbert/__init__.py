"""ModernBERT (Warner et al. 2024): pre-LayerNorm, rotary positions, GeGLU, no biases, global and sliding-window
attention layers, masked LM only. Its model is model.py, its Hugging Face config hf.py, its recipes phase1.yaml and
phase2.yaml."""
from __future__ import annotations

from pathlib import Path

from pretrain.model.arch import ArchSpec
from pretrain.model.modernbert import hf

# base and large are ModernBERT-base's and -large's published shapes (22 and 28 layers); the others keep the BERT
# preset's layers, width and heads, with a GeGLU as wide as gives the same feed-forward parameters as BERT's
# (3 x intermediate x hidden = 2 x 4 x hidden^2, rounded to a multiple of 64), so that the two of one name compare
PRESETS: dict[str, dict] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=320),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=704),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=1344),
    "base": dict(num_hidden_layers=22, hidden_size=768, num_attention_heads=12, intermediate_size=1152),
    "large": dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, intermediate_size=2624),
    "1.5b": dict(num_hidden_layers=48, hidden_size=1600, num_attention_heads=25, intermediate_size=4288),
    "5b": dict(num_hidden_layers=63, hidden_size=2560, num_attention_heads=40, intermediate_size=6848),
}
# ModernBERT's published configs: no dropout, LayerNorm epsilon 1e-5, 8,192 positions
DEFAULTS = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-5,
                max_position_embeddings=8192)


def build(config, attention: str, nsp_head: bool):
    from pretrain.model.modernbert.model import ModernBertForPreTraining

    return ModernBertForPreTraining(config, attention)


def check_model(config) -> None:
    head_dim = config.hidden_size // config.num_attention_heads
    if head_dim % 2:
        raise ValueError(f"model config: head dimension {head_dim} (hidden_size {config.hidden_size} / "
                         f"num_attention_heads {config.num_attention_heads}) is odd; RoPE rotates pairs of "
                         f"dimensions, so it must be even")
    if config.local_attention < 2 or config.global_attn_every_n_layers < 1:
        raise ValueError(f"model config: local_attention must be at least 2 and global_attn_every_n_layers "
                         f"at least 1, got {config.local_attention} and {config.global_attn_every_n_layers}")
    if not (config.global_rope_theta > 0 and config.local_rope_theta > 0):
        raise ValueError(f"model config: the RoPE bases must be positive, got global_rope_theta "
                         f"{config.global_rope_theta} and local_rope_theta {config.local_rope_theta}")


def check_data(config, seq_len: int) -> str | None:
    if config.local_attention > seq_len:
        return (f"model.local_attention {config.local_attention}: the local layers' window is wider than the data's "
                f"sequences ({seq_len} tokens), so they would attend like the global ones; set it at most {seq_len} "
                f"or train on longer sequences")
    return None


def layer_activation_bytes(config, sbh: int, value_bytes: int, autocast: bool, attention_ratio: float) -> float:
    """What autograd keeps of a layer (model.py): 11 h + 4 i values a token (i: the GeGLU's width): the two
    LayerNorms' inputs and outputs, the fused QKV output (kept whole by V, a view of it), the rotated Q and K, the
    attention output and Wo's input, the GeGLU's input projection (2 i), GELU's output and the product; plus the
    score matrix in its local layers too (the mask kernel computes every pair and masks those outside the window)."""
    values = 11 + 4 * config.intermediate_size / config.hidden_size
    return sbh * (value_bytes * values + 4 * autocast + (9 if value_bytes == 4 else 5) * attention_ratio)


SPEC = ArchSpec(
    name="modernbert", title="ModernBERT", model_type="modernbert", presets=PRESETS, defaults=DEFAULTS,
    own_settings=("local_attention", "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"),
    phase1_length=1024, recipe_dir=Path(__file__).resolve().parent, build=build,
    pretraining_class="ModernBertForMaskedLM", masked_lm_class="ModernBertForMaskedLM", encoder="model",
    base_model_parts=("embeddings.", "layers.", "final_norm."), mlm_head="head.dense.weight", nsp_head=None,
    windows=True, to_hf=hf.to_hf, from_hf=hf.from_hf, layer_activation_bytes=layer_activation_bytes,
    check_model=check_model, check_data=check_data)
