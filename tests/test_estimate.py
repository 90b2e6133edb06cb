"""The memory estimate against hand-computed figures."""
import pytest
import torch

from pretrain.estimate import GIB, estimate_memory, format_estimate, parameter_sizes
from pretrain.model import BertForPreTraining, model_config

BASE_PARAMETERS = 110_111_042  # transformers' bert-base BertForPreTraining (110,106,428) + 6 padding vocabulary rows
STATES = ("parameters", "gradients", "optimizer states", "fp32 gradient partition")


def model_states(d):
    return sum(d["memory"][k] for k in STATES)


def test_parameter_counts():
    assert parameter_sizes("base", 30522) == (BASE_PARAMETERS, 30528 * 768)  # largest: the word embeddings
    with torch.device("meta"):
        large = BertForPreTraining(model_config("large", 30522)).num_parameters()
    assert parameter_sizes("large", 30522)[0] == large == pytest.approx(336e6, rel=0.01)  # BERT-large: 336M


def test_base_bf16_single_gpu_by_hand():
    """ZeRO 0 in 16 bits runs under torch.autocast: fp32 weights, gradients and moments, 16-bit weight copies."""
    d = estimate_memory("base", 30522, zero_stage=0, gpus=1, micro_batch=32, seq_len=128)
    p, memory = BASE_PARAMETERS, d["memory"]
    assert (memory["parameters"], memory["gradients"], memory["optimizer states"]) == (4 * p, 4 * p, 8 * p)
    assert memory["fp32 gradient partition"] == 0 and memory["ZeRO reduce bucket"] == 0
    assert d["model_state_bytes_per_parameter"] == 16 and d["model_states_bytes"] == 16 * p
    assert memory["autocast 16-bit weights"] == 2 * p and memory["all-reduce buffer"] == 4 * p
    assert memory["optimizer step temporaries"] == 2 * 4 * (1 << 25)  # LAMB: two fp32 lists per bucket
    # 12 layers x s*b*h*(38 + 5*a*s/h) = 12 x 128*32*768 x (38 + 10); embeddings 3 s*b*h;
    # MLM head on 32 x 20 positions: 4 h 16-bit inputs + 14 bytes per logit
    sbh = 128 * 32 * 768
    expected = 12 * sbh * 48 + 3 * sbh + 32 * 20 * (4 * 768 * 2 + 30528 * 14)
    assert memory["activations"] == expected
    assert expected / GIB == pytest.approx(1.95, abs=0.01)
    assert d["peak_phase"] == "forward/backward"
    peak = 16 * p + expected + 2 * p
    assert memory["working margin"] == int(GIB + 0.1 * peak)
    assert d["total_bytes"] == peak + memory["working margin"]


def test_large_fp32_by_hand():
    d = estimate_memory("large", 30522, zero_stage=0, gpus=1, micro_batch=4, seq_len=512, precision="fp32",
                        optimizer="adamw", max_predictions=80)
    p = d["parameters"]
    assert d["model_states_bytes"] == 16 * p and d["memory"]["autocast 16-bit weights"] == 0
    assert d["memory"]["optimizer step temporaries"] == 4 * p  # torch's AdamW: one list over all tensors
    sbh = 512 * 4 * 1024
    expected = 24 * sbh * (66 + 9 * 16 * 512 / 1024) + 5 * sbh + 4 * 80 * (4 * 1024 * 4 + 30528 * 16)
    assert d["memory"]["activations"] == int(expected)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_zero_stages_partition_model_states(precision):
    gpus = 8

    def estimate(stage, gpus=gpus):
        return estimate_memory("large", 30522, zero_stage=stage, gpus=gpus, micro_batch=8, seq_len=128,
                               precision=precision)

    p = estimate(0)["parameters"]
    w = 2 if precision == "bf16" else 4  # DeepSpeed's working weights and gradients under ZeRO
    # ZeRO 0: 4 + 4 + 8. ZeRO: w + w + 12 (master weights, moments) + 4 (fp32 gradient partition, a copy only in
    # 16 bits); stage 1 splits the optimizer-side bytes, stage 2 also the gradients, stage 3 also the weights
    o = 16 if precision == "bf16" else 12
    expected = {0: 16, 1: 2 * w + o / gpus, 2: w + (w + o) / gpus, 3: (2 * w + o) / gpus}
    for stage, per_parameter in expected.items():
        d = estimate(stage)
        assert d["model_state_bytes_per_parameter"] == pytest.approx(per_parameter)
        assert model_states(d) == pytest.approx(per_parameter * p, rel=1e-6)
    assert estimate(1)["memory"]["ZeRO reduce bucket"] == 500_000_000 * 4
    assert estimate(2)["memory"]["ZeRO reduce bucket"] == 500_000_000 * (2 if precision == "bf16" else 4)
    assert estimate(3)["memory"]["ZeRO reduce bucket"] == 0
    # activations do not depend on ZeRO (autocast aside)
    assert len({estimate(stage)["memory"]["activations"] for stage in (1, 2, 3)}) == 1
    # one GPU: ZeRO partitions nothing
    assert len({model_states(estimate(stage, gpus=1)) for stage in (1, 2, 3)}) == 1
    assert model_states(estimate(1, gpus=1)) == (2 * w + o) * p


def test_activation_checkpointing_keeps_only_layer_inputs():
    args = dict(preset="large", vocab_size=30522, zero_stage=1, gpus=8, micro_batch=16, seq_len=512)
    full = estimate_memory(**args)["memory"]["activations"]
    checkpointed = estimate_memory(**args, activation_checkpointing=True)["memory"]["activations"]
    sbh = 512 * 16 * 1024
    per_layer = sbh * (34 + 5 * 16 * 512 / 1024)  # DeepSpeed's bf16 under ZeRO 1
    assert full - checkpointed == int(24 * per_layer) - int(24 * 2 * sbh + per_layer)
    assert checkpointed < full / 8


def test_activations_scale_with_micro_batch_and_model_states_do_not():
    small = estimate_memory("base", 30522, 0, 1, micro_batch=8, seq_len=128)
    big = estimate_memory("base", 30522, 0, 1, micro_batch=16, seq_len=128)
    assert big["memory"]["activations"] == 2 * small["memory"]["activations"]
    assert big["model_states_bytes"] == small["model_states_bytes"]
    assert estimate_memory("base", 30522, 0, 1, 8, 512)["max_predictions"] == 77


def test_format_estimate_is_a_readable_table():
    d = estimate_memory("large", 30522, zero_stage=1, gpus=8, micro_batch=64, seq_len=128)
    text = format_estimate(d)
    assert "preset large: 336.2M parameters" in text
    assert "ZeRO stage 1 over 8 GPU(s)" in text and "micro-batch 64 x 128 tokens" in text
    assert "(6.00 bytes/parameter)" in text  # 2 + 2 + 16/8
    total_line = [line for line in text.splitlines() if line.strip().startswith("total")][0]
    assert float(total_line.split()[-1]) == pytest.approx(d["total_bytes"] / GIB, abs=0.01)
    fp32 = format_estimate(estimate_memory("mini", 1000, 0, 1, 8, 128, precision="fp32"))
    assert "fp32 gradient partition" not in fp32 and "autocast" not in fp32  # nothing to show


@pytest.mark.parametrize("kwargs, message", [
    (dict(preset="huge"), "unknown model preset"),
    (dict(zero_stage=4), "ZeRO stage"),
    (dict(gpus=0), "positive"),
    (dict(seq_len=1024), "sequence length"),
    (dict(precision="fp8"), "unknown precision"),
    (dict(optimizer="sgd"), "unknown optimizer"),
])
def test_bad_arguments(kwargs, message):
    args = dict(preset="base", vocab_size=30522, zero_stage=0, gpus=1, micro_batch=8, seq_len=128) | kwargs
    with pytest.raises(ValueError, match=message):
        estimate_memory(**args)
