"""A project kept current one object at a time: each change is one delta on the engine, and
the result answers as a project built fresh from the changed objects."""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest

from bench.cluster import CHANGE_KINDS, apply_change, generate, random_change
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.engine import NativeEngine
from pyclassify.live import LiveProject, UnsupportedChange
from pyclassify.project import build_project
from pyclassify.reference import Flow, FlowEnd

KINDS = CHANGE_KINDS  # pods added, deleted, relabelled; namespaces relabelled; NetworkPolicies added, changed, deleted


def project_of(cluster):
    docs = [Document(copy.deepcopy(o), "cluster", 1) for o in cluster.objects()]
    return build_project(docs, Problems())


def test_changes_one_at_a_time_equal_a_fresh_build() -> None:
    cluster = generate(300, seed=4)
    live = LiveProject(project_of(cluster))
    rng = random.Random(7)
    for step in range(24):
        change = random_change(cluster, rng, KINDS[step % len(KINDS)])
        apply_change(cluster, change)
        live.apply(copy.deepcopy(change.before), copy.deepcopy(change.after))
        assert live.state.full_builds == 1, "a one-object change rebuilt the engine"
        assert live.state.last_delta_size >= 1
    fresh_project = project_of(cluster)
    fresh = NativeEngine(fresh_project.policy_set, fresh_project.inventory)
    engine = live.snapshot()
    assert live.state.deltas == 25, "the snapshot sent a delta of its own"
    # The project-level diff finds nothing left: the per-object changes sent everything.
    live.state.update(live.policy_set(), live.inventory)
    assert live.state.last_delta_size == 0
    pods = [e for e in fresh_project.inventory.endpoints if e.ips and not e.host_network]
    r = random.Random(3)
    for _ in range(400):
        a, b = r.choice(pods), r.choice(pods)
        flow = Flow(FlowEnd(None, a.ips[0]), FlowEnd(None, b.ips[0]), 6, 40000, r.choice([53, 80, 8080, 9090, 5432]))
        assert engine.evaluate(flow).to_json() == fresh.evaluate(flow).to_json(), flow


def test_invalid_change_and_unsupported_kinds_are_refused() -> None:
    cluster = generate(120, seed=2)
    live = LiveProject(project_of(cluster))
    pod = copy.deepcopy(next(iter(cluster.pods.values())))
    pod["status"]["podIP"] = "not-an-ip"
    with pytest.raises(InvalidInput):
        live.apply(None, pod)
    assert live.state.deltas == 1
    tier = copy.deepcopy(next(iter(cluster.tiers.values())))
    with pytest.raises(UnsupportedChange, match="reload the project"):
        live.apply(tier, tier)
    staged = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "StagedNetworkPolicy",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {"selector": "all()"},
    }
    with pytest.raises(UnsupportedChange, match="reload the project"):  # never in the engine
        live.apply(None, staged)
    service = copy.deepcopy(next(iter(cluster.services.values())))
    with pytest.raises(UnsupportedChange, match="index_slices"):  # which slices exist is not known
        live.apply(None, {**service, "spec": {**service["spec"], "selector": None}})


def test_node_scoping_follows_pods_moving_between_nodes() -> None:
    """``enforce --node``: only this node's pods have their policy applied; a pod scheduled
    here (or away) changes that by its own delta, and the result equals a fresh build and the
    reference evaluator."""
    from pyclassify.reference import evaluate

    cluster = generate(300, seed=5)
    project = project_of(cluster)
    here = sorted({e.node for e in project.inventory.endpoints if e.node})[0]
    project.inventory.enforcing_node = here
    live = LiveProject(project)
    enforced = [e for e in project.inventory.endpoints if e.node == here]
    assert 0 < len(enforced) < len(project.inventory.endpoints)
    # Move three pods here and three away, one change each.
    away = [p for p in cluster.pods.values() if p["spec"]["nodeName"] != here][:3]
    home = [p for p in cluster.pods.values() if p["spec"]["nodeName"] == here][:3]
    for pod, node in [*((p, here) for p in away), *((p, "elsewhere") for p in home)]:
        before = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = node
        live.apply(before, copy.deepcopy(pod))
    assert live.state.full_builds == 1
    fresh_project = project_of(cluster)
    fresh_project.inventory.enforcing_node = here
    fresh = NativeEngine(fresh_project.policy_set, fresh_project.inventory)
    engine = live.snapshot()
    live.state.update(live.policy_set(), live.inventory)
    assert live.state.last_delta_size == 0  # the per-object changes sent everything
    pods = [e for e in fresh_project.inventory.endpoints if e.ips and not e.host_network]
    unscoped = NativeEngine(fresh_project.policy_set, dataclasses.replace(fresh_project.inventory, enforcing_node=None))
    r = random.Random(11)
    differs = 0
    for _ in range(600):
        a, b = r.choice(pods), r.choice(pods)
        flow = Flow(FlowEnd(None, a.ips[0]), FlowEnd(None, b.ips[0]), 6, 40000, r.choice([53, 80, 8080, 9090, 5432]))
        got = engine.evaluate(flow)
        assert got.to_json() == fresh.evaluate(flow).to_json(), flow
        assert got.to_json() == evaluate(fresh_project.policy_set, fresh_project.inventory, flow).to_json(), flow
        # Another node's side is not judged here.
        if a.node != here:
            assert got.egress is None
        if b.node != here:
            assert got.ingress is None
        differs += got.allowed != unscoped.evaluate(flow).allowed
    assert differs > 0, "no flow whose verdict depends on the node: the test shows nothing"


def test_nodes_service_accounts_services_and_slices_one_at_a_time() -> None:
    """Nodes, ServiceAccounts, Services and EndpointSlices as per-object changes: each one
    delta (a node heartbeat none), and the result equals a fresh build, service addresses and
    service-account labels included."""
    cluster = generate(300, seed=6)
    slices: dict[tuple[str, str], dict] = {}
    live = LiveProject(project_of(cluster))
    live.index_slices([])
    deltas = live.state.deltas

    def change(before, after, expect_delta=True):
        nonlocal deltas
        live.apply(copy.deepcopy(before), copy.deepcopy(after))
        assert live.state.deltas == deltas + expect_delta, (before or after)["kind"]
        deltas = live.state.deltas

    node = next(iter(cluster.nodes.values()))
    beat = copy.deepcopy(node)
    beat.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
    beat["metadata"]["resourceVersion"] = "9999"
    change(node, beat, expect_delta=False)  # a heartbeat: nothing policy reads
    relabelled = copy.deepcopy(beat)
    relabelled["metadata"]["labels"]["pool"] = "gpu"
    change(beat, relabelled)
    cluster.nodes[next(iter(cluster.nodes))] = relabelled

    used = {(e.namespace, e.service_account) for e in live.inventory.endpoints}
    sa_key, sa = next(
        (k, v)
        for k, v in cluster.service_accounts.items()
        if (v["metadata"]["namespace"], v["metadata"]["name"]) in used
    )
    sa2 = copy.deepcopy(sa)
    sa2["metadata"].setdefault("labels", {})["trusted"] = "yes"
    change(sa, sa2)
    cluster.service_accounts[sa_key] = sa2

    svc_key, svc = next((k, v) for k, v in cluster.services.items() if v["spec"].get("selector"))
    narrowed = copy.deepcopy(svc)
    narrowed["spec"]["selector"] = {**svc["spec"]["selector"], "absent": "label"}
    change(svc, narrowed)
    cluster.services[svc_key] = narrowed
    ns, name = svc_key
    addresses = [e.ips[0] for e in live.inventory.endpoints if e.namespace == ns and e.ips][:2]
    assert live.inventory.services[svc_key].endpoint_ips == ()  # selects nothing now
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{name}-abc", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [str(a)]} for a in addresses],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }
    change(None, slice_)
    assert live.inventory.services[svc_key].endpoint_ips == tuple(addresses)
    assert live.inventory.services[svc_key].from_slices
    heartbeat = copy.deepcopy(slice_)
    heartbeat["endpoints"][0]["conditions"] = {"ready": False}  # pyclassify does not read conditions
    change(slice_, heartbeat, expect_delta=False)
    slices[(ns, slice_["metadata"]["name"])] = heartbeat
    other = next(k for k, v in cluster.services.items() if k != svc_key and v["spec"].get("selector"))
    gone = cluster.services.pop(other)
    change(gone, None)

    engine = live.snapshot()
    live.state.update(live.policy_set(), live.inventory)
    assert live.state.last_delta_size == 0  # the per-object changes sent everything
    docs = [Document(copy.deepcopy(o), "cluster", 1) for o in [*cluster.objects(), *slices.values()]]
    fresh_project = build_project(docs, Problems())
    assert fresh_project.inventory.services == live.inventory.services
    assert fresh_project.inventory.service_accounts == live.inventory.service_accounts
    assert fresh_project.inventory.nodes == live.inventory.nodes
    fresh = NativeEngine(fresh_project.policy_set, fresh_project.inventory)
    pods = [e for e in fresh_project.inventory.endpoints if e.ips and not e.host_network]
    targets = [
        *(ip for s in fresh_project.inventory.services.values() for ip in s.cluster_ips),
        *(p.ips[0] for p in pods),
    ]
    r = random.Random(5)
    for _ in range(400):
        flow = Flow(
            FlowEnd(None, r.choice(pods).ips[0]),
            FlowEnd(None, r.choice(targets)),
            6,
            40000,
            r.choice([53, 80, 8080, 9090, 5432]),
        )
        assert engine.evaluate(flow).to_json() == fresh.evaluate(flow).to_json(), flow
