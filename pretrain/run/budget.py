"""A phase's time budget (TrainConfig.budget): how many steps the budget allows, measured from the run's own speed,
and the warmup-stable-decay schedule fitted to it, so that the decay ends on the budget (cramming's budget
triangle: Geiping & Goldstein 2022 time every part of the schedule to a fixed budget).

After each step the steps still affordable are the budget left over the mean seconds a step has taken over the later
half of this run's steps (the first step, which also warms up, never counted; the evaluations and checkpoints
between steps counted in), and the schedule's `total_steps` becomes the step the budget ends on. Until the decay
starts, its start is the last `cooldown` of those steps, moving with the estimate while the lr is still at the peak;
once a step reaches it, the start stays, and the end alone keeps following the estimate (the 1 - sqrt decay
stretched or shrunk a little), so the last step ends within a step of the budget. The warmup is fixed once, at the
first estimate (after the run's third step: the second is the first measured), as `warmup` of the steps estimated
then. Rank 0's clock decides for every rank (one broadcast a step).

The schedule's fields live in the LR scheduler's state, which every checkpoint saves (torch's LambdaLR keeps a
callable object's attributes), and the time spent so far in the client state (`budget_spent_s`): a resumed run
goes on with the same decay and the rest of the budget.
"""
from __future__ import annotations

import logging
import math
import time

import torch

from pretrain.optim.schedule import WarmupStableDecay
from pretrain.run.time_plan import PLAN_AFTER_S, PLAN_AFTER_STEPS, clock, duration


class Budget:
    """The budget of one run of a phase, from its first step `first_step` (0, or the step resumed from) on: the
    phase ends at step `last`, at most the phase's `steps`."""

    def __init__(self, phase: str, seconds: float, schedule: WarmupStableDecay, warmup: float, cooldown: float,
                 first_step: int, steps: int, spent_before: float, log: logging.Logger, device: torch.device,
                 world_size: int):
        self.phase, self.seconds, self.schedule, self.log = phase, seconds, schedule, log
        self.warmup, self.cooldown, self.first_step, self.steps = warmup, cooldown, first_step, steps
        self.spent_before, self.device, self.world_size = spent_before, device, world_size
        self.warmup_fixed = first_step > 0  # a resumed run's schedule holds its warmup already
        decay_start = schedule.total_steps - schedule.cooldown_steps
        self.decay_start: int | None = decay_start if first_step > 0 and first_step >= decay_start else None
        self.last = min(steps, schedule.total_steps)
        self.step_ends: list[float] = []  # when each step of this run ended (monotonic clock)
        self.spent_by_steps = spent_before  # the budget spent at the end of the latest step
        self.planned = False
        log.info("%s: time budget %s, %s spent by earlier runs; counted from step %d on", phase, duration(seconds),
                 duration(spent_before), first_step + 1)
        self.started = time.monotonic()

    def spent(self) -> float:
        """Seconds of the budget spent: by the runs before this one and by this one since its first step."""
        return self.spent_before + time.monotonic() - self.started

    def step_done(self, step: int) -> int:
        """After step `step`: the schedule refitted to the budget; returns the step the phase now ends on."""
        now = time.monotonic()
        self.step_ends.append(now)
        since = len(self.step_ends) // 2  # the later half of the run's steps: the estimate follows a change of speed
        measured = len(self.step_ends) - 1 - since
        spent, per_step = self._agreed(self.spent_before + now - self.started,
                                       (now - self.step_ends[since]) / measured if measured else math.nan)
        self.spent_by_steps = spent
        if math.isnan(per_step):
            return self.last
        self.last = max(step, min(self.steps, step + round((self.seconds - spent) / per_step)))
        if not self.warmup_fixed:
            self.schedule.warmup_steps = int(self.warmup * self.last)
            self.warmup_fixed = True
        if self.decay_start is None and step >= self.last - round(self.cooldown * self.last) and self.cooldown:
            self.decay_start = step
            self.log.info("%s: step %d: the decay starts, %s of the budget of %s spent; the phase ends at about step "
                          "%s", self.phase, step, duration(spent), duration(self.seconds), f"{self.last:,}")
        self.schedule.total_steps = self.last
        self.schedule.cooldown_steps = (self.last - self.decay_start if self.decay_start is not None
                                        else round(self.cooldown * self.last))
        if not self.planned and (step - self.first_step >= PLAN_AFTER_STEPS or now - self.started >= PLAN_AFTER_S):
            self._log_plan(step, per_step, spent)
        return self.last

    def ends_at(self, step: int) -> bool:
        """Whether the budget ends the phase at `step`, before its `steps`."""
        return step == self.last < self.steps

    def _agreed(self, spent: float, per_step: float) -> tuple[float, float]:
        """Rank 0's measures, on every rank: the ranks must agree on the step they stop at."""
        if self.world_size == 1:
            return spent, per_step
        measures = torch.tensor([spent, per_step], dtype=torch.float64, device=self.device)
        torch.distributed.broadcast(measures, src=0)
        return float(measures[0]), float(measures[1])

    def _log_plan(self, step: int, per_step: float, spent: float) -> None:
        """The time-plan line of a budgeted run: the steps the budget allows and when the decay starts."""
        def when(at_step: int) -> str:
            seconds = max(0, at_step - step) * per_step
            return f"in {duration(seconds)}, ~{clock(time.time() + seconds)}"

        decay_start = self.decay_start if self.decay_start is not None else self.last - round(self.cooldown *
                                                                                               self.last)
        decay = f"the decay starts at step {decay_start:,} ({when(decay_start)})" if self.cooldown else "no decay"
        capped = f" (the budget allows more: steps {self.steps:,} ends the phase first)" if self.last == self.steps \
            else ""
        self.log.info("%s: budget %s, %s spent: about %s steps at %s s/step here%s; %s, the last step ends %s",
                      self.phase, duration(self.seconds), duration(spent), f"{self.last:,}", f"{per_step:.3g}",
                      capped, decay, when(self.last))
        self.planned = True
