"""glibc's malloc thresholds in a Dask worker while it judges traffic.

Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536`` so that freed memory goes
back to the kernel at once. Setting it also fixes glibc's mmap threshold at 128 KiB (glibc raises
that threshold by itself only while none of the variables is set): every block of a batch's size
— a capture's headers and verdicts, a chunk of records, numpy's temporaries — is then mapped,
faulted in page by page and unmapped again, batch after batch. Measured, that doubles the CPU
time of a capture replay on a worker. While the engine's plugin is on such a worker, blocks up to
32 MiB come from the heap and up to 64 MiB freed at its top is kept; removing the plugin puts
the worker's settings back.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
GLIBC_MMAP_THRESHOLD = GLIBC_TRIM_THRESHOLD = 128 << 10  # glibc's defaults

_holders = 0  # plugins holding the thresholds (two runs at once: the last one out puts them back)


def _setting(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def hold_freed_memory() -> Callable[[], None] | None:
    """Larger thresholds in this process when its environment fixed them small (Dask's nanny
    does), and the function that puts the environment's values back; None when there is
    nothing to change (glibc's own adaptive thresholds in force, or not glibc)."""
    trim = _setting("MALLOC_TRIM_THRESHOLD_")
    mmap = _setting("MALLOC_MMAP_THRESHOLD_")
    if trim is None and mmap is None:
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return None  # not glibc's malloc (musl's mallopt does nothing and says so)
    global _holders
    _holders += 1
    done = False

    def restore() -> None:
        global _holders
        nonlocal done
        if done:
            return
        done = True
        _holders -= 1
        if _holders == 0:
            mallopt(M_MMAP_THRESHOLD, GLIBC_MMAP_THRESHOLD if mmap is None else mmap)
            mallopt(M_TRIM_THRESHOLD, GLIBC_TRIM_THRESHOLD if trim is None else trim)

    return restore
