"""The bounded soak (tests/enforce/soak.py): TCP and UDP probes among four pods while the policy
flips two pairs every 200 ms, through NFQUEUE (routed pods) and through the AF_PACKET bridge;
the long one is bench/test_bench_soak.py.

``PYCLASSIFY_SOAK_SECONDS`` sets the length of each (default 90)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.enforce.netns import Topology, root_reason
from tests.enforce.report import record
from tests.enforce.soak import RSS_GROWTH, BridgedPods, run_soak

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

SECONDS = float(os.environ.get("PYCLASSIFY_SOAK_SECONDS", "90"))


@pytest.fixture(params=["nfqueue", "bridge"])
def topo(request: pytest.FixtureRequest) -> Iterator[Topology]:
    t = Topology(npods=4) if request.param == "nfqueue" else BridgedPods()
    try:
        t.up()
        yield t
    finally:
        t.down()


def test_soak_verdicts_revocation_memory_and_probes(topo: Topology, tmp_path: Path) -> None:
    result = run_soak(topo, tmp_path, SECONDS)
    summary = result.summary()
    print(json.dumps(summary, indent=1))
    record(f"soak-{'bridge' if isinstance(topo, BridgedPods) else 'nfqueue'}", summary)
    # every change was applied (a reload or two may have taken two writes at once), none rejected
    assert result.versions + 1 >= result.reloads > 0.9 * result.versions and result.rejected == 0, summary
    assert result.judged > 20 * result.seconds and result.judged > 0.5 * result.probes, summary
    # every probe decided while one version was in force got that version's verdict
    assert not result.mismatches, result.mismatches[:20]
    # established connections that became denied were cut; the old ones stayed up until then
    assert all(v is not None and v < 1.0 for v in result.held_cut_s.values()), result.held_cut_s
    assert result.held_kept and all(result.held_kept.values()), result.held_kept
    assert result.held_restored and all(result.held_restored.values()), result.held_restored
    # flat memory, no descriptor or thread leak, readiness and metrics answered throughout
    memory = result.memory()
    assert memory["rss_growth"] <= RSS_GROWTH, summary
    assert memory["fds_floor_end"] <= memory["fds_floor_warm"], summary
    assert memory["threads_floor_end"] <= memory["threads_floor_warm"], summary
    assert memory["fds_max"] <= memory["fds_warm"] + 2 and memory["threads_max"] <= memory["threads_warm"] + 2, summary
    assert result.scrape_failures == 0 and len(result.scrape_ms) >= 2 * (SECONDS - 2), summary
