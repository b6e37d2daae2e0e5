"""The engine's C ABI as the live loops use it: a PyCapsule function table called from Cython
without the GIL, with a connection tracker owned on the native side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyclassify._native import EngineClient
from pyclassify.capture import read_all
from pyclassify.engine import VERDICT_DTYPE, NativeEngine, Tracker
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction, Policy, PolicySet, Subject
from pyclassify.project import load_project

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo():
    project = load_project([str(REPO / "examples" / "demo")])
    return NativeEngine(project.policy_set, project.inventory)


@pytest.fixture(scope="module")
def capture():
    headers, quotes, _ = read_all(str(REPO / "pcaps" / "demo.pcap"))
    return headers, quotes


def test_capsule_path_equals_the_python_api(demo, capture):
    headers, quotes = capture
    client = EngineClient(demo._engine.capsule())
    out = np.zeros(len(headers), VERDICT_DTYPE)
    client.judge(headers, out, quotes)
    assert (out == demo.judge(headers, quotes, Tracker())).all()
    assert client.tracked > 0
    stateless = EngineClient(demo._engine.capsule(), conntrack=False)
    out2 = np.zeros(len(headers), VERDICT_DTYPE)
    stateless.judge(headers, out2)
    assert (out2 == demo.judge(headers)).all()


def test_tracker_counters_cross_the_abi_in_the_rust_order(demo, capture):
    from pyclassify import _engine, _native

    assert list(_native.CT_STATS_NAMES) == _engine.CT_STATS_NAMES  # one order, held by this test
    headers, _ = capture
    # twenty new UDP "connections" from the capture's first UDP packet, one source port each
    first = headers[np.flatnonzero(headers["protocol"] == 17)[0]]
    flows = np.repeat(first[None], 20)
    flows["sport"] = np.arange(40000, 40020)
    client = EngineClient(demo._engine.capsule(), max_entries=4)
    client.judge(flows, np.zeros(len(flows), VERDICT_DTYPE))
    stats = client.ct_stats
    assert stats["packets"] == 20 and stats["inserts"] > 4, stats
    assert client.tracked <= 4
    # at a cap of 4 every insert beyond it made room by dropping an unassured entry, or was refused
    assert stats["early_drops"] + stats["insert_failed"] >= stats["inserts"] - 4 > 0, stats
    assert EngineClient(demo._engine.capsule(), conntrack=False).ct_stats == dict.fromkeys(_engine.CT_STATS_NAMES, 0)


def test_revalidate_against_a_new_policy_revokes_connections(demo, capture):
    headers, quotes = capture
    client = EngineClient(demo._engine.capsule())
    client.judge(headers, np.zeros(len(headers), VERDICT_DTYPE), quotes)
    tracked = client.tracked
    assert client.revalidate() == (0, [])  # the same policy revokes nothing
    # The same endpoints under one policy that isolates all of them: every connection goes.
    isolate = Policy(
        "GlobalNetworkPolicy",
        None,
        "isolate-all",
        "default",
        None,
        Subject(),
        frozenset({Direction.INGRESS, Direction.EGRESS}),
    )
    deny_all = NativeEngine(PolicySet.build([isolate]), demo.inventory)
    n, flows = client.revalidate(deny_all._engine.capsule())
    # revoked, not forgotten: kept (marked) so that no packet of theirs passes, either way
    assert n == tracked and len(flows) == n and client.tracked == tracked
    assert client.revalidate(deny_all._engine.capsule()) == (0, [])
    assert all(len(src) == 16 and ipver in (4, 6) for src, _, _, _, _, ipver in flows)


def test_swap_keeps_connections_and_changes_policy(demo, capture):
    headers, quotes = capture
    client = EngineClient(demo._engine.capsule())
    client.judge(headers[:10], np.zeros(10, VERDICT_DTYPE), quotes[:10])
    before = client.tracked
    client.swap(NativeEngine(PolicySet.build([]), Inventory())._engine.capsule())
    assert client.tracked == before


def test_bad_inputs_are_errors(demo):
    with pytest.raises(TypeError):
        EngineClient(object())
    client = EngineClient(demo._engine.capsule())
    with pytest.raises((TypeError, ValueError)):
        client.judge(np.zeros(3, np.uint8), np.zeros(3, VERDICT_DTYPE))


def test_verdict_records_count_the_log_rules_each_side_passed(demo):
    """``logs`` of each side of a verdict record is the number of Log rules the engine's
    explanation of the same flow names (the daemon explains only flows that passed one)."""
    import ipaddress

    from pyclassify.batch import FLAG_HAS_PORTS, new_batch
    from pyclassify.flow import Flow, FlowEnd

    addrs = ["203.0.113.7", "10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40", "198.51.100.9"]
    flows = [
        (a, b, proto, port) for a in addrs for b in addrs if a != b for proto, port in ((6, 80), (6, 5432), (17, 53))
    ]
    headers = new_batch(len(flows))
    for h, (a, b, proto, port) in zip(headers, flows):
        h["src_addr"] = list(bytes(10) + b"\xff\xff" + ipaddress.ip_address(a).packed)
        h["dst_addr"] = list(bytes(10) + b"\xff\xff" + ipaddress.ip_address(b).packed)
        h["ip_version"], h["protocol"], h["sport"], h["dport"] = 4, proto, 40000, port
        h["flags"] = FLAG_HAS_PORTS
    out = demo.judge(headers)
    logged = 0
    for rec, (a, b, proto, port) in zip(out, flows):
        flow = Flow(FlowEnd(None, ipaddress.ip_address(a)), FlowEnd(None, ipaddress.ip_address(b)), proto, 40000, port)
        verdict = demo.evaluate(flow)
        for side, decision in (("egress", verdict.egress), ("ingress", verdict.ingress)):
            expected = len(decision.logs) if decision is not None else 0
            assert rec[side]["logs"] == expected, f"{a} -> {b} {proto}/{port} {side}"
            logged += expected
    assert logged > 0, "the demo's Log rule was never passed: the test proves nothing"
