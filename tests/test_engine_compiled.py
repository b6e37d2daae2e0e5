"""Compiled decisions against the rule walk, through the Python API: on random IR worlds (every
field the differential tests draw) and on a generated cluster (``bench.cluster``: Kubernetes,
Calico, AdminNetworkPolicy manifests) taking random changes, every header is judged three ways —
through the decision memo, by the compiled programs alone, and by walking the rules — and the
verdict records (verdict, tier, policy, rule, reason, Log count, awaits) must be equal; the
engine must have compiled its programs, not walked them."""

from __future__ import annotations

import copy
import ipaddress
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cluster import CHANGE_KINDS, apply_change, generate, random_change
from pyclassify.documents import Document, Problems
from pyclassify.engine import NativeEngine
from pyclassify.live import LiveProject
from pyclassify.project import build_project
from pyclassify.reference import Flow, FlowEnd
from tests.evaluators import packet_batch
from tests.test_engine_differential import flow_st, world_st


def _three_ways(engine: NativeEngine, batch: np.ndarray, **defaults: str) -> None:
    memo = engine.judge(batch, **defaults)
    compiled = engine.judge(batch, memo=False, **defaults)
    walked = engine.judge(batch, interpret=True, **defaults)
    for i in range(len(batch)):
        assert compiled[i].tobytes() == walked[i].tobytes(), (i, compiled[i], walked[i])
        assert memo[i].tobytes() == walked[i].tobytes(), (i, memo[i], walked[i])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_compiled_equals_walk_on_random_worlds(data):
    policy_set, inventory = data.draw(world_st())
    engine = NativeEngine(policy_set, inventory)
    defaults = data.draw(st.sampled_from([{}, {"default_pod": "deny", "default_host": "allow"}]))
    flows = [data.draw(flow_st(inventory)) for _ in range(24)]
    flows = [
        Flow(
            FlowEnd(None, f.src.address or ipaddress.ip_address("203.0.113.1")),
            FlowEnd(None, f.dst.address or ipaddress.ip_address("203.0.113.2")),
            f.protocol,
            f.sport,
            f.dport,
            f.icmp_type,
            f.icmp_code,
        )
        for f in flows
    ]
    flows = [f for f in flows if f.src.ip.version == f.dst.ip.version]
    if flows:
        _three_ways(engine, packet_batch(flows), **defaults)


def _pod_flows(engine: NativeEngine, rng: random.Random, n: int) -> list[Flow]:
    ips = [ip for e in engine.inventory.endpoints for ip in e.ips if ip.version == 4]
    outside = [ipaddress.ip_address(a) for a in ("8.8.8.8", "100.64.7.1", "192.168.255.9", "169.254.169.254")]
    ports = [22, 53, 80, 443, 5432, 6379, 8000, 8080, 8099, 8100, 8443, 9090, 9100, 9199, 9200, 32767, 40000]
    flows = []
    for _ in range(n):
        src, dst = (rng.choice(outside) if rng.random() < 0.1 else rng.choice(ips) for _ in range(2))
        protocol = rng.choice([6, 6, 6, 17, 17, 1, 132])
        if protocol == 1:
            flows.append(
                Flow(FlowEnd(None, src), FlowEnd(None, dst), 1, None, None, rng.choice([0, 3, 8]), rng.choice([0, 1]))
            )
        else:
            flows.append(
                Flow(
                    FlowEnd(None, src),
                    FlowEnd(None, dst),
                    protocol,
                    rng.randrange(1024, 65536),
                    rng.choice(ports) if rng.random() < 0.7 else rng.randrange(1, 65536),
                )
            )
    return flows


def test_compiled_equals_walk_on_a_cluster_taking_changes():
    cluster = generate(300, seed=5)
    project = build_project([Document(copy.deepcopy(o), "cluster.yaml", 1) for o in cluster.objects()], Problems())
    assert not project.problems.errors
    live = LiveProject(project)
    c = copy.deepcopy(cluster)
    rng = random.Random(3)
    for step in range(40):
        change = random_change(c, rng, CHANGE_KINDS[step % len(CHANGE_KINDS)])
        apply_change(c, change)
        live.apply(copy.deepcopy(change.before), copy.deepcopy(change.after))
        engine = live.snapshot()
        _three_ways(engine, packet_batch(_pod_flows(engine, rng, 400)))
        stats = engine.compile_stats  # a change's programs are compiled on first use
        assert stats["compiled"] > 0 and stats["walked_identities"] == 0, stats


def test_headers_without_a_flow_are_answered_alike_three_ways():
    """A frame that is not IP passes (reason not-IP) and an undecodable one is denied as
    malformed, whichever way the batch is judged."""
    from pyclassify.batch import ERR_UNKNOWN_ETHERTYPE, FLAG_MALFORMED, new_batch

    cluster = generate(100, seed=2)
    project = build_project([Document(copy.deepcopy(o), "cluster.yaml", 1) for o in cluster.objects()], Problems())
    engine = NativeEngine(project.policy_set, project.inventory)
    batch = new_batch(2)
    batch["flags"] = FLAG_MALFORMED
    batch["error_kind"][0] = ERR_UNKNOWN_ETHERTYPE
    _three_ways(engine, batch)
    verdicts = engine.judge(batch, memo=False)
    assert list(verdicts["allow"]) == [1, 0]
