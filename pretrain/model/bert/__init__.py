"""BERT (Devlin et al. 2019; NVIDIA's and Habana's DeepSpeed recipes): post-LayerNorm, absolute position embeddings,
GELU, biases, masked LM and next-sentence prediction. Its model is model.py, its Hugging Face config hf.py, its
recipes phase1.yaml and phase2.yaml."""
from __future__ import annotations

from pathlib import Path

from pretrain.model.arch import ArchSpec
from pretrain.model.bert import hf

# tiny/mini/small follow Google's BERT miniatures (for CPU runs and tests); base and large are BERT's own;
# 1.5b and 5b are the sizes of Habana's large-scale DeepSpeed BERT runs.
PRESETS: dict[str, dict] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
    "1.5b": dict(num_hidden_layers=48, hidden_size=1600, num_attention_heads=25, intermediate_size=6400),
    "5b": dict(num_hidden_layers=63, hidden_size=2560, num_attention_heads=40, intermediate_size=10240),
}


def build(config, attention: str, nsp_head: bool):
    from pretrain.model.bert.model import BertForPreTraining

    return BertForPreTraining(config, attention, nsp_head)


def layer_activation_bytes(config, sbh: int, value_bytes: int, autocast: bool, attention_ratio: float) -> float:
    """Korthikanti et al. (2022): s*b*h*(34 + 5*a*s/h) bytes in 16 bits, 38 with autocast's fp32 residual stream and
    LayerNorm inputs; in fp32 the 2-byte tensors take 4 bytes: s*b*h*(66 + 9*a*s/h)."""
    if value_bytes == 4:
        return sbh * (66 + 9 * attention_ratio)
    return sbh * ((38 if autocast else 34) + 5 * attention_ratio)


SPEC = ArchSpec(
    name="bert", title="BERT", model_type="bert", presets=PRESETS, defaults={}, own_settings=("type_vocab_size",),
    phase1_length=128, recipe_dir=Path(__file__).resolve().parent, build=build,
    pretraining_class="BertForPreTraining", masked_lm_class="BertForMaskedLM", encoder="bert",
    base_model_parts=("embeddings.", "encoder.", "pooler."), mlm_head="cls.predictions.transform.dense.weight",
    nsp_head="cls.seq_relationship.weight", windows=False, to_hf=hf.to_hf, from_hf=hf.from_hf,
    layer_activation_bytes=layer_activation_bytes)
