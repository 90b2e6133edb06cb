"""The memory estimate against quantities measured on instantiated models (parameter counts, the bytes of the
parameter, gradient and optimizer-state tensors after one optimizer step), and how it scales."""
import pytest
import torch

from pretrain.tools.estimate import GIB, estimate_memory, format_estimate, parameter_sizes
from pretrain.config import model_config
from pretrain.model.bert.model import BertForPreTraining
from pretrain.optim.optimizers import build_optimizer

STATES = ("parameters", "gradients", "optimizer states", "fp32 gradient partition")
VOCAB = 1000


def model_states(d):
    return sum(d["memory"][k] for k in STATES)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.fixture(scope="module", params=["lamb", "lans", "adamw"])
def measured(request) -> dict:
    """Bytes of a mini model's fp32 parameters, gradients and optimizer states after one step, and of its weights
    in 16 bits, as torch allocates them."""
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("mini", VOCAB))
    optimizer = build_optimizer(model, request.param, lr=1e-3)
    ids = torch.randint(5, VOCAB, (2, 16))
    model(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=torch.ones_like(ids),
          masked_lm_positions=torch.tensor([[1, 2], [3, 0]]), masked_lm_ids=ids[:, :2],
          next_sentence_labels=torch.tensor([0, 1])).loss.backward()
    optimizer.step()
    params = list(model.parameters())
    return {"optimizer": request.param, "count": sum(p.numel() for p in params),
            "largest": max(p.numel() for p in params), "parameters": nbytes(params),
            "gradients": nbytes(p.grad for p in params if p.grad is not None),
            # per-element states; 0-dimensional step counters are a few bytes per tensor
            "optimizer states": nbytes(t for s in optimizer.state.values() for t in s.values()
                                       if torch.is_tensor(t) and t.dim() > 0),
            "16-bit weights": nbytes(p.to(torch.bfloat16) for p in params)}


def test_parameter_counts_are_those_of_the_instantiated_model(measured):
    assert parameter_sizes("mini", VOCAB) == (measured["count"], measured["largest"])
    with torch.device("meta"):
        large = BertForPreTraining(model_config("large", 30522))
    assert parameter_sizes("large", 30522)[0] == sum(p.numel() for p in large.parameters()) \
        == pytest.approx(336e6, rel=0.01)  # BERT-large: 336M


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_zero0_model_states_are_the_measured_tensors(measured, precision):
    """Without ZeRO the parameters, gradients and optimizer states stay fp32 (16 bits run under torch.autocast,
    which adds 16-bit weight copies for the forward/backward pass)."""
    d = estimate_memory("mini", VOCAB, zero_stage=0, gpus=1, micro_batch=8, seq_len=128, precision=precision,
                        optimizer=measured["optimizer"])
    memory = d["memory"]
    for kind in ("parameters", "gradients", "optimizer states"):
        assert memory[kind] == measured[kind], kind
    assert memory["fp32 gradient partition"] == 0 and memory["ZeRO reduce bucket"] == 0
    assert d["model_states_bytes"] == measured["parameters"] + measured["gradients"] + measured["optimizer states"]
    assert memory["autocast 16-bit weights"] == (measured["16-bit weights"] if precision == "bf16" else 0)
    assert memory["all-reduce buffer"] == measured["gradients"]  # one bucket: the mini model is below its size
    assert d["total_bytes"] == d["persistent_bytes"] + d["phase_bytes"][d["peak_phase"]] + memory["working margin"]
    assert memory["working margin"] > GIB


def test_zero_model_states_on_one_gpu_are_the_measured_tensors(measured):
    """DeepSpeed's mixed precision: 16-bit weights and gradients; fp32 master weights, moments and gradient
    partition, which on one GPU is the whole model."""
    d = estimate_memory("mini", VOCAB, zero_stage=1, gpus=1, micro_batch=8, seq_len=128, precision="bf16",
                        optimizer=measured["optimizer"])
    memory = d["memory"]
    assert memory["parameters"] == memory["gradients"] == measured["16-bit weights"]
    assert memory["optimizer states"] == measured["parameters"] + measured["optimizer states"]
    assert memory["fp32 gradient partition"] == measured["gradients"]


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_zero_stages_partition_model_states(precision):
    gpus = 8

    def estimate(stage, gpus=gpus):
        return estimate_memory("large", 30522, zero_stage=stage, gpus=gpus, micro_batch=8, seq_len=128,
                               precision=precision)

    states = [model_states(estimate(stage)) for stage in range(4)]
    assert states[0] > states[1] > states[2] > states[3]  # each stage partitions more
    assert states[3] == pytest.approx(model_states(estimate(3, gpus=1)) / gpus, rel=1e-6)  # stage 3: everything
    # one GPU: ZeRO partitions nothing
    assert len({model_states(estimate(stage, gpus=1)) for stage in (1, 2, 3)}) == 1
    assert estimate(1)["memory"]["ZeRO reduce bucket"] == 500_000_000 * 4
    assert estimate(2)["memory"]["ZeRO reduce bucket"] == 500_000_000 * (2 if precision == "bf16" else 4)
    assert estimate(3)["memory"]["ZeRO reduce bucket"] == 0
    # activations do not depend on ZeRO (autocast aside)
    assert len({estimate(stage)["memory"]["activations"] for stage in (1, 2, 3)}) == 1
    # fp32 under ZeRO: the optimizer reads the fp32 gradients themselves, no separate partition
    assert (estimate(1)["memory"]["fp32 gradient partition"] == 0) == (precision == "fp32")


def test_activation_checkpointing_keeps_only_layer_inputs():
    args = dict(preset="large", vocab_size=30522, zero_stage=1, gpus=8, micro_batch=16, seq_len=512)
    full = estimate_memory(**args)["memory"]["activations"]
    checkpointed = estimate_memory(**args, activation_checkpointing=True)["memory"]["activations"]
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
