"""The long soak (tests/enforce/soak.py; the suite runs a two-minute one): ``PYCLASSIFY_SOAK_SECONDS``
(default 1800) of TCP and UDP probes among four pods while the policy flips two pairs every
200 ms; prints the summary (verdict mismatches, switch-over p50/p99/max, revocation of held
connections, resident memory, descriptors and threads after the warm-up, scrape latency) that
bench/RELIABILITY.md records.

    PYCLASSIFY_SOAK_SECONDS=1800 .venv/bin/python -m pytest bench/test_bench_soak.py -s   # root
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.enforce.netns import Topology, root_reason
from tests.enforce.report import record
from tests.enforce.soak import run_soak

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")


def test_long_soak(tmp_path: Path) -> None:
    topo = Topology(npods=4)
    try:
        topo.up()
        result = run_soak(topo, tmp_path, float(os.environ.get("PYCLASSIFY_SOAK_SECONDS", "1800")))
    finally:
        topo.down()
    print(json.dumps(result.summary(), indent=1))
    record("soak-long-nfqueue", result.summary())
    assert not result.mismatches, result.mismatches[:20]
