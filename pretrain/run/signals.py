"""Stop signals: SIGTERM/SIGINT ask the training loop to stop within a micro-batch (or a batch of a held-out
evaluation), agreed by all ranks."""
from __future__ import annotations

import logging
import signal

import torch


class StopSignal:
    """SIGTERM/SIGINT set `signum`. Before each micro-batch (and batch of a held-out evaluation) every rank calls
    `agreed()`, true on all ranks at the same one once any rank got a signal: a MAX all-reduce on a CPU (gloo)
    group, so no GPU synchronisation. A second SIGINT interrupts at once."""

    def __init__(self, log: logging.Logger, world_size: int):
        self.log, self.signum, self._previous = log, None, {}
        self._group = torch.distributed.new_group(backend="gloo") if world_size > 1 else None

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def agreed(self) -> bool:
        """Collective: whether any rank got a stop signal (its number becomes `signum` on every rank)."""
        if self._group is None:
            return self.signum is not None
        flag = torch.tensor([self.signum or 0], dtype=torch.int32)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._group)
        # the decision is the reduced flag alone: a signal handled since it was sent counts at the next call
        if int(flag) and self.signum is None:
            self.signum = int(flag)
        return bool(int(flag))

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        self.log.warning("signal %d: abandoning the step in progress, saving the last completed one", signum)
