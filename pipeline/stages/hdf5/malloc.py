"""glibc's malloc tuned for work that allocates and frees the same large arrays over and over."""
from __future__ import annotations

import ctypes
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # the largest value glibc accepts on 64-bit
TRIM_THRESHOLD = 256 << 20


@functools.cache
def reuse_freed_memory() -> None:
    """Keep freed blocks of up to 32 MB in this process's heap for the next allocation. By default glibc maps such
    blocks afresh and unmaps them on free once they outgrow its adaptive threshold, so every block of HDF5
    instances (the same few tens of MB of arrays, built again for each block) faults its pages in again: a third
    of the hdf5 stage's system time and ~5% of its CPU time. Peak memory does not change; freed memory goes back
    to the system when more than 256 MB of it sits at the top of the heap. Nothing happens where the C library
    is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass
