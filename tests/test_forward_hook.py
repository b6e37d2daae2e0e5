"""A host endpoint's forward hook (applyOnForward policy on traffic the host routes), as the live
forward loops judge it (``NativeEngine.judge_via``, the Rust ``engine::forward``), against the
reference evaluator's forward step (``hostpath.forward_step``, what ``explain --in-via`` shows):
the same outcome and the same deciding tier, policy and rule, on random policy sets and
inventories, for packets (address-only ends) crossing a random host endpoint either way."""

from __future__ import annotations

import dataclasses
import ipaddress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify.engine import NativeEngine
from pyclassify.hostpath import forward_step
from pyclassify.inventory import Endpoint, Inventory
from pyclassify.ir import Direction, EndpointKind, Hook, Policy, PolicySet, Subject
from pyclassify.reference import Flow, FlowEnd, evaluate
from pyclassify.selector import Selector
from tests.evaluators import packet_batch
from tests.test_engine_differential import flow_st, rules_st, world_st

GATEWAY = Endpoint(kind=EndpointKind.HOST, name="gw-eth1", namespace=None, labels={"role": "lb"}, interface="eth1")


def _as_packet(f: Flow) -> Flow:
    """The flow as a packet carries it: address-only ends, ports only with both."""
    ports = f.sport is not None and f.dport is not None
    icmp = f.protocol in (1, 58)
    return Flow(
        FlowEnd(None, f.src.address or ipaddress.ip_address("203.0.113.1")),
        FlowEnd(None, f.dst.address or ipaddress.ip_address("203.0.113.2")),
        f.protocol,
        f.sport if ports else None,
        f.dport if ports else None,
        (f.icmp_type or 0) if icmp else None,
        (f.icmp_code or 0) if icmp else None,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_forward_loop_judges_as_the_reference_forward_step(data):
    policy_set, inventory = data.draw(world_st())
    inventory.endpoints.append(GATEWAY)
    # some of the policies apply on forward (and so to routed traffic crossing a host endpoint)
    marked = [dataclasses.replace(p, apply_on_forward=data.draw(st.booleans())) for p in policy_set.policies]
    for i in range(data.draw(st.integers(1, 2))):  # host endpoint policy, as applyOnForward is written
        marked.append(
            Policy(
                kind="GlobalNetworkPolicy",
                namespace=None,
                name=f"fwd{i}",
                tier=data.draw(st.sampled_from(["security", "default"])),
                order=data.draw(st.sampled_from([None, 1.0])),
                subject=Subject(
                    selector=data.draw(st.sampled_from([Selector.all(), Selector("role == 'lb'")])),
                    endpoint_kinds=frozenset({EndpointKind.HOST}),
                ),
                types=frozenset(data.draw(st.sets(st.sampled_from(list(Direction)), min_size=1))),
                ingress=data.draw(rules_st()),
                egress=data.draw(rules_st()),
                apply_on_forward=True,
            )
        )
    forward = PolicySet.build(marked, list(policy_set.tiers), list(policy_set.profiles)).for_hook(Hook.FORWARD)
    engine = NativeEngine(forward, inventory)
    hosts = [e for e in inventory.endpoints if e.kind is EndpointKind.HOST]
    default_host = data.draw(st.sampled_from(["deny", "allow"]))
    flows = [_as_packet(data.draw(flow_st(inventory))) for _ in range(16)]
    flows = [f for f in flows if f.src.ip.version == f.dst.ip.version]
    batch = packet_batch(flows)
    for _ in range(3):
        hep = data.draw(st.sampled_from(hosts))
        side = data.draw(st.sampled_from(list(Direction)))
        got = engine.judge_via(batch, hep, side, default_host)
        name = "ingress" if side is Direction.INGRESS else "egress"
        for f, rec in zip(flows, got):
            subject = (
                dataclasses.replace(f, dst=FlowEnd(hep, f.dst.address))
                if side is Direction.INGRESS
                else dataclasses.replace(f, src=FlowEnd(hep, f.src.address))
            )
            want = forward_step(evaluate, forward, inventory, subject, side, default_host)
            assert bool(rec["allow"]) == (want.outcome != "deny"), (f, hep.name, side, want)
            decision = engine.side_decision(rec[name], side, hep)  # the host endpoint is the subject
            assert _named(decision) == _named(want.decision), (f, hep.name, side)
            assert rec[name]["logs"] == (len(want.decision.logs) if want.decision else 0)


def _named(d) -> dict | None:
    """A decision as a verdict record names it (it counts the Log rules passed, not which)."""
    return None if d is None else {k: v for k, v in d.to_json().items() if k != "logs"}


def test_no_host_endpoint_drops_nothing():
    """A loop whose interface no host endpoint holds (any more) lets every packet on."""
    engine = NativeEngine(PolicySet.build([]), Inventory())
    flows = [
        Flow(
            FlowEnd(None, ipaddress.ip_address("10.0.0.1")),
            FlowEnd(None, ipaddress.ip_address("10.0.0.2")),
            6,
            1000,
            80,
        )
    ]
    got = engine.judge_via(packet_batch(flows), None, Direction.INGRESS)
    assert got["allow"].tolist() == [1] and not got["ingress"]["present"].any()
