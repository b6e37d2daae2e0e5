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
from tests.enforce.soak import MARKS, RSS_GROWTH, SLACK, BridgedPods, Timeline, _decode, _policies, run_soak, version

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
    assert not result.mismatches, json.dumps(result.mismatches[:20])
    # established connections that became denied were cut; the old ones stayed up until then
    assert all(v is not None and v < 1.0 for v in result.held_cut_s.values()), result.held_cut_s
    assert result.held_kept and all(result.held_kept.values()), result.held_kept
    assert result.held_restored and all(result.held_restored.values()), result.held_restored
    # flat memory, no descriptor or thread leak, readiness and metrics answered throughout
    memory = result.memory()
    assert memory["rss_growth"] <= RSS_GROWTH, summary
    assert memory["fds_floor_end"] <= memory["fds_floor_warm"], summary
    assert memory["threads_floor_end"] <= memory["threads_floor_warm"], summary
    # a burst, not a leak: scrapes, probes and a reload's reads in flight at one sample (one CI
    # run saw 6 descriptors above the warm-up's most, the floor back where it was)
    assert memory["fds_max"] <= memory["fds_warm"] + 8 and memory["threads_max"] <= memory["threads_warm"] + 2, summary
    assert result.scrape_failures == 0 and len(result.scrape_ms) >= 2 * (SECONDS - 2), summary


def test_a_reload_is_credited_with_what_it_loaded_not_with_the_write_before_its_end() -> None:
    """A reload that read the files before a write and ended after it put the older version in
    force: probes until the next reload could have swapped are not judged by the newer one
    (crediting each write with the first reload ending after it judged those probes by a version
    the daemon did not hold yet, and reported the allowed ones as disagreeing)."""
    # flips 0, 1, 2 written at 0.0, 0.2, 0.4; the first reload read version 0 at once and
    # arrived at 0.25, after version 1 was written; the second loaded version 1, arrived at 0.30
    changes = [(0.0, (0, False)), (0.2, (1, False)), (0.4, (2, False))]
    timeline = Timeline.build(changes, [(0.25, (0, False)), (0.30, (1 % MARKS, False))], initial=(1, False))
    assert timeline.state_at(0.1) == ((1, False), True)  # the first reload may have swapped
    assert timeline.state_at(0.22) == ((1, False), True)
    assert timeline.state_at(0.25 + SLACK + 0.001) == ((0, False), True)  # version 0 in force; the next may swap
    assert timeline.state_at(0.30 + SLACK + 0.001) == ((1, False), False)
    assert timeline.state_at(0.41) == ((1, False), False)  # version 2 written, no reload of it yet
    assert (timeline.first_loading(0), timeline.first_loading(1), timeline.first_loading(2)) == (0.25, 0.30, None)
    assert timeline.swaps_within(0.26, 0.36) == [(1, False)]


def test_a_reload_is_the_newest_write_of_the_state_it_reports() -> None:
    changes = [(0.2 * k, (k, False)) for k in range(MARKS + 2)] + [(0.2 * (MARKS + 2) + 0.1, (MARKS + 1, True))]
    timeline = Timeline.build(changes, [(0.2 * MARKS + 0.01, (0, False)), (9.0, (1, True))], initial=(1, False))
    assert [c for _, c in timeline.loads] == [MARKS, MARKS + 2]
    # the policy count the daemon reports tells each (version mod MARKS, late) apart
    loaded = _decode(at_start=_policies(version(1)) + 3)
    assert loaded(3 + _policies(version(5))) == (5, False)
    with pytest.raises(AssertionError):
        loaded(1)
