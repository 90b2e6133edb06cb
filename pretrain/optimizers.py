"""LAMB, LANS and AdamW for BERT pretraining, as plain `torch.optim.Optimizer`s.

They are passed to `deepspeed.initialize` as the client optimizer: DeepSpeed's own Lamb is a CUDA kernel that fails
on CPU, and it has no LANS. The math follows the references the BERT recipes were tuned with:

- `Lamb` is NVIDIA's NVLAMB as in apex's FusedLAMB (the optimizer of DeepLearningExamples' BERT): the gradients are
  first divided by max(1, global grad norm / max_grad_norm); then Adam moments with bias correction; the update
  m_hat / (sqrt(v_hat) + eps) + weight_decay * w is scaled per tensor by the trust ratio ||w|| / ||update||
  (1 where either norm is 0). As in apex (and Habana's FusedLamb), tensors without weight decay (biases,
  LayerNorm) take the plain Adam update, without trust ratio.
- `Lans` (Zheng et al. 2020, arXiv 2006.13484; apex's LANS kernel, used by Habana's 1.5B/5B DeepSpeed BERT runs):
  each tensor's gradient is normalized, g / (||g|| + eps); Adam moments of it; two directions
  r_m = m_hat / (sqrt(v_hat) + eps) + wd * w and r_g = g / (sqrt(v_hat) + eps) + wd * w, each scaled by its own
  trust ratio ||w|| / ||r|| and mixed beta1 : (1 - beta1). The per-tensor normalization makes it invariant to the
  gradient's scale, so it has no global clipping.

Both are written with `torch._foreach_*` ops (as torch.optim's own optimizers are) over buckets of parameters, so a
step launches few kernels and its temporaries stay bounded whatever the model size; nothing syncs with the host.

"Per tensor" means per tensor the optimizer is given. DeepSpeed's bf16/fp16 optimizer wrappers and ZeRO flatten
each parameter group into one fp32 tensor (one partition of it per rank), so there the trust ratio is per group
partition. For per-tensor trust ratios in 16-bit training without ZeRO, use DeepSpeed's `torch_autocast`
(parameters stay fp32 and reach the optimizer unflattened).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

BUCKET_NUMEL = 1 << 25  # elements per foreach batch: bounds the step's temporaries (~128 MiB per fp32 list)


def _buckets(params: list[Tensor], max_numel: int) -> Iterator[list[Tensor]]:
    bucket: list[Tensor] = []
    numel = 0
    for p in params:
        if bucket and numel + p.numel() > max_numel:
            yield bucket
            bucket, numel = [], 0
        bucket.append(p)
        numel += p.numel()
    if bucket:
        yield bucket


def _trust_ratios(params: list[Tensor], updates: list[Tensor]) -> list[Tensor]:
    """||w|| / ||update|| per tensor, 1 where either norm is 0, as 0-dim tensors (no host sync)."""
    w = torch.stack(torch._foreach_norm(params))
    u = torch.stack(torch._foreach_norm(updates))
    return list(torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)).unbind())


def _check_hyperparameters(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    if not lr >= 0:
        raise ValueError(f"invalid learning rate {lr}")
    if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
        raise ValueError(f"invalid betas {betas}")
    if not eps >= 0:
        raise ValueError(f"invalid eps {eps}")
    if not weight_decay >= 0:
        raise ValueError(f"invalid weight_decay {weight_decay}")


def _evaluate(closure) -> Tensor | None:
    """The loss from `closure` (re-evaluated with gradients on, as torch.optim's step does), None without one."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class _AdamMomentsOptimizer(torch.optim.Optimizer):
    """Shared bookkeeping: Adam moment buffers per parameter and one step counter per group (as apex keeps it;
    DeepSpeed's ZeRO checkpoints save and restore a group-level "step")."""

    def _moments(self, params: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        for p in params:
            state = self.state[p]
            if not state:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return [self.state[p]["exp_avg"] for p in params], [self.state[p]["exp_avg_sq"] for p in params]

    @staticmethod
    def _update_moments(m: list[Tensor], v: list[Tensor], grads: list[Tensor], beta1: float, beta2: float) -> None:
        torch._foreach_lerp_(m, grads, 1 - beta1)  # m = beta1 * m + (1 - beta1) * g
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)

    @staticmethod
    def _denominators(v: list[Tensor], bias_correction2: float, eps: float) -> list[Tensor]:
        """sqrt(v_hat) + eps, a new list."""
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, math.sqrt(bias_correction2))
        torch._foreach_add_(denom, eps)
        return denom

    def _groups_with_grads(self) -> Iterator[tuple[dict, list[Tensor], int]]:
        """(group, its parameters that have a gradient, the group's new step number)."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                group["step"] = group.get("step", 0) + 1
                yield group, params, group["step"]


class Lamb(_AdamMomentsOptimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, max_grad_norm: float = 1.0):
        _check_hyperparameters(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      max_grad_norm=max_grad_norm))

    def _clip_divisor(self) -> Tensor | None:
        """max(1, ||all grads|| / max_grad_norm), or None when pre-normalization is off (max_grad_norm <= 0)."""
        max_norm = self.defaults["max_grad_norm"]
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not max_norm or max_norm <= 0 or not grads:
            return None
        norms = torch._foreach_norm(grads)
        dtype = functools.reduce(torch.promote_types, {n.dtype for n in norms}, torch.float32)
        total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device, dtype) for n in norms]))
        return torch.clamp(total / max_norm, min=1.0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        divisor = self._clip_divisor()
        for group, params, step in self._groups_with_grads():
            beta1, beta2 = group["betas"]
            bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
            for bucket in _buckets(params, BUCKET_NUMEL):
                grads = [p.grad for p in bucket]
                if divisor is not None:
                    grads = torch._foreach_div(grads, divisor.to(grads[0].device))
                m, v = self._moments(bucket)
                self._update_moments(m, v, grads, beta1, beta2)
                # update = m_hat / (sqrt(v_hat) + eps), built in the denominator list to save a temporary
                update = self._denominators(v, bias_correction2, group["eps"])
                torch._foreach_mul_(update, bias_correction1)
                torch._foreach_reciprocal_(update)
                torch._foreach_mul_(update, m)
                if group["weight_decay"] != 0:
                    torch._foreach_add_(update, bucket, alpha=group["weight_decay"])
                    torch._foreach_mul_(update, _trust_ratios(bucket, update))
                torch._foreach_add_(bucket, update, alpha=-group["lr"])
        return loss


class Lans(_AdamMomentsOptimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01):
        _check_hyperparameters(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        for group, params, step in self._groups_with_grads():
            beta1, beta2 = group["betas"]
            eps, wd = group["eps"], group["weight_decay"]
            bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
            for bucket in _buckets(params, BUCKET_NUMEL):
                grads = [p.grad for p in bucket]
                norms = torch.stack(torch._foreach_norm(grads))
                divisors = torch.where(norms > 0, norms + eps, torch.ones_like(norms))
                normalized = torch._foreach_div(grads, list(divisors.unbind()))
                m, v = self._moments(bucket)
                self._update_moments(m, v, normalized, beta1, beta2)
                denom = self._denominators(v, bias_correction2, eps)
                momentum_dir = torch._foreach_div(m, denom)
                torch._foreach_div_(momentum_dir, bias_correction1)
                grad_dir = normalized
                torch._foreach_div_(grad_dir, denom)
                del denom
                if wd != 0:
                    torch._foreach_add_(momentum_dir, bucket, alpha=wd)
                    torch._foreach_add_(grad_dir, bucket, alpha=wd)
                # both ratios are taken before the parameters change
                momentum_ratios = _trust_ratios(bucket, momentum_dir)
                grad_ratios = _trust_ratios(bucket, grad_dir)
                torch._foreach_mul_(momentum_dir, momentum_ratios)
                torch._foreach_mul_(grad_dir, grad_ratios)
                torch._foreach_add_(bucket, momentum_dir, alpha=-group["lr"] * beta1)
                torch._foreach_add_(bucket, grad_dir, alpha=-group["lr"] * (1 - beta1))
        return loss


OPTIMIZERS = ("lamb", "lans", "adamw")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on weight matrices and embeddings, none on biases and LayerNorm weights (as BERT)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # a tied parameter appears once
        if not p.requires_grad:
            continue
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float = 0.01,
                    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> torch.optim.Optimizer:
    groups = parameter_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    if name == "lans":
        return Lans(groups, lr=lr, betas=betas, eps=eps)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
