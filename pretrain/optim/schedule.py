"""The learning-rate schedule of the BERT recipes: linear warmup, then polynomial decay to 0."""
from __future__ import annotations


class WarmupPolyDecay:
    """Learning-rate factor of optimizer step t (0-based): linear warmup over `warmup_steps`, then
    (1 - progress) ** power with progress from 0 at the end of warmup to 1 at `total_steps`."""

    def __init__(self, total_steps: int, warmup_steps: int, power: float):
        self.total_steps, self.warmup_steps, self.power = total_steps, warmup_steps, power

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return max(0.0, 1.0 - progress) ** self.power
