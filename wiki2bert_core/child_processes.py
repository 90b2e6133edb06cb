"""Child processes that end with the process that started them, however it ends (SIGKILL included): pipeline's
worker processes and `pretrain tune`'s trials."""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None, signum: int = signal.SIGKILL) -> None:
    """Called in the child: Linux sends it `signum` when its parent ends (strictly, when the parent's thread that
    started it ends). `parent`: the pid that started it, for a child that asks after fork (preexec_fn): if that
    process ended before the request, the child ends now. Elsewhere than Linux, nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):  # not Linux
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)
