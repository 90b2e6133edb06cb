"""LAMB, LANS and StableAdamW under ZeRO 1/2 on 2 CPU processes (gloo) take the same steps as per tensor without ZeRO: one
step at a time on a toy model, and the loss curve of a short 2-rank pretraining run.

For the single steps, the model's loss is linear in every parameter (sum of parameter * target), so its gradients are the targets exactly,
in fp32 and in bf16 alike (the targets are small multiples of 1/16); the parameters start at bf16-representable
values. Differences therefore come from the optimizer alone. Run as the script of each rank (run_ranks), this file is the worker.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from pretrain_cli import run_ranks


LR = 0.01
OPTIMIZERS = ("lamb", "lans", "stableadamw")
CASES = [(opt, stage, precision) for opt in OPTIMIZERS for stage in (1, 2) for precision in ("fp32", "bf16")]
CASES += [(opt, 1, "bf16-fp32-accumulation") for opt in OPTIMIZERS]  # DeepSpeed's BF16_Optimizer
# step 2's gradients are 4 times step 1's (still exact in bf16): above what StableAdamW's second moment has seen,
# so its per-tensor update clipping acts (RMS > 1) in the second step
GRADIENT_GROWTH = {1: 1.0, 2: 4.0}


class LinearLoss(nn.Module):
    """Weights and biases named as in BERT (two decay groups); a large tensor straddles the ranks' partitions."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(32, 64)
        self.decoder = nn.Linear(64, 24)
        self.LayerNorm = nn.LayerNorm(40)
        self.embeddings = nn.Parameter(torch.randn(16, 8))
        with torch.no_grad():
            self.LayerNorm.weight.uniform_(0.5, 1.5)
            for p in self.parameters():
                p.copy_(p.bfloat16().float())

    def forward(self, targets: torch.Tensor) -> torch.Tensor:
        parts = targets.split([p.numel() for p in self.parameters()])
        return sum((p * t.view_as(p).to(p.dtype)).float().sum() for p, t in zip(self.parameters(), parts))


def targets(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.cat([torch.randint(-16, 17, (p.numel(),), generator=g).float() / 2 ** (4 + i)  # exact in bf16
                      for i, p in enumerate(model.parameters())])


def _engine(model, optimizer_name, stage, precision, clip):
    import deepspeed

    from pretrain.optim.optimizers import build_optimizer
    from pretrain.optim.zero_partitions import use_tensor_trust_ratios

    config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": clip,
              "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True,
              "steps_per_print": 2 ** 62}
    if precision.startswith("bf16"):
        config["bf16"] = {"enabled": True}
    if precision == "bf16-fp32-accumulation":
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    optimizer = build_optimizer(model, optimizer_name, lr=LR)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    bound = use_tensor_trust_ratios(engine)
    return engine, bound


def worker(out: Path) -> None:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    initial = LinearLoss()
    results = {}
    for opt, stage, precision in CASES:
        clip = 2.0 if opt == "lamb" and stage == 1 else 0.0  # LAMB: DeepSpeed's clipping, then pre-normalization
        engines = {}
        for zero, prec in ((0, "fp32"), (stage, precision)):
            model = LinearLoss()
            model.load_state_dict(initial.state_dict())
            engine, bound = _engine(model, opt, zero, prec, clip)
            for step in (1, 2):
                engine.backward(engine(targets(initial, rank, step) * GRADIENT_GROWTH[step]))
                engine.step()
            engines[zero] = (engine, bound)
        (reference, _), (engine, bound) = engines[0], engines[stage]
        layout = engine.basic_optimizer.layout
        mine = sorted({f.tensor for fragments in layout.fragments.values() for f in fragments})
        everyone = [None, None]
        torch.distributed.all_gather_object(everyone, mine)
        case = {"bound": bound, "wrapper": type(engine.optimizer).__name__,
                "shared_tensors": len(set(everyone[0]) & set(everyone[1])), "master": 0.0,
                "module": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0, "moved": 0.0}
        for (name, p_ref), p in zip(reference.module.named_parameters(), engine.module.parameters()):
            master = safe_get_full_fp32_param(p)
            case["master"] = max(case["master"], _relative(master, p_ref))
            case["module"] = max(case["module"], _relative(p.float(), p_ref.to(p.dtype).float()))
            case["moved"] = max(case["moved"], float((master - initial.state_dict()[name]).abs().max()))
            for key in ("exp_avg", "exp_avg_sq"):
                state = safe_get_full_optimizer_state(p, key)
                case[key] = max(case[key], _relative(state, reference.optimizer.state[p_ref][key]))
        results[f"{opt}-zero{stage}-{precision}"] = case
    if rank == 0:
        out.write_text(json.dumps(results, indent=1))


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| relative to the tensor's largest |b| (elementwise relative error explodes near 0)."""
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("zero") / "results.json"
    done = run_ranks(2, __file__, str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("opt, stage, precision", CASES)
def test_zero_step_equals_the_per_tensor_step(steps, opt, stage, precision):
    case = steps[f"{opt}-zero{stage}-{precision}"]
    assert case["bound"] and case["shared_tensors"] >= 1  # some tensor is split between the two ranks
    assert case["wrapper"] == ("BF16_Optimizer" if precision == "bf16-fp32-accumulation" else "DeepSpeedZeroOptimizer")
    assert case["moved"] > 1e-3  # the steps do change the parameters
    # fp32 master weights and moments: fp32 tolerance (the norms are summed in another order), also with bf16
    assert case["master"] < 1e-6 and case["exp_avg"] < 1e-6 and case["exp_avg_sq"] < 1e-6, case
    assert case["module"] < (1e-6 if precision == "fp32" else 2 ** -8), case  # bf16 weights: bf16 rounding


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, stage", [("lamb", 1), ("lans", 2), ("stableadamw", 2)])
def test_a_two_rank_run_has_the_same_losses_under_zero_1_and_2(tmp_path, optimizer, stage, write_dataset):
    data = write_dataset(tmp_path / "work", [40, 40], seq_len=32)
    losses = {}
    for stage in (0, stage):
        out = tmp_path / f"zero{stage}"
        done = run_ranks(
            2, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out), "--preset", "tiny",
            "--set", "seq_len=32", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "log_every=1",
            "--set", "steps=5", "--set", "warmup=0", "--set", f"optimizer={optimizer}", "--set", "lr=1e-2",
            "--set", f"zero_stage={stage}", "--set", "loader_workers=0", "--set", "pack_sequences=false")
        assert done.returncode == 0, done.stderr[-3000:]
        losses[stage] = [json.loads(line)["loss"] for line in (out / "phase1" / "metrics.jsonl").open()]
    assert len(losses[0]) == len(losses[stage]) == 5
    for step, (a, b) in enumerate(zip(losses[0], losses[stage]), start=1):
        assert b == pytest.approx(a, rel=2e-5), (step, losses)


if __name__ == "__main__":
    from pretrain.run.train import leave_process_groups

    worker(Path(sys.argv[1]))
    leave_process_groups()  # the engines' gloo threads end here, not in the interpreter's teardown
