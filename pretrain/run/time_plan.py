"""How long a run will take: a warning up front when a plan is sized for GPUs but runs on a CPU, and a line, once
the first steps are measured, with the run's steps, the measured seconds per step and the clock time it ends."""
from __future__ import annotations

import logging
import time

from pretrain.config import TrainConfig

# On a CPU, a global batch above this many sequences is a GPU-sized plan: even the tiny model takes a few ms per
# sequence at seq_len 128 on CPU cores, so a step of 1,024 sequences takes seconds, one of the recipes' 65,536
# minutes, times their thousands of steps: days. The demo's CPU settings (global_batch 64, micro_batch 32, 150
# steps) are suggested instead.
CPU_GLOBAL_BATCH = 1024
PLAN_AFTER_STEPS = 4  # the plan is logged after this many steps of the run, or after PLAN_AFTER_S seconds
PLAN_AFTER_S = 30.0


def scale_warning(phase: str, config: TrainConfig, world_size: int, cuda: bool) -> str | None:
    """A warning when the plan is clearly out of scale for the device: no GPU and a global batch above
    CPU_GLOBAL_BATCH; None otherwise."""
    if cuda or config.global_batch <= CPU_GLOBAL_BATCH:
        return None
    accumulation = config.global_batch // (config.micro_batch * world_size)
    return (f"{phase}: no GPU here, and the plan is sized for GPUs: {config.steps:,} steps x global_batch "
            f"{config.global_batch:,} sequences (micro_batch {config.micro_batch} x {world_size} rank(s) x "
            f"accumulation {accumulation:,}), more than {CPU_GLOBAL_BATCH:,} sequences per step, slow on a CPU "
            f"(the recipes' plans take days); for a CPU trial set global_batch, micro_batch and steps, e.g. "
            f"--set global_batch=64 --set micro_batch=32 --set steps=150")


class TimePlan:
    """Logs once, after PLAN_AFTER_STEPS steps of this run or PLAN_AFTER_S seconds, the run's steps (from its
    first step to its last, `steps_this_run` counted) at the seconds per step measured here, and when it ends.
    The first step, which also warms up, is left out of the measure when later steps are there to measure."""

    def __init__(self, phase: str, first_step: int, last_step: int, global_batch: int, log: logging.Logger):
        self.phase, self.first_step, self.last_step, self.global_batch, self.log = (phase, first_step, last_step,
                                                                                    global_batch, log)
        self.started = time.monotonic()
        self.after_first: float | None = None
        self.logged = False

    def step_done(self, step: int) -> None:
        if self.logged:
            return
        now, done = time.monotonic(), step - self.first_step
        if done == 1:
            self.after_first = now
        if step >= self.last_step or (done < PLAN_AFTER_STEPS and now - self.started < PLAN_AFTER_S):
            return
        per_step = (now - self.after_first) / (done - 1) if done > 1 else now - self.started
        steps = self.last_step - self.first_step
        end = time.time() + (self.last_step - step) * per_step
        self.log.info("%s: %s steps x %s sequences at %s s/step here: about %s (done ~%s)", self.phase,
                      f"{steps:,}", f"{self.global_batch:,}", f"{per_step:.3g}", duration(steps * per_step),
                      clock(end))
        self.logged = True


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def clock(epoch_s: float) -> str:
    """A UTC clock time; with its date when it is not within a day from now."""
    fmt = "%H:%M UTC" if epoch_s - time.time() < 86400 else "%Y-%m-%d %H:%M UTC"
    return time.strftime(fmt, time.gmtime(epoch_s))
