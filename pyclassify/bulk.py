"""Bulk construction of long-lived objects: loading a cluster builds a million small objects
(documents, IR, specs) that hold no reference cycles, and Python's cyclic collector would rescan
all of them again and again while they are being made (half of the build time at 10k pods)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Runs the block without the cyclic garbage collector (reference counting still frees
    everything); restores it afterwards, and leaves what the block built out of later scans."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # What was built is long-lived: later collections need not scan it again.
            gc.freeze()
            gc.enable()
