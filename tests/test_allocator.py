"""The malloc thresholds a Dask worker's engine plugin sets: measured by the page faults of
batch-sized blocks allocated and freed over and over, in a process started as Dask's nanny
starts its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys
from pyclassify.allocator import hold_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(64):
        block = bytearray(1 << 20)  # a batch's size: zeroed, so every page is touched
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

out = {"before": faults()}
restore = hold_freed_memory()
out["held"] = restore is not None
out["holding"] = faults()
if restore is not None:
    restore()
out["after"] = faults()
print(json.dumps(out))
"""


def _probe(**env: str) -> dict:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    run_env.update(env)
    done = subprocess.run([sys.executable, "-c", PROBE], env=run_env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_worker_started_as_dask_starts_it_reuses_batch_blocks_while_held():
    got = _probe(MALLOC_TRIM_THRESHOLD_="65536")  # Dask's nanny's setting
    assert got["held"]
    pages = (1 << 20) // 4096
    assert got["before"] >= 32 * pages  # each block mapped and faulted in afresh
    assert got["holding"] < 4 * pages  # from the heap, pages kept
    assert got["after"] >= 32 * pages  # Dask's setting back


def test_nothing_changes_where_glibc_adapts_by_itself():
    got = _probe()
    assert not got["held"]
