"""Keep freed memory in the process: glibc's allocator settings for a training loop that allocates the same large
tensors every step.

A stacked client bank allocates gradients of the whole bank every step (``[S, *p.shape]``, megabytes). glibc serves
such sizes with ``mmap`` or gives freed heap memory back to the kernel, so the next step touches fresh pages and pays
a page fault per 4 KiB: with cnn_small and 50 clients per iteration, thousands of page faults and a large share of
the step's time. :func:`retain_freed_memory` makes glibc serve allocations below ``mmap_threshold`` from its heap and
keep up to ``trim_threshold`` of freed heap memory for reuse (``mallopt(M_MMAP_THRESHOLD)`` and
``mallopt(M_TRIM_THRESHOLD)``, the settings the ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment
variables give at start-up): the faults disappear, at the price of the process holding on to up to that much freed
memory. ``lightning-sfl`` calls it before every command; a script using the library can call it first thing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["retain_freed_memory"]

#: glibc's ``mallopt`` parameters (``<malloc.h>``).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: What the environment variables set instead; either one set means the user chose: nothing is changed.
ENV_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def retain_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Serve allocations below ``mmap_threshold`` bytes (glibc's maximum: 32 MiB) from the heap and keep up to
    ``trim_threshold`` bytes of freed heap memory; ``True`` if glibc took both settings. Nothing happens (``False``)
    outside Linux, with another C library, or when ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` is set.

    >>> retain_freed_memory(mmap_threshold=-1)
    Traceback (most recent call last):
    ...
    ValueError: mmap_threshold=-1 and trim_threshold=268435456 must be >= 0 bytes
    """
    if mmap_threshold < 0 or trim_threshold < 0:
        raise ValueError(f"mmap_threshold={mmap_threshold} and trim_threshold={trim_threshold} must be >= 0 bytes")
    if not sys.platform.startswith("linux") or any(v in os.environ for v in ENV_VARS):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # no glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
