"""The training loop's checkpoints behind one call: `Checkpointer.save` for each checkpoint and `close` at the end
of the run, whether checkpoints are written while training waits (`checkpoint_writes: blocking`) or in the
background (checkpoint.BackgroundSaver). What a checkpoint holds and when it counts is checkpoint.py's."""
from __future__ import annotations

import logging
import time

import torch

from wiki2bert_core.config import config_to_dict
from wiki2bert_core.log import LOGGER_NAME
from pretrain.run import checkpoint
from pretrain.run.prepare import Run

log = logging.getLogger(LOGGER_NAME)


class Checkpointer:
    """The checkpoints of a run; collective: every rank makes the same calls. With background writes at most one
    write is in flight, and the last checkpoint of a run is written while training waits (no step is left to
    overlap it with). Leaving the context (a run that ends, also by an exception) abandons a write in flight after
    its current file: that checkpoint stays incomplete and `latest` as it was."""

    def __init__(self, engine, run: Run, step: int):
        self.engine, self.run = engine, run
        self.saved = step  # the step of the latest checkpoint: at first the one the run resumed from (or 0)
        self.budget = None  # the run's Budget (run/budget.py), whose time spent each checkpoint keeps
        self._background = None
        if run.config.checkpoint_writes == "background":
            self._background = checkpoint.BackgroundSaver(engine, run.phase_dir, run.config.keep_checkpoints,
                                                          run.world_size)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info) -> None:
        if self._background is not None:
            self._background.abandon()

    def save(self, step: int, data_state: dict, rng: dict, last_step: bool = False) -> None:
        """The checkpoint of `step` with every rank's data position and RNG states: in the background, or now
        (blocking writes; `last_step`, the run's last checkpoint: after the write in flight). Logs how long
        training waited for it."""
        start = time.perf_counter()
        ranks = [None] * self.run.world_size
        torch.distributed.all_gather_object(ranks, {"data": data_state, "rng": rng})
        c = self.run.config
        client = {"phase": self.run.phase, "step": step, "world_size": self.run.world_size, "ranks": ranks,
                  "config": config_to_dict(c)}
        if self.budget is not None:
            client["budget_spent_s"] = self.budget.spent()
        meta = {"phase": self.run.phase, "steps": c.steps, "world_size": self.run.world_size,
                "samples_seen": self.run.schedules.sequences(1, step)}
        if self._background is not None:
            self._background.finish()
        if self._background is None or last_step:
            checkpoint.save(self.engine, self.run.phase_dir, step, meta, client, c.keep_checkpoints)
            log.info("checkpoint of step %d: training waited %.2f s for the whole write", step,
                     time.perf_counter() - start)
        else:
            previous = time.perf_counter() - start
            self._background.save(step, meta, client)
            log.info("checkpoint of step %d: training waited %.2f s (%.2f s for the previous write, then a copy of "
                     "%.2f GiB into CPU memory); written in the background", step, time.perf_counter() - start,
                     previous, self._background.snapshot_bytes / 2 ** 30)
        self.saved = step

    def close(self, step: int, data_state: dict | None, rng: dict | None) -> int:
        """The end of the run at `step` (its last completed step): its checkpoint if it has none yet (a stop signal
        between two saves: written now, abandoning an older write in flight rather than waiting for it), then the
        write in flight finished. Returns the step of the latest checkpoint."""
        if step > self.saved:
            if self._background is not None:
                self._background.abandon()
            self.save(step, data_state, rng, last_step=True)
        elif self._background is not None:
            self._background.finish()
        return self.saved
