"""RoBERTa and XLM-R (Liu et al. 2019; Conneau et al. 2020): BERT's post-LayerNorm encoder with position ids that
start after the pad id, one token type, LayerNorm epsilon 1e-5, `<s> </s> <pad> <mask>`, masked LM only. Its model
is model.py (BERT's layers), its Hugging Face config hf.py; its recipes phase1.yaml and phase2.yaml continue a
published checkpoint (--init) rather than train one from nothing."""
from __future__ import annotations

from pathlib import Path

from pretrain.model.arch import ArchSpec
from pretrain.model.bert import PRESETS as BERT_PRESETS
from pretrain.model.bert import hf as bert_hf
from pretrain.model.bert import layer_activation_bytes
from pretrain.model.roberta import hf

# base and large are xlm-roberta-base's and -large's shapes (and roberta-base's, -large's); the smaller ones BERT's,
# for CPU runs and tests
PRESETS: dict[str, dict] = {name: BERT_PRESETS[name] for name in ("tiny", "mini", "small", "base", "large")}
# XLM-R's published configs: 512 positions after the pad id's and the one before it, one token type, epsilon 1e-5,
# <pad> at id 1 (<s> 0, </s> 2, <unk> 3)
DEFAULTS = dict(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1)


def build(config, attention: str, nsp_head: bool):
    from pretrain.model.roberta.model import RobertaForMaskedLM

    return RobertaForMaskedLM(config, attention)


def check_data(config, seq_len: int) -> str | None:
    positions = config.max_position_embeddings - config.pad_token_id - 1
    if seq_len > positions:
        return (f"model.max_position_embeddings {config.max_position_embeddings}: the position ids start after the pad "
                f"id {config.pad_token_id}, which leaves {positions} positions, fewer than the data's sequences "
                f"({seq_len} tokens); use data of at most {positions} tokens")
    return None


SPEC = ArchSpec(
    name="roberta", title="XLM-R", model_type="xlm-roberta", presets=PRESETS, defaults=DEFAULTS,
    own_settings=("type_vocab_size",), phase1_length=128, recipe_dir=Path(__file__).resolve().parent, build=build,
    pretraining_class="XLMRobertaForMaskedLM", masked_lm_class="XLMRobertaForMaskedLM", encoder="roberta",
    base_model_parts=("embeddings.", "encoder.", "pooler."), mlm_head="lm_head.dense.weight", nsp_head=None,
    windows=False, to_hf=hf.to_hf, from_hf=bert_hf.from_hf, layer_activation_bytes=layer_activation_bytes,
    check_data=check_data, other_model_types=("roberta",))
