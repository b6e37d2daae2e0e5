"""The engine's C ABI as the live loops use it: a PyCapsule function table called from Cython
without the GIL, with a connection tracker owned on the native side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyclassify._native import EngineClient
from pyclassify.capture import read_all
from pyclassify.engine import NativeEngine, Tracker, VERDICT_DTYPE
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


def test_revalidate_against_a_new_policy_revokes_connections(demo, capture):
    headers, quotes = capture
    client = EngineClient(demo._engine.capsule())
    client.judge(headers, np.zeros(len(headers), VERDICT_DTYPE), quotes)
    tracked = client.tracked
    assert client.revalidate() == (0, [])  # the same policy revokes nothing
    # The same endpoints under one policy that isolates all of them: every connection goes.
    isolate = Policy("GlobalNetworkPolicy", None, "isolate-all", "default", None, Subject(),
                     frozenset({Direction.INGRESS, Direction.EGRESS}))
    deny_all = NativeEngine(PolicySet.build([isolate]), demo.inventory)
    n, flows = client.revalidate(deny_all._engine.capsule())
    assert n == tracked and len(flows) == n and client.tracked == 0
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
