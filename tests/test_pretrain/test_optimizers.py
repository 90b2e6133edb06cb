"""LAMB, LANS, StableAdamW and AdamW against step-by-step hand computations in plain torch (one tensor at a time, no
foreach)."""
import copy
import math
import subprocess
import sys

import pytest
import torch

from pretrain.optim import optimizers
from pretrain.config import model_config
from pretrain.model.bert.model import BertForPreTraining
from pretrain.optim.optimizers import Lamb, Lans, StableAdamW, build_optimizer, parameter_groups

LR, BETAS, EPS, WD = 0.01, (0.9, 0.999), 1e-6, 0.01


def make_params():
    """A weight matrix, a zero-initialized weight (trust ratio 1), and a bias without weight decay."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 3, generator=g, dtype=torch.float64)
    zero_weight = torch.zeros(3, 2, dtype=torch.float64)
    bias = torch.randn(5, generator=g, dtype=torch.float64)
    return [weight, zero_weight, bias], [WD, WD, 0.0]


def make_grads(step, scale):
    g = torch.Generator().manual_seed(100 + step)
    return [scale * torch.randn(4, 3, generator=g, dtype=torch.float64),
            scale * torch.randn(3, 2, generator=g, dtype=torch.float64),
            scale * torch.randn(5, generator=g, dtype=torch.float64)]


def as_groups(params, decays):
    tensors = [torch.nn.Parameter(p.clone()) for p in params]
    groups = [{"params": [t for t, d in zip(tensors, decays) if d], "weight_decay": WD},
              {"params": [t for t, d in zip(tensors, decays) if not d], "weight_decay": 0.0}]
    return tensors, groups


def run_optimizer(cls, grad_scales, **kwargs):
    params, decays = make_params()
    tensors, groups = as_groups(params, decays)
    opt = cls(groups, lr=LR, betas=BETAS, eps=EPS, **kwargs)
    history = []
    for step, scale in enumerate(grad_scales, start=1):
        for t, g in zip(tensors, make_grads(step, scale)):
            t.grad = g.clone()
        opt.step()
        history.append([t.detach().clone() for t in tensors])
    return history


def trust_ratio(w, u):
    wn, un = w.norm().item(), u.norm().item()
    return wn / un if wn > 0 and un > 0 else 1.0


def adam_moments(m, v, g, step):
    """Adam's moment updates and their bias-corrected values, as every optimizer here computes them."""
    b1, b2 = BETAS
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return m, v, m / (1 - b1 ** step), v / (1 - b2 ** step)


def lamb_by_hand(grad_scales, max_grad_norm=1.0):
    params, decays = make_params()
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    history = []
    for step, scale in enumerate(grad_scales, start=1):
        grads = make_grads(step, scale)
        global_norm = math.sqrt(sum(g.pow(2).sum().item() for g in grads))
        divisor = max(1.0, global_norm / max_grad_norm)
        new = []
        for i, (p, g, wd) in enumerate(zip(params, grads, decays)):
            g = g / divisor
            m[i], v[i], m_hat, v_hat = adam_moments(m[i], v[i], g, step)
            update = m_hat / (v_hat.sqrt() + EPS)
            if wd:
                update = update + wd * p
                update = trust_ratio(p, update) * update
            new.append(p - LR * update)
        params = new
        history.append(params)
    return history


def lans_by_hand(grad_scales):
    params, decays = make_params()
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1 = BETAS[0]
    history = []
    for step, scale in enumerate(grad_scales, start=1):
        new = []
        for i, (p, g, wd) in enumerate(zip(params, make_grads(step, scale), decays)):
            g = g / (g.norm() + EPS)
            m[i], v[i], m_hat, v_hat = adam_moments(m[i], v[i], g, step)
            denom = v_hat.sqrt() + EPS
            r_m = m_hat / denom + wd * p
            r_g = g / denom + wd * p
            new.append(p - LR * b1 * trust_ratio(p, r_m) * r_m - LR * (1 - b1) * trust_ratio(p, r_g) * r_g)
        params = new
        history.append(params)
    return history


def adamw_by_hand(grad_scales):
    params, decays = make_params()
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    history = []
    for step, scale in enumerate(grad_scales, start=1):
        new = []
        for i, (p, g, wd) in enumerate(zip(params, make_grads(step, scale), decays)):
            p = p * (1 - LR * wd)
            m[i], v[i], m_hat, v_hat = adam_moments(m[i], v[i], g, step)
            new.append(p - LR * m_hat / (v_hat.sqrt() + EPS))
        params = new
        history.append(params)
    return history


def stableadamw_by_hand(grad_scales):
    """Wortsman et al. 2023, Algorithm 2, one tensor at a time; also each step's RMS per tensor."""
    params, decays = make_params()
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    history, rms_history = [], []
    for step, scale in enumerate(grad_scales, start=1):
        new, rms_of_step = [], []
        for i, (p, g, wd) in enumerate(zip(params, make_grads(step, scale), decays)):
            m[i], v[i], m_hat, v_hat = adam_moments(m[i], v[i], g, step)
            rms = math.sqrt((g * g / v_hat.clamp(min=EPS ** 2)).mean().item())
            eta = LR / max(1.0, rms)
            new.append(p - eta * wd * p - eta * m_hat / (v_hat.sqrt() + EPS))
            rms_of_step.append(rms)
        params = new
        history.append(params)
        rms_history.append(rms_of_step)
    return history, rms_history


def assert_history_close(got, expected):
    assert len(got) == len(expected)
    for step, (got_params, expected_params) in enumerate(zip(got, expected), start=1):
        for i, (a, b) in enumerate(zip(got_params, expected_params)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"step {step}, tensor {i}")


# step 1: global grad norm far above 1 (LAMB pre-normalizes); step 2: below 1 (untouched)
SCALES = (3.0, 0.05)


def test_lamb_matches_hand_computation():
    assert_history_close(run_optimizer(Lamb, SCALES), lamb_by_hand(SCALES))


def test_lamb_pre_normalization_can_be_turned_off():
    assert_history_close(run_optimizer(Lamb, SCALES, max_grad_norm=0.0), lamb_by_hand(SCALES, max_grad_norm=math.inf))
    # Adam's first step does not depend on the gradient's scale; the second mixes two differently clipped steps
    with_clip, without = run_optimizer(Lamb, SCALES)[-1], run_optimizer(Lamb, SCALES, max_grad_norm=0.0)[-1]
    assert not torch.allclose(with_clip[2], without[2])


def test_lamb_trust_ratio_scales_the_step_to_the_weight_norm():
    (weight, zero_weight, bias), = run_optimizer(Lamb, (1.0,))
    start, _ = make_params()
    # with trust ratio the step has norm lr * ||w||; a zero tensor gets the plain update (ratio 1)
    assert (weight - start[0]).norm().item() == pytest.approx(LR * start[0].norm().item(), rel=1e-9)
    assert 0 < (zero_weight - start[1]).norm().item() < LR * math.sqrt(zero_weight.numel()) * 1.0001


def test_lans_matches_hand_computation():
    assert_history_close(run_optimizer(Lans, SCALES), lans_by_hand(SCALES))


def test_lans_is_invariant_to_gradient_scale():
    small, large = run_optimizer(Lans, (0.5, 0.5)), run_optimizer(Lans, (500.0, 500.0))
    for a, b in zip(small[-1], large[-1]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


# step 2's gradients 60 times step 1's: above what the second moment has seen, StableAdamW's clipping acts
RISING = (0.05, 3.0)


@pytest.mark.parametrize("scales", [SCALES, RISING])
def test_stableadamw_matches_hand_computation(scales):
    expected, rms = stableadamw_by_hand(scales)
    assert_history_close(run_optimizer(StableAdamW, scales), expected)
    if scales == RISING:
        assert min(rms[1]) > 1.2  # every tensor's learning rate was divided at step 2


def test_stableadamw_update_rule_on_a_tiny_tensor():
    """betas (0.5, 0.9), eps 0, lr 0.1, w = [1, -1]. Step 1, g = [1, 1]: m_hat = 1, v_hat = 1, RMS = 1 (no clipping),
    w -= 0.1 * 1. Step 2, g = [10, 10]: m = 0.5 * 0.5 + 0.5 * 10 = 5.25, m_hat = 5.25 / 0.75 = 7;
    v = 0.9 * 0.1 + 0.1 * 100 = 10.09, v_hat = 10.09 / 0.19; RMS = 10 / sqrt(v_hat) = 1.372, so the lr becomes
    0.1 / RMS and the step 0.1 / RMS * 7 / sqrt(v_hat) = 0.1 * 7 / 10 = 0.07 (AdamW's would be 0.1 * 7 / 7.287)."""
    w = torch.nn.Parameter(torch.tensor([1.0, -1.0], dtype=torch.float64))
    opt = StableAdamW([w], lr=0.1, betas=(0.5, 0.9), eps=0.0, weight_decay=0.0)
    for grad in (1.0, 10.0):
        w.grad = torch.full_like(w, grad)
        opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor([1 - 0.1 - 0.07, -1 - 0.1 - 0.07], dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)
    # weight decay is decoupled and scaled by the clipped lr: w -= lr / RMS * (update + wd * w)
    w = torch.nn.Parameter(torch.tensor([1.0, -1.0], dtype=torch.float64))
    opt = StableAdamW([w], lr=0.1, betas=(0.5, 0.9), eps=0.0, weight_decay=0.5)
    w.grad = torch.full_like(w, 1.0)
    opt.step()
    torch.testing.assert_close(w.detach(), torch.tensor([1 - 0.1 * (1 + 0.5), -1 - 0.1 * (1 - 0.5)],
                                                        dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_adamw_via_build_optimizer_matches_hand_computation():
    params, decays = make_params()

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(params[0].clone())
            self.zero_weight = torch.nn.Parameter(params[1].clone())
            self.bias = torch.nn.Parameter(params[2].clone())

    toy = Toy()
    opt = build_optimizer(toy, "adamw", lr=LR, weight_decay=WD, betas=BETAS, eps=EPS)
    assert isinstance(opt, torch.optim.AdamW)
    history = []
    for step, scale in enumerate(SCALES, start=1):
        for t, g in zip((toy.weight, toy.zero_weight, toy.bias), make_grads(step, scale)):
            t.grad = g.clone()
        opt.step()
        history.append([toy.weight.detach().clone(), toy.zero_weight.detach().clone(), toy.bias.detach().clone()])
    assert_history_close(history, adamw_by_hand(SCALES))


@pytest.mark.parametrize("cls", [Lamb, Lans, StableAdamW])
def test_bucketing_does_not_change_the_result(cls, monkeypatch):
    whole = run_optimizer(cls, SCALES)
    monkeypatch.setattr(optimizers, "BUCKET_NUMEL", 7)  # every tensor in its own bucket
    assert_history_close(run_optimizer(cls, SCALES), whole)


@pytest.mark.parametrize("cls", [Lamb, Lans, StableAdamW])
def test_state_dict_round_trip_resumes_exactly(cls):
    params, decays = make_params()
    tensors, groups = as_groups(params, decays)
    opt = cls(groups, lr=LR)
    for t, g in zip(tensors, make_grads(1, 1.0)):
        t.grad = g
    opt.step()
    saved_params = [t.detach().clone() for t in tensors]
    saved_state = copy.deepcopy(opt.state_dict())  # as torch.save would: state_dict() shares the buffers

    resumed_tensors, resumed_groups = as_groups(saved_params, decays)
    resumed = cls(resumed_groups, lr=LR)
    resumed.load_state_dict(saved_state)
    for opt_, ts in ((opt, tensors), (resumed, resumed_tensors)):
        for t, g in zip(ts, make_grads(2, 1.0)):
            t.grad = g
        opt_.step()
    assert [g["step"] for g in resumed.param_groups] == [2, 2]
    for a, b in zip(tensors, resumed_tensors):
        assert torch.equal(a, b)


def test_using_the_optimizers_imports_no_dynamo():
    """torch's Optimizer methods import torch._dynamo (seconds of CPU) at their first call; ours are unwrapped."""
    script = """
import copy, sys, torch
from pretrain.optim.optimizers import Lamb, Lans, StableAdamW
for cls in (Lamb, Lans, StableAdamW):
    weight = torch.nn.Parameter(torch.ones(3, 2))
    opt = cls([{"params": [weight]}], lr=0.1)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))], "weight_decay": 0.0})
    weight.grad = torch.ones(3, 2)
    opt.step()
    opt.zero_grad()
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert weight.grad is None and opt.state_dict()["param_groups"][0]["step"] == 1
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_parameters_without_grad_are_left_alone():
    params, decays = make_params()
    tensors, groups = as_groups(params, decays)
    opt = Lamb(groups, lr=LR)
    tensors[0].grad = torch.ones_like(tensors[0])
    opt.step()
    assert torch.equal(tensors[2].detach(), params[2]) and not torch.equal(tensors[0].detach(), params[0])
    assert "step" not in opt.param_groups[1] and len(opt.state) == 1


def test_no_weight_decay_on_biases_and_layernorm():
    model = BertForPreTraining(model_config("tiny", 100))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.01, 0.0)
    assert no_decay_names == {n for n in names.values() if n.endswith(".bias") or ".LayerNorm." in n}
    assert "cls.predictions.bias" in no_decay_names and "bert.embeddings.LayerNorm.weight" in no_decay_names
    assert "bert.embeddings.word_embeddings.weight" in decay_names  # tied with the decoder: listed once
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])


@pytest.mark.parametrize("name, cls", [("lamb", Lamb), ("lans", Lans), ("stableadamw", StableAdamW),
                                       ("adamw", torch.optim.AdamW)])
def test_build_optimizer_trains_the_model(name, cls):
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", 64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    opt = build_optimizer(model, name, lr=1e-3 if "adamw" in name else 1e-2)
    assert isinstance(opt, cls) and [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    batch = dict(input_ids=torch.randint(5, 64, (4, 16)), token_type_ids=torch.zeros(4, 16, dtype=torch.long),
                 attention_mask=torch.ones(4, 16, dtype=torch.long),
                 masked_lm_positions=torch.tensor([[1, 2, 3]] * 4), masked_lm_ids=torch.randint(5, 64, (4, 3)),
                 next_sentence_labels=torch.tensor([0, 1, 0, 1]))
    losses = []
    for _ in range(5):
        loss = model(**batch).loss
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0]
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_unknown_optimizer_and_bad_hyperparameters():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        build_optimizer(model, "sgd", lr=1e-3)
    with pytest.raises(ValueError, match="learning rate"):
        Lamb(model.parameters(), lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        Lans(model.parameters(), betas=(1.0, 0.999))
