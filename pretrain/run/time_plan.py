"""How long a run will take: a warning up front when a plan is sized for GPUs but runs on a CPU, the default
cadence of held-out evaluation (a bounded share of the run's time), and a line, once the first steps are measured,
with the run's steps, the measured seconds per step, the clock time it ends and evaluation's share."""
from __future__ import annotations

import dataclasses
import logging
import time

from pretrain.config import TrainConfig
from pretrain.schedules import parse_schedule

# On a CPU, a global batch above this many sequences is a GPU-sized plan: even the tiny model takes a few ms per
# sequence at seq_len 128 on CPU cores, so a step of 1,024 sequences takes seconds, one of the recipes' 65,536
# minutes, times their thousands of steps: days. The demo's CPU settings (global_batch 64, micro_batch 32, 150
# steps) are suggested instead.
CPU_GLOBAL_BATCH = 1024
PLAN_AFTER_STEPS = 4  # the plan is logged after this many steps of the run, or after PLAN_AFTER_S seconds
PLAN_AFTER_S = 30.0
# The default cadence (eval_every null): as many evaluations as keep them within EVAL_SHARE of the run's training
# time, at most MOST_EVALUATIONS, and always the one at the end of the phase. A held-out instance is taken to cost
# EVAL_INSTANCE_COST of a training sequence: a forward pass only, in the padded layout where training packs
# (0.29-0.43 measured on CPU: bench/eval_cost.py, docs/performance.md). Counting instances instead of timing them
# keeps the evaluated steps the same on every rank, on resume and from run to run.
EVAL_SHARE = 0.05
MOST_EVALUATIONS = 20
EVAL_INSTANCE_COST = 0.5


def scale_warning(phase: str, config: TrainConfig, world_size: int, cuda: bool) -> str | None:
    """A warning when the plan is clearly out of scale for the device: no GPU and a global batch above
    CPU_GLOBAL_BATCH; None otherwise."""
    global_batch = max(parse_schedule("global_batch", config.global_batch).values)  # a schedule's largest
    if cuda or global_batch <= CPU_GLOBAL_BATCH:
        return None
    accumulation = global_batch // (config.micro_batch * world_size)
    return (f"{phase}: no GPU here, and the plan is sized for GPUs: {config.steps:,} steps x global_batch "
            f"{global_batch:,} sequences (micro_batch {config.micro_batch} x {world_size} rank(s) x "
            f"accumulation {accumulation:,}), more than {CPU_GLOBAL_BATCH:,} sequences per step, slow on a CPU "
            f"(the recipes' plans take days); for a CPU trial set global_batch, micro_batch and steps, e.g. "
            f"--set global_batch=64 --set micro_batch=32 --set steps=150")


@dataclasses.dataclass(frozen=True)
class EvalCadence:
    """When the loop evaluates on the held-out set: every `every` steps and at the last step of the phase."""
    every: int
    steps: int  # the phase's
    share: float  # of the run's training time that the evaluations take (estimated, EVAL_INSTANCE_COST)

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.steps

    def describe(self) -> str:
        evaluations = -(-self.steps // self.every)
        when = "at the end" if evaluations == 1 else f"every {self.every:,} steps and at the end"
        return f"{evaluations} time{'s' * (evaluations > 1)} ({when}), ~{self.share:.0%} of the training time"


def eval_cadence(config: TrainConfig, instances: int, sequences: int | None = None) -> EvalCadence:
    """The cadence of config.eval_every (> 0) or, for null, the default one, for `instances` held-out instances and
    the phase's `sequences` (default: steps x global_batch, a constant's)."""
    sequences = sequences or config.steps * config.global_batch
    every = config.eval_every
    if every is None:
        affordable = int(EVAL_SHARE * sequences / (EVAL_INSTANCE_COST * instances))
        every = -(-config.steps // max(1, min(MOST_EVALUATIONS, affordable)))
    evaluations = -(-config.steps // every)
    return EvalCadence(every, config.steps, evaluations * instances * EVAL_INSTANCE_COST / sequences)


class TimePlan:
    """Logs once, after PLAN_AFTER_STEPS steps of this run or PLAN_AFTER_S seconds, the run's steps (from its
    first step to its last, `steps_this_run` counted) at the seconds per step measured here, when it ends, and
    the held-out evaluations (`evaluations`; None: none) with their share of the time.
    The first step, which also warms up, is left out of the measure when later steps are there to measure."""

    def __init__(self, phase: str, first_step: int, last_step: int, global_batch: int, log: logging.Logger,
                 evaluations: EvalCadence | None = None):
        self.phase, self.first_step, self.last_step, self.global_batch, self.log = (phase, first_step, last_step,
                                                                                    global_batch, log)
        self.evaluations = evaluations
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
        evaluated = 1 + (self.evaluations.share if self.evaluations else 0)  # spread over the steps, roughly
        end = time.time() + (self.last_step - step) * per_step * evaluated
        evaluations = f" with held-out evaluation {self.evaluations.describe()}" if self.evaluations else ""
        self.log.info("%s: %s steps x %s sequences at %s s/step here: about %s (done ~%s)%s", self.phase,
                      f"{steps:,}", f"{self.global_batch:,}", f"{per_step:.3g}",
                      duration(steps * per_step * evaluated), clock(end), evaluations)
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
