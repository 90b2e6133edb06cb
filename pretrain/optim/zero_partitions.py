"""Tells LAMB, LANS and StableAdamW which fragment of which model tensor lies where in the flat partitions DeepSpeed
gives them.

Under ZeRO stages 1 and 2 (and DeepSpeed's BF16_Optimizer) the client optimizer gets one flat fp32 partition per
parameter group and rank. DeepSpeed itself records, for every model parameter of the partition, the fragment's
address in the flat partition (`param._hp_mapping`, set by `deepspeed.utils.link_hp_params`; the same record its
checkpoints keep as `param_slice_mappings`). This module reads that record into a `PartitionLayout`, numbering
the model tensors the same way on every rank, so the optimizer can sum per-tensor norms over the ranks.
"""
from __future__ import annotations

import torch

from pretrain.optim.optimizers import Fragment, PartitionLayout


def use_tensor_trust_ratios(engine) -> bool:
    """Binds `engine`'s client optimizer to its partitions when DeepSpeed flattened the parameters; returns whether
    it did (False: the optimizer gets the model's own tensors, nothing to do)."""
    wrapper, client = engine.optimizer, engine.basic_optimizer
    if not hasattr(client, "use_partitions"):
        return False
    if engine.zero_optimization_stage() == 3:
        raise RuntimeError("ZeRO-3 is not supported by LAMB/LANS/StableAdamW's per-tensor statistics")
    lp_groups = getattr(wrapper, "bit16_groups", None) or getattr(wrapper, "bf16_groups", None)
    if lp_groups is None:
        return False
    groups = {id(g) for g in wrapper.real_dp_process_group}
    if len(groups) != 1:
        raise RuntimeError("per-tensor trust ratios need one data-parallel group for all parameter groups "
                           "(MoE expert groups are not supported)")
    fragments: dict[torch.Tensor, list[Fragment]] = {}
    number = 0
    numels = []
    for i, lp_params in enumerate(lp_groups):
        (flat,) = client.param_groups[i]["params"]
        found = []
        for lp in lp_params:
            mapping = getattr(lp, "_hp_mapping", None)
            if mapping is not None:
                address = mapping.get_hp_fragment_address()
                found.append(Fragment(number, address.start, address.numel))
            number += 1
            numels.append(lp.numel())
        fragments[flat] = found
    client.use_partitions(PartitionLayout(fragments=fragments, num_tensors=number, numels=tuple(numels),
                                          process_group=wrapper.real_dp_process_group[0],
                                          grad_norm=lambda: _clipped_grad_norm(wrapper)))
    return True


def _clipped_grad_norm(wrapper) -> torch.Tensor | float:
    """The global norm of the gradients the client optimizer gets in this step: DeepSpeed's global norm (all groups,
    all ranks, measured before its step) after DeepSpeed's own clipping to `gradient_clipping`."""
    norm, clip = wrapper._global_grad_norm, wrapper.clip_grad
    if clip > 0:
        norm = norm * min(1.0, clip / (float(norm) + 1e-6))  # the clip coefficient both wrappers apply
    return norm
