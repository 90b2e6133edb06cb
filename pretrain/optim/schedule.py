"""The learning-rate schedules (TrainConfig.schedule): BERT's linear warmup then polynomial decay to 0, and
ModernBERT's warmup-stable-decay (trapezoid with a 1-sqrt decay). Each is the factor of optimizer step t (0-based) on
the peak lr."""
from __future__ import annotations

import math


class WarmupPolyDecay:
    """Linear warmup over `warmup_steps`, then (1 - progress) ** power with progress from 0 at the end of warmup to
    1 at `total_steps`."""

    def __init__(self, total_steps: int, warmup_steps: int, power: float):
        self.total_steps, self.warmup_steps, self.power = total_steps, warmup_steps, power

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return max(0.0, 1.0 - progress) ** self.power


class WarmupStableDecay:
    """Linear warmup over `warmup_steps`, the peak until the last `cooldown_steps`, then 1 - sqrt(progress) with
    progress from 0 at the start of the cooldown to 1 at `total_steps` (no cooldown: the peak to the end)."""

    def __init__(self, total_steps: int, warmup_steps: int, cooldown_steps: int):
        self.total_steps, self.warmup_steps, self.cooldown_steps = total_steps, warmup_steps, cooldown_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        into_cooldown = step - (self.total_steps - self.cooldown_steps)
        if into_cooldown < 0 or not self.cooldown_steps:
            return 1.0
        return max(0.0, 1.0 - math.sqrt(into_cooldown / self.cooldown_steps))


def lr_schedule(config) -> WarmupPolyDecay | WarmupStableDecay:
    """The schedule of a TrainConfig (`schedule`, `steps`, `warmup`, `decay_power`, `cooldown`)."""
    warmup = int(config.warmup * config.steps)
    if config.schedule == "wsd":
        return WarmupStableDecay(config.steps, warmup, round(config.cooldown * config.steps))
    return WarmupPolyDecay(config.steps, warmup, config.decay_power)
