"""LAMB, LANS, StableAdamW and AdamW for BERT pretraining, as plain `torch.optim.Optimizer`s.

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
- `StableAdamW` (Wortsman et al. 2023, "Stable and low-precision training for large-scale vision-language models",
  arXiv 2304.13013, Algorithm 2; ModernBERT's optimizer): AdamW whose learning rate is divided, per tensor, by
  max(1, RMS) with RMS = sqrt(mean(g ** 2 / max(v_hat, eps ** 2))) over the tensor's elements (Adafactor's update
  clipping, measured on the current gradient against the second moment): a tensor whose gradient jumps far above
  what v_hat has seen takes a smaller step, avoiding the loss spikes that would follow. The update is
  m_hat / (sqrt(v_hat) + eps) + weight_decay * w, times lr / max(1, RMS) (the paper's bias-corrected betas give
  exactly Adam's bias-corrected moments, which is how they are kept here).

All but AdamW are written with `torch._foreach_*` ops (as torch.optim's own optimizers are) over buckets of parameters, so a
step launches few kernels and its temporaries stay bounded whatever the model size; nothing syncs with the host.

Trust ratios (and StableAdamW's RMS) stay per model tensor under ZeRO stages 1 and 2, where DeepSpeed hands the
optimizer one flat fp32 partition per parameter group and rank: `use_partitions` tells it which fragment of which
model tensor lies where in each partition (read from DeepSpeed by `pretrain.optim.zero_partitions`). Each rank then
takes the squared norms of its fragments, one all-reduce per `step()` sums them per tensor over the ranks (ZeRO
calls `step()` once per parameter group; LAMB's group without weight decay needs none, LANS needs a second one: its
update depends on the gradient norms of the first), and every fragment is scaled by its whole tensor's ratio.
StableAdamW's mean divides the summed squares by the whole tensor's element count (`PartitionLayout.numels`).
Elements of a partition that belong to no tensor (alignment padding) are zero and stay zero. LAMB's
pre-normalization there divides by DeepSpeed's global gradient norm (all groups and ranks, after DeepSpeed's
clipping), read once per step.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Iterator

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


@dataclasses.dataclass(frozen=True)
class Fragment:
    """Elements [start, start + numel) of a flat partition are a contiguous piece of model tensor `tensor`."""
    tensor: int  # the model tensor's number, the same on every rank
    start: int
    numel: int


@dataclasses.dataclass(frozen=True)
class PartitionLayout:
    """Where the model tensors lie in the flat partitions this rank's optimizer is given (see zero_partitions)."""
    fragments: dict[Tensor, list[Fragment]]  # flat partition -> its fragments
    num_tensors: int  # model tensors numbered 0 .. num_tensors - 1
    numels: tuple[int, ...]  # elements of each model tensor, whole (all ranks' fragments together)
    process_group: object  # the ranks whose partitions together hold the whole tensors
    grad_norm: Callable[[], Tensor | float]  # norm of all gradients as the optimizer gets them (all groups, ranks)


class _Pieces:
    """A bucket's tensors cut into pieces of single model tensors: a tensor given whole is one piece, a flat
    partition is its fragments. `norms` gives per-model-tensor norms summed over the pieces of every rank."""

    def __init__(self, params: list[Tensor], layout: PartitionLayout | None):
        self.cuts: list[tuple[int, int | None, int]] = []  # (index in the bucket, start, numel); start None: whole
        self.slots: list[int] = []  # each cut's model tensor (as `norms` indexes them)
        slots, self.params = self.slots, params
        whole = layout.num_tensors if layout else 0
        for i, p in enumerate(params):
            fragments = layout.fragments.get(p) if layout else None
            if fragments is None:
                self.cuts.append((i, None, 0))
                slots.append(whole)
                whole += 1
            else:
                self.cuts.extend((i, f.start, f.numel) for f in fragments)
                slots.extend(f.tensor for f in fragments)
        self.partitioned = layout is not None and any(start is not None for _, start, _ in self.cuts)
        self.layout, self.num_slots = layout, whole
        self.device = params[0].device
        self.slot = torch.tensor(slots, dtype=torch.long, device=self.device) if self.partitioned else None

    def views(self, tensors: list[Tensor]) -> list[Tensor]:
        """The pieces of `tensors` (shaped as the bucket's parameters), as views."""
        return [tensors[i] if start is None else tensors[i].view(-1).narrow(0, start, numel)
                for i, start, numel in self.cuts]

    def norms(self, *tensor_lists: list[Tensor]) -> list[Tensor]:
        """For each list, the norm of each model tensor (indexed as `spread` expects): one all-reduce for all."""
        if not self.cuts:
            partial = torch.zeros(len(tensor_lists), 0, device=self.device)
        else:
            partial = torch.stack([torch.stack(torch._foreach_norm(self.views(ts))) for ts in tensor_lists])
        if not self.partitioned:
            return list(partial.unbind())
        squares = partial.new_zeros(len(tensor_lists), self.num_slots)
        squares.index_add_(1, self.slot, partial * partial)
        torch.distributed.all_reduce(squares, group=self.layout.process_group)
        return list(squares.sqrt().unbind())

    def whole_numels(self) -> list[int]:
        """For each piece, the elements of the whole model tensor it belongs to (all ranks' fragments together)."""
        return [self.params[i].numel() if start is None else self.layout.numels[slot]
                for (i, start, _), slot in zip(self.cuts, self.slots)]

    def spread(self, per_tensor: Tensor) -> list[Tensor]:
        """A per-model-tensor value for each piece, as 0-dim tensors (no host sync)."""
        return list((per_tensor[self.slot] if self.partitioned else per_tensor).unbind())


def _trust_ratios(w: Tensor, u: Tensor) -> Tensor:
    """||w|| / ||update|| from the two norms, 1 where either is 0."""
    return torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w))


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

    layout: PartitionLayout | None = None
    default_betas: tuple[float, float] = (0.9, 0.999)

    # torch wraps these in torch._disable_dynamo, whose first call imports torch._dynamo only to keep torch.compile
    # out of them: 2-5 s of CPU at every process start (docs/performance.md). Nothing compiles these optimizers.
    add_param_group = inspect.unwrap(torch.optim.Optimizer.add_param_group)
    zero_grad = inspect.unwrap(torch.optim.Optimizer.zero_grad)
    state_dict = inspect.unwrap(torch.optim.Optimizer.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.Optimizer.load_state_dict)

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] | None = None, eps: float = 1e-6,
                 weight_decay: float = 0.01, **settings):
        betas = tuple(betas if betas is not None else self.default_betas)
        _check_hyperparameters(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **settings))

    def use_partitions(self, layout: PartitionLayout) -> None:
        """From now on the parameters in `layout.fragments` are flat partitions of many tensors (ZeRO 1/2).
        The moments are made now, for every group: ZeRO steps one group at a time, and DeepSpeed links its
        per-parameter view of the optimizer state (checkpoints, `safe_get_full_optimizer_state`) after the first."""
        self.layout = layout
        for group in self.param_groups:
            self._moments(group["params"])

    def _pieces(self, params: list[Tensor]) -> _Pieces:
        return _Pieces(params, self.layout)

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
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] | None = None, eps: float = 1e-6,
                 weight_decay: float = 0.01, max_grad_norm: float = 1.0):
        super().__init__(params, lr, betas, eps, weight_decay, max_grad_norm=max_grad_norm)

    def _clip_divisor(self) -> Tensor | None:
        """max(1, ||all grads|| / max_grad_norm), or None when pre-normalization is off (max_grad_norm <= 0)."""
        max_norm = self.defaults["max_grad_norm"]
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not max_norm or max_norm <= 0 or not grads:
            return None
        if self.layout is not None:  # this rank sees a part of the gradients (and ZeRO steps one group at a time)
            total = torch.as_tensor(self.layout.grad_norm(), dtype=torch.float32, device=grads[0].device)
            return torch.clamp(total / max_norm, min=1.0)
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
                    pieces = self._pieces(bucket)
                    w_norms, u_norms = pieces.norms(bucket, update)
                    torch._foreach_mul_(pieces.views(update), pieces.spread(_trust_ratios(w_norms, u_norms)))
                torch._foreach_add_(bucket, update, alpha=-group["lr"])
        return loss


class Lans(_AdamMomentsOptimizer):
    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        for group, params, step in self._groups_with_grads():
            beta1, beta2 = group["betas"]
            eps, wd = group["eps"], group["weight_decay"]
            bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
            for bucket in _buckets(params, BUCKET_NUMEL):
                pieces = self._pieces(bucket)
                normalized = [p.grad.clone() for p in bucket]
                g_norms, w_norms = pieces.norms(normalized, bucket)
                divisors = torch.where(g_norms > 0, g_norms + eps, torch.ones_like(g_norms))
                torch._foreach_div_(pieces.views(normalized), pieces.spread(divisors))
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
                m_norms, g_dir_norms = pieces.norms(momentum_dir, grad_dir)
                torch._foreach_mul_(pieces.views(momentum_dir), pieces.spread(_trust_ratios(w_norms, m_norms)))
                torch._foreach_mul_(pieces.views(grad_dir), pieces.spread(_trust_ratios(w_norms, g_dir_norms)))
                torch._foreach_add_(bucket, momentum_dir, alpha=-group["lr"] * beta1)
                torch._foreach_add_(bucket, grad_dir, alpha=-group["lr"] * (1 - beta1))
        return loss


class StableAdamW(_AdamMomentsOptimizer):
    default_betas = (0.9, 0.98)

    @torch.no_grad()
    def step(self, closure=None):
        loss = _evaluate(closure)
        for group, params, step in self._groups_with_grads():
            beta1, beta2 = group["betas"]
            eps = group["eps"]
            bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
            for bucket in _buckets(params, BUCKET_NUMEL):
                grads = [p.grad for p in bucket]
                m, v = self._moments(bucket)
                self._update_moments(m, v, grads, beta1, beta2)
                # g / sqrt(max(v_hat, eps^2)), whose root mean square over a tensor divides its learning rate
                scaled = torch._foreach_div(v, bias_correction2)
                torch._foreach_clamp_min_(scaled, eps * eps)
                torch._foreach_sqrt_(scaled)
                torch._foreach_reciprocal_(scaled)
                torch._foreach_mul_(scaled, grads)
                pieces = self._pieces(bucket)
                torch._foreach_mul_(pieces.views(scaled), [1 / math.sqrt(n) for n in pieces.whole_numels()])
                (rms,) = pieces.norms(scaled)
                del scaled
                lr_factors = 1 / torch.clamp(rms, min=1.0)
                # update = m_hat / (sqrt(v_hat) + eps) (+ weight_decay * w), as LAMB builds it
                update = self._denominators(v, bias_correction2, eps)
                torch._foreach_mul_(update, bias_correction1)
                torch._foreach_reciprocal_(update)
                torch._foreach_mul_(update, m)
                if group["weight_decay"] != 0:
                    torch._foreach_add_(update, bucket, alpha=group["weight_decay"])
                torch._foreach_mul_(pieces.views(update), pieces.spread(lr_factors))
                torch._foreach_add_(bucket, update, alpha=-group["lr"])
        return loss


OPTIMIZERS = ("lamb", "lans", "stableadamw", "adamw")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on weight matrices and embeddings, none on biases and LayerNorm weights (as BERT and
    ModernBERT): the 1-D tensors, whatever a model names them. Pretraining's and fine-tuning's groups."""
    decay, no_decay = [], []
    for p in model.parameters():  # a tied parameter appears once
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float = 0.01,
                    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> torch.optim.Optimizer:
    groups = parameter_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    if name == "lans":
        return Lans(groups, lr=lr, betas=betas, eps=eps)
    if name == "stableadamw":
        return StableAdamW(groups, lr=lr, betas=betas, eps=eps)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
