"""Stop signals: SIGTERM/SIGINT ask the training loop to finish its step, checkpoint and stop, agreed by all ranks."""
from __future__ import annotations

import logging
import signal

import torch


class StopSignal:
    """SIGTERM/SIGINT set `signum`: the loop finishes its step, checkpoints and stops. A second SIGINT
    interrupts at once."""

    def __init__(self, log: logging.Logger):
        self.log, self.signum, self._previous = log, None, {}

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        self.log.warning("signal %d: finishing this step, then saving a checkpoint", signum)


def any_rank(flag: bool, device) -> bool:
    """True on every rank if `flag` is true on any (collective)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return flag
    t = torch.tensor([int(flag)], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())
