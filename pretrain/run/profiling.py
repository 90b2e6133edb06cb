"""Profiling of chosen training steps: DeepSpeed's flops profiler and torch.profiler, as the config names them."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from pretrain.config import TrainConfig


@contextlib.contextmanager
def profiling(engine, config: TrainConfig, phase_dir: Path, step: int, rank: int):
    """DeepSpeed's flops profiler (rank 0, the forward passes of the step's micro-batches -> flops_profile.txt)
    and torch.profiler (-> profile/), around the steps the config names. The flops profiler is driven directly,
    not through the DeepSpeed config: enabled there, DeepSpeed 0.19 fails in backward without ZeRO."""
    with contextlib.ExitStack() as stack:
        if step == config.flops_profiler_step and rank == 0:
            from deepspeed.profiling.flops_profiler import FlopsProfiler

            flops = FlopsProfiler(engine.module)
            flops.start_profile()
            stack.callback(flops.end_profile)
            stack.callback(flops.print_model_profile, profile_step=step, top_modules=3,
                           output_file=str(phase_dir / "flops_profile.txt"))
            stack.callback(flops.stop_profile)
        if step in config.torch_profiler_steps:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=activities)
            stack.callback(_save_torch_profile, prof, phase_dir / "profile", f"step{step}_rank{rank}")
            stack.enter_context(prof)  # exits (and stops) before the callback above saves
        yield


def _save_torch_profile(prof, out: Path, name: str) -> None:
    out.mkdir(exist_ok=True)
    prof.export_chrome_trace(str(out / f"{name}.json"))
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    (out / f"{name}.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40), encoding="utf-8")
