"""The DeepSpeed engine's settings: numeric precision, ZeRO stage, the generated DeepSpeed config (merged with the
user's) and the rendezvous environment of a run without a launcher."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import torch

from wiki2bert_core.config import deep_merge
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import read_json
from pretrain.config import TrainConfig
from pretrain.run.ds_keys import check_deepspeed_keys

# set from the pretrain config (global_batch, micro_batch, optimizer, lr), never from a user's DeepSpeed config
USER_DS_FORBIDDEN = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                     "optimizer", "scheduler")


def choose_precision(choice: str) -> str:
    """fp32 | bf16 | fp16 for the config's choice (auto: bf16 on GPUs that have it, fp16 on older ones, CPU fp32)."""
    cuda = torch.cuda.is_available()
    if choice == "auto" and cuda:
        # this rank's GPU, asked without creating a CUDA context (on GPU 0, for every rank)
        ampere = torch.cuda.get_device_capability(int(os.environ.get("LOCAL_RANK", "0")))[0] >= 8
        return "bf16" if ampere else "fp16"
    if choice == "auto":
        return "fp32"
    if choice == "fp16" and not cuda:
        raise ConfigError("precision fp16: needs a GPU (DeepSpeed refuses fp16 on CPU); use fp32 or bf16")
    return choice


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype torch.autocast computes in at `precision` (as choose_precision gives it); None for fp32."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def zero_stage_for(parameters: int) -> int:
    return 0 if parameters < 1e9 else 1 if parameters < 3e9 else 2


def read_user_ds_config(path: Path | None) -> dict:
    """The user's --deepspeed-config JSON ({} without one), checked for settings wiki2bert owns and for keys
    DeepSpeed does not know."""
    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: DeepSpeed config file not found")
    user_ds = read_json(path, error=ConfigError)
    if not isinstance(user_ds, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    forbidden = [k for k in USER_DS_FORBIDDEN if k in user_ds]
    if forbidden:
        raise ConfigError(f"{path}: {forbidden[0]} is set by wiki2bert (global_batch, micro_batch, "
                          f"optimizer, lr in the pretrain config); remove it")
    check_deepspeed_keys(path, user_ds)
    return user_ds


def deepspeed_config(c: TrainConfig, grad_accumulation: int, precision: str, user_ds_config: dict,
                     zero_stage: int) -> dict:
    """The DeepSpeed config of a run with these settings (`precision` as choose_precision gives it), the user's
    --deepspeed-config merged over it. A scheduled global_batch has no train_batch_size here: DeepSpeed derives it
    from the micro-batch, `grad_accumulation` (the first step's) and the ranks, and the loop sets it at each step."""
    ds = {
        **({"train_batch_size": c.global_batch} if isinstance(c.global_batch, int) else {}),
        "train_micro_batch_size_per_gpu": c.micro_batch,
        "gradient_accumulation_steps": grad_accumulation,
        "gradient_clipping": c.grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "zero_allow_untested_optimizer": True,  # our LAMB/LANS are client optimizers
        "steps_per_print": 2 ** 62,  # progress goes to our own log
    }
    # 16 bits without ZeRO: torch.autocast, so the parameters stay fp32 and reach LAMB/LANS one tensor each
    # (exact per-tensor trust ratios; 16 bytes of model states per parameter). Under ZeRO the optimizer sees
    # flat partitions anyway, and DeepSpeed's own mixed precision keeps 16-bit weights and gradients (less memory).
    if precision != "fp32":
        if zero_stage == 0:  # fp16: with a dynamic GradScaler
            ds["torch_autocast"] = {"enabled": True, "dtype": str(autocast_dtype(precision)).removeprefix("torch.")}
        elif precision == "bf16":
            ds["bf16"] = {"enabled": True}
        else:
            ds["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}  # dynamic loss scaling
    return deep_merge(ds, user_ds_config)


def single_process_env() -> None:
    """Without a launcher, DeepSpeed needs the env:// rendezvous variables (else it looks for MPI)."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
