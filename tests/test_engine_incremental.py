"""Incremental updates: random sequences of changes of every kind, each applied to the running
engine as a delta (``NativeEngine.update``), give on random flows the same verdict, tier,
policy, rule and Log trail as an engine built fresh for the same state and as the reference
evaluator; old snapshots keep answering as they did; and the engine state counts one build."""

from __future__ import annotations

import dataclasses
import ipaddress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify.engine import NativeEngine
from pyclassify.inventory import (
    ContainerPort,
    Endpoint,
    Inventory,
    Namespace,
    NetworkSet,
    Node,
    ServiceAccount,
)
from pyclassify.ir import Action, Direction, EndpointKind, PolicySet, Profile, Tier
from pyclassify.reference import Flow, FlowEnd, evaluate
from tests.evaluators import packet_batch
from tests.test_engine_differential import (
    ADDRS,
    NAMESPACES,
    PORT_NAMES,
    flow_st,
    labels_st,
    net_st,
    policy_st,
    rules_st,
    world_st,
)

KINDS = [
    "pod added",
    "pod removed",
    "pod relabelled",
    "pod readdressed",
    "pod ports",
    "pod account",
    "namespace relabelled",
    "policy added",
    "policy changed",
    "policy removed",
    "network set",
    "profile",
    "service",
    "node relabelled",
    "account relabelled",
    "tier default",
]


@dataclasses.dataclass
class World:
    policies: list
    tiers: list
    profiles: list
    inventory: Inventory

    def policy_set(self) -> PolicySet:
        return PolicySet.build(list(self.policies), list(self.tiers), list(self.profiles))


def _endpoint(draw, i: int) -> Endpoint:
    host = draw(st.integers(0, 5)) == 0
    return Endpoint(
        kind=EndpointKind.HOST if host else EndpointKind.POD,
        name=f"new{i}",
        namespace=None if host else draw(st.sampled_from(NAMESPACES)),
        labels=draw(labels_st),
        ips=tuple(ipaddress.ip_address(a) for a in draw(st.lists(st.sampled_from(ADDRS), max_size=2, unique=True))),
        ports=tuple(
            ContainerPort(draw(st.sampled_from([53, 80, 8080])), 6, draw(st.sampled_from([None, *PORT_NAMES])))
            for _ in range(draw(st.integers(0, 2)))
        ),
        service_account=None if host else draw(st.sampled_from([None, "default", "web"])),
        host_network=(not host) and draw(st.integers(0, 6)) == 0,
        profiles=tuple(draw(st.lists(st.sampled_from(["prof", "nope"]), max_size=1))),
    )


def mutate(draw, w: World, step: int) -> str:
    kind = draw(st.sampled_from(KINDS))
    inv = w.inventory
    eps = list(inv.endpoints)
    pick = (lambda: draw(st.integers(0, len(eps) - 1))) if eps else None
    if kind == "pod added" or (pick is None and kind.startswith("pod")):
        eps.append(_endpoint(draw, step))
    elif kind == "pod removed":
        eps.pop(pick())
    elif kind == "pod relabelled":
        i = pick()
        eps[i] = dataclasses.replace(eps[i], labels=draw(labels_st))
    elif kind == "pod readdressed":
        i = pick()
        ips = draw(st.lists(st.sampled_from(ADDRS), max_size=2, unique=True))
        eps[i] = dataclasses.replace(eps[i], ips=tuple(ipaddress.ip_address(a) for a in ips))
    elif kind == "pod ports":
        i = pick()
        eps[i] = dataclasses.replace(
            eps[i], ports=(ContainerPort(draw(st.sampled_from([80, 9090])), 6, draw(st.sampled_from(PORT_NAMES))),)
        )
    elif kind == "pod account":
        i = pick()
        if eps[i].kind is EndpointKind.POD:
            eps[i] = dataclasses.replace(eps[i], service_account=draw(st.sampled_from([None, "default", "web"])))
    namespaces = dict(inv.namespaces)
    if kind == "namespace relabelled":
        n = draw(st.sampled_from(NAMESPACES))
        namespaces[n] = Namespace(
            n, {"kubernetes.io/metadata.name": n, **draw(st.sampled_from([{}, {"team": "red"}, {"team": "blue"}]))}
        )
    if kind == "policy added":
        w.policies.append(dataclasses.replace(draw(policy_st(100 + step))))
    elif kind == "policy changed" and w.policies:
        i = draw(st.integers(0, len(w.policies) - 1))
        fresh = draw(policy_st(i))
        w.policies[i] = dataclasses.replace(fresh, name=w.policies[i].name, kind=w.policies[i].kind)
    elif kind == "policy removed" and w.policies:
        w.policies.pop(draw(st.integers(0, len(w.policies) - 1)))
    network_sets = list(inv.network_sets)
    if kind == "network set":
        if network_sets and draw(st.booleans()):
            network_sets.pop(0)
        else:
            network_sets.append(
                NetworkSet(
                    f"set{step}",
                    draw(st.sampled_from([None, "a"])),
                    draw(labels_st),
                    tuple(draw(st.lists(net_st, min_size=1, max_size=2))),
                )
            )
    if kind == "profile":
        w.profiles = (
            []
            if w.profiles and draw(st.booleans())
            else [Profile("prof", ingress=draw(rules_st()), egress=draw(rules_st()))]
        )
    services = dict(inv.services)
    if kind == "service":
        svc = services[("a", "svc")]
        services[("a", "svc")] = dataclasses.replace(
            svc, selector=draw(st.sampled_from([None, {"app": "x"}, {"app": "y"}]))
        )
    nodes = dict(inv.nodes)
    if kind == "node relabelled":
        nodes["n1"] = Node("n1", {"zone": draw(st.sampled_from(["z1", "z2"]))}, (ipaddress.ip_address("10.0.0.7"),))
    accounts = dict(inv.service_accounts)
    if kind == "account relabelled":
        accounts[("a", "web")] = ServiceAccount("web", "a", draw(st.sampled_from([{}, {"trusted": "yes"}])))
    if kind == "tier default":
        w.tiers = [Tier("security", 500.0, draw(st.sampled_from([Action.DENY, Action.PASS, Action.ALLOW])))]
    w.inventory = Inventory(
        namespaces=namespaces,
        endpoints=eps,
        network_sets=network_sets,
        nodes=nodes,
        services=services,
        service_accounts=accounts,
    )
    return kind


def _plain(d) -> dict | None:
    """A decision without its Log trail (batch records carry none)."""
    if d is None:
        return None
    out = d.to_json()
    out.pop("logs")
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_changes_applied_as_deltas_equal_a_fresh_build_and_the_reference(data):
    policy_set, inventory = data.draw(world_st())
    w = World(
        list(policy_set.policies),
        [t for t in policy_set.tiers if t.name == "security"],
        list(policy_set.profiles),
        inventory,
    )
    engine = NativeEngine(w.policy_set(), w.inventory)
    state = engine.state
    for step in range(data.draw(st.integers(1, 8))):
        before = engine
        probe = data.draw(flow_st(before.inventory))
        old_answer = before.evaluate(probe).to_json()
        kind = mutate(data.draw, w, step)
        ps, inv = w.policy_set(), w.inventory
        engine = engine.update(ps, inv)
        fresh = NativeEngine(ps, inv)
        for _ in range(12):
            flow = data.draw(flow_st(inv))
            want = evaluate(ps, inv, flow).to_json()
            assert engine.evaluate(flow).to_json() == want, (kind, flow)
            assert fresh.evaluate(flow).to_json() == want, (kind, flow)
        ip_flows = [data.draw(flow_st(inv)) for _ in range(12)]
        ip_flows = [
            Flow(
                FlowEnd(None, f.src.address or ipaddress.ip_address("203.0.113.1")),
                FlowEnd(None, f.dst.address or ipaddress.ip_address("203.0.113.2")),
                f.protocol,
                f.sport,
                f.dport,
                f.icmp_type,
                f.icmp_code,
            )
            for f in ip_flows
        ]
        ip_flows = [f for f in ip_flows if f.src.ip.version == f.dst.ip.version]
        # as the packets carry them: ICMP always has a type and code
        ip_flows = [
            dataclasses.replace(f, icmp_type=f.icmp_type or 0, icmp_code=f.icmp_code or 0)
            if f.protocol in (1, 58)
            else f
            for f in ip_flows
        ]
        batch = packet_batch(ip_flows)
        for e in (engine, fresh):
            # The batch path (through the decision memo): verdict, tier, policy and rule by name.
            for f, rec in zip(ip_flows, e.judge(batch)):
                want = evaluate(ps, inv, f)
                assert bool(rec["allow"]) == want.allowed, (kind, f)
                for name, d, end in (("egress", want.egress, f.src), ("ingress", want.ingress, f.dst)):
                    # the end's address names the endpoint whose isolating policies a tier's end names
                    got = e.side_decision(rec[name], Direction(name), str(end.ip))
                    assert _plain(got) == _plain(d), (kind, name, f)
        # the snapshot from before the change still answers as it did
        assert before.evaluate(probe).to_json() == old_answer, kind
    assert state.full_builds == 1 and engine.state is state
