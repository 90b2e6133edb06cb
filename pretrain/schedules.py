"""Settings that change within a phase (`SCHEDULED`): the one syntax of a schedule, its checks and its value at each
step. No torch here: config.py checks schedules in a plain install.

A scheduled setting takes, besides a constant (0.3), a list of [progress, value] pairs, progress being the share of
the phase's steps done, from 0 to 1:

- piecewise constant, a list: [[0, 0.3], [0.5, 0.15], [0.75, 0.05]]: each value from its progress on;
- linear, a mapping: {linear: [[0, 0.3], [1, 0.15]]}: straight between the points, the last value after the last one.

The first pair is at progress 0, the others follow in increasing progress. Optimizer step s (1-based) of a phase of N
steps is at progress (s - 1) / N, so [0.5, x] takes effect at step N/2 + 1 (the LR schedule's own step count). A
constant is the schedule of one pair, and behaves exactly as the setting did before it could be scheduled; a schedule
of several pairs is scheduled even where their values are equal (its values are logged; language_alpha's points each
start an epoch).
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

from wiki2bert_core.config import SettingError

SCHEDULED = ("mask_rate", "mask_replace", "mask_random", "global_batch", "language_alpha")
LINEAR = "linear"  # the key of the linear form


@dataclasses.dataclass(frozen=True)
class Schedule:
    """(progress, value) points, progress ascending from 0; between points the earlier value (piecewise) or the
    straight line (linear)."""
    points: tuple[tuple[float, float], ...]
    linear: bool = False

    @property
    def constant(self) -> bool:
        return len(self.points) == 1

    @property
    def values(self) -> list[float]:
        return [value for _, value in self.points]

    def at(self, progress: float) -> float:
        i = bisect.bisect_right([p for p, _ in self.points], progress) - 1
        value = self.points[i][1]
        if self.linear and i + 1 < len(self.points):
            (p0, v0), (p1, v1) = self.points[i], self.points[i + 1]
            value = v0 + (v1 - v0) * (progress - p0) / (p1 - p0)
        return value


def parse_schedule(key: str, value: Any) -> Schedule:
    """The schedule a setting's value gives (a number: a constant); SettingError naming `key` if it is none."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return Schedule(((0.0, value),))
    linear = isinstance(value, dict)
    if linear:
        if list(value) != [LINEAR]:
            raise SettingError(key, f"a schedule mapping has the one key {LINEAR} ({{{LINEAR}: [[0, a], [1, b]]}}), "
                                    f"got {', '.join(map(str, value)) or 'none'}")
        value = value[LINEAR]
    if not isinstance(value, list) or not value:
        raise SettingError(key, f"expected a number or a schedule [[progress, value], ...], got {value!r}")
    points = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, list) and len(pair) == 2 and all(_number(x) for x in pair)):
            raise SettingError(f"{key}[{i}]", f"expected a pair [progress, value] of numbers, got {pair!r}")
        points.append((float(pair[0]), pair[1]))
    if points[0][0] != 0:
        raise SettingError(key, f"a schedule starts at progress 0, got {value[0]!r} first")
    for (a, _), (b, _) in zip(points, points[1:]):
        if not a < b <= 1:
            raise SettingError(key, f"progress must increase from 0 to at most 1, got {b:g} after {a:g}")
    if linear and len(points) < 2:
        raise SettingError(key, f"a {LINEAR} schedule needs two points at least")
    return Schedule(tuple(points), linear)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_values(key: str, schedule: Schedule, problem) -> None:
    """SettingError naming `key` for the first value of `schedule` for which `problem(value)` returns a text."""
    for value in schedule.values:
        text = problem(value)
        if text:
            raise SettingError(key, text)


def check_sum_at_most_one(keys: tuple[str, str], schedules: tuple[Schedule, Schedule], blame: str) -> None:
    """SettingError naming `blame` if the two schedules' values add up to more than 1 at any progress: at each point
    of either (between points both are constant or straight, so the sum is largest at a point)."""
    for progress in sorted({p for s in schedules for p, _ in s.points}):
        a, b = (s.at(progress) for s in schedules)
        if a + b > 1 + 1e-12:
            raise SettingError(blame, f"{keys[0]} {a:g} + {keys[1]} {b:g} > 1 at progress {progress:g}; the "
                                        f"two are shares of the positions to predict")


@dataclasses.dataclass(frozen=True)
class PhaseSchedules:
    """The scheduled settings of one phase (a TrainConfig's), each's value at a step (1-based), and what follows from
    global_batch: the micro-batches a rank accumulates in a step and the sequences read up to a step. Picklable: the
    loader's workers take it."""
    steps: int
    per_micro_batch: int  # sequences per micro-batch over all ranks: micro_batch x ranks
    schedules: dict[str, Schedule]  # every SCHEDULED setting's (a constant: one point)

    @classmethod
    def of(cls, config, world_size: int = 1) -> PhaseSchedules:
        return cls(config.steps, config.micro_batch * world_size,
                   {key: parse_schedule(key, getattr(config, key)) for key in SCHEDULED})

    @property
    def scheduled(self) -> list[str]:
        """The settings whose value changes within the phase."""
        return [key for key, schedule in self.schedules.items() if not schedule.constant]

    def progress(self, step: int) -> float:
        return (step - 1) / self.steps

    def first_step_at(self, progress: float) -> int:
        """The first step whose progress is `progress` or more (where a schedule's point takes effect)."""
        step = max(1, math.ceil(progress * self.steps) + 1)
        while step > 1 and self.progress(step - 1) >= progress:  # the ceil off by one in floating point
            step -= 1
        while self.progress(step) < progress:
            step += 1
        return step

    def value(self, key: str, step: int) -> float:
        return self.schedules[key].at(self.progress(step))

    def global_batch(self, step: int) -> int:
        """Sequences of step `step`: a linear schedule's value rounded down to a multiple of the micro-batches (one
        at least)."""
        value = self.value("global_batch", step)
        return max(1, int(value // self.per_micro_batch)) * self.per_micro_batch if self.schedules[
            "global_batch"].linear else int(value)

    def accumulation(self, step: int) -> int:
        """Micro-batches each rank computes in step `step`."""
        return self.global_batch(step) // self.per_micro_batch

    def sequences(self, first: int, last: int) -> int:
        """Sequences of steps first..last (all ranks)."""
        if self.schedules["global_batch"].constant:
            return (last - first + 1) * self.global_batch(first)
        return sum(self.global_batch(step) for step in range(first, last + 1))

    def row(self, step: int) -> dict[str, float | int]:
        """The value of each scheduled setting at `step`, for its metrics.jsonl row."""
        return {key: self.global_batch(step) if key == "global_batch" else self.value(key, step)
                for key in self.scheduled}
