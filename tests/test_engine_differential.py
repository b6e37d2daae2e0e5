"""Differential test: the native engine and the pure-Python reference evaluator give the same
verdict, the same deciding tier, policy and rule, and the same Log trail, on random policy sets
and inventories that use every field of the IR, for random flows among them."""

from __future__ import annotations

import dataclasses
import ipaddress

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify.batch import FLAG_HAS_PORTS, new_batch
from pyclassify.engine import NativeEngine
from pyclassify.inventory import (
    ContainerPort,
    Endpoint,
    Inventory,
    Namespace,
    NetworkSet,
    Node,
    Service,
    ServiceAccount,
    ServicePort,
)
from pyclassify.ir import (
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Profile,
    Relation,
    Rule,
    ServiceRef,
    Subject,
    Tier,
)
from pyclassify.reference import Flow, FlowEnd, evaluate
from pyclassify.selector import Selector
from tests.evaluators import packet_batch

NAMESPACES = ["a", "b", "c"]
ADDRS = [f"10.0.0.{i}" for i in range(1, 9)] + ["fd00::1", "fd00::2", "192.168.9.9"]
NETS = [
    "10.0.0.0/29",
    "10.0.0.4/30",
    "10.0.0.0/8",
    "0.0.0.0/0",
    "fd00::/64",
    "::/0",
    "10.0.0.1/32",
    "203.0.113.0/24",
]  # holds an outside address of flow_st
SELECTORS = ["all()", "app == 'x'", "app in {'x','y'}", "has(tier)", "!has(app)", "tier != 'db'", "role == 'lb'"]
NS_SELECTORS = ["all()", "team == 'red'", "has(team)", "global()", "kubernetes.io/metadata.name == 'a'"]
PORT_NAMES = ["http", "dns", "metrics"]
PROTOCOLS = [6, 17, 1, 58, 132, 136, 47]

labels_st = st.dictionaries(
    st.sampled_from(["app", "tier", "role"]), st.sampled_from(["x", "y", "db", "lb"]), max_size=2
)
selector_st = st.sampled_from(SELECTORS).map(Selector)
net_st = st.sampled_from(NETS).map(ipaddress.ip_network)


@st.composite
def port_match_st(draw):
    protocol = draw(st.sampled_from([None, 6, 17, 132]))
    kind = draw(st.sampled_from(["any", "range", "named"]))
    if kind == "any":
        return PortMatch(protocol, None)
    if kind == "named":
        return PortMatch(protocol, NamedPort(draw(st.sampled_from(PORT_NAMES))))
    first = draw(st.sampled_from([53, 80, 443, 1000, 8080]))
    return PortMatch(protocol, PortRange(first, first + draw(st.sampled_from([0, 1, 100, 10000]))))


@st.composite
def entity_st(draw):
    if draw(st.integers(0, 9)) == 0:
        # Calico's notSelector-only peer (namespaced policy: scoped to its namespace), which
        # matches addresses nothing owns and excludes network sets' addresses it matches.
        return EntityMatch(not_selector=draw(selector_st), namespace=draw(st.sampled_from([None, None, *NAMESPACES])))
    fields = draw(
        st.sets(
            st.sampled_from(
                [
                    "nets",
                    "not_nets",
                    "selector",
                    "not_selector",
                    "kinds",
                    "namespace",
                    "namespace_selector",
                    "relation",
                    "same_labels",
                    "not_same_labels",
                    "sa_names",
                    "sa_selector",
                    "service",
                    "node",
                    "domains",
                    "ports",
                    "not_ports",
                    "unresolvable",
                ]
            ),
            max_size=3,
        )
    )
    kw: dict = {}
    if "nets" in fields:
        kw["nets"] = tuple(draw(st.lists(net_st, min_size=1, max_size=2)))
    if "not_nets" in fields:
        kw["not_nets"] = tuple(draw(st.lists(net_st, min_size=1, max_size=2)))
    if "selector" in fields:
        kw["selector"] = draw(selector_st)
    if "not_selector" in fields:
        kw["not_selector"] = draw(selector_st)
    if "kinds" in fields:
        kw["endpoint_kinds"] = frozenset(draw(st.sets(st.sampled_from(list(EndpointKind)), min_size=1)))
    if "namespace" in fields:
        kw["namespace"] = draw(st.sampled_from(NAMESPACES))
    if "namespace_selector" in fields:
        kw["namespace_selector"] = Selector(draw(st.sampled_from(NS_SELECTORS)))
    if "relation" in fields:
        kw["namespace_relation"] = draw(st.sampled_from(list(Relation)))
    if "same_labels" in fields:
        kw["same_labels"] = ("team",)
    if "not_same_labels" in fields:
        kw["not_same_labels"] = ("team",)
    if "sa_names" in fields:
        kw["service_account_names"] = frozenset(draw(st.sets(st.sampled_from(["default", "web"]), min_size=1)))
    if "sa_selector" in fields:
        kw["service_account_selector"] = Selector(draw(st.sampled_from(["all()", "trusted == 'yes'"])))
    if "service" in fields:
        kw["service"] = ServiceRef(draw(st.sampled_from(["svc", "missing"])), "a")
    if "node" in fields:
        kw["node_selector"] = Selector(draw(st.sampled_from(["all()", "zone == 'z1'"])))
    if "domains" in fields:
        kw["domains"] = ("example.com",)
    if "ports" in fields:
        kw["ports"] = tuple(draw(st.lists(port_match_st(), min_size=1, max_size=2)))
    if "not_ports" in fields:
        kw["not_ports"] = tuple(draw(st.lists(port_match_st(), min_size=1, max_size=2)))
    if "unresolvable" in fields:
        kw["unresolvable"] = "peer kind not understood"
    return EntityMatch(**kw)


@st.composite
def rule_st(draw, index: int):
    icmp = st.none() | st.builds(IcmpMatch, st.sampled_from([None, 0, 3, 8]), st.sampled_from([None, 0, 1]))
    return Rule(
        action=draw(st.sampled_from(list(Action))),
        index=index,
        name=draw(st.sampled_from([None, f"r{index}"])),
        ip_version=draw(st.sampled_from([None, None, 4, 6])),
        protocols=draw(st.none() | st.frozensets(st.sampled_from(PROTOCOLS), min_size=1, max_size=2)),
        not_protocols=draw(st.frozensets(st.sampled_from(PROTOCOLS), max_size=1)),
        icmp=draw(icmp),
        not_icmp=draw(icmp),
        sources=tuple(draw(st.lists(entity_st(), max_size=2))),
        destinations=tuple(draw(st.lists(entity_st(), max_size=2))),
    )


@st.composite
def rules_st(draw):
    n = draw(st.integers(0, 3))
    return tuple(draw(rule_st(i)) for i in range(n))


@st.composite
def policy_st(draw, index: int):
    tier = draw(st.sampled_from(["kube-admin", "security", "default", "kube-baseline"]))
    subject = Subject(
        selector=draw(selector_st),
        endpoint_kinds=frozenset(draw(st.sets(st.sampled_from([EndpointKind.POD, EndpointKind.HOST]), min_size=1))),
        namespace=draw(st.sampled_from([None, None, *NAMESPACES])),
        namespace_selector=draw(st.none() | st.sampled_from(NS_SELECTORS[:3]).map(Selector)),
        service_account_selector=draw(st.none() | st.just(Selector("trusted == 'yes'"))),
    )
    types = frozenset(draw(st.sets(st.sampled_from(list(Direction)), min_size=1)))
    return Policy(
        kind=draw(st.sampled_from(["NetworkPolicy", "GlobalNetworkPolicy", "AdminNetworkPolicy"])),
        namespace=None,
        name=f"p{index}",
        tier=tier,
        order=draw(st.sampled_from([None, 1.0, 2.0])),
        subject=subject,
        types=types,
        ingress=draw(rules_st()),
        egress=draw(rules_st()),
    )


@st.composite
def world_st(draw):
    namespaces = {
        n: Namespace(
            n, {"kubernetes.io/metadata.name": n, **draw(st.sampled_from([{}, {"team": "red"}, {"team": "blue"}]))}
        )
        for n in NAMESPACES
    }
    endpoints = []
    for i in range(draw(st.integers(1, 6))):
        ips = tuple(ipaddress.ip_address(a) for a in draw(st.lists(st.sampled_from(ADDRS), max_size=2, unique=True)))
        ports = tuple(
            ContainerPort(
                draw(st.sampled_from([53, 80, 8080, 9090])),
                draw(st.sampled_from([6, 17])),
                draw(st.sampled_from([None, *PORT_NAMES])),
            )
            for _ in range(draw(st.integers(0, 2)))
        )
        host = draw(st.integers(0, 5)) == 0
        endpoints.append(
            Endpoint(
                kind=EndpointKind.HOST if host else EndpointKind.POD,
                name=f"e{i}",
                namespace=None if host else draw(st.sampled_from(NAMESPACES)),
                labels=draw(labels_st),
                ips=ips,
                ports=ports,
                service_account=None if host else draw(st.sampled_from([None, "default", "web"])),
                host_network=(not host) and draw(st.integers(0, 6)) == 0,
                node=draw(st.sampled_from([None, "n1", "n2"])),
                profiles=tuple(draw(st.lists(st.sampled_from(["prof", "nope"]), max_size=2))),
            )
        )
    inventory = Inventory(
        namespaces=namespaces,
        endpoints=endpoints,
        network_sets=[
            NetworkSet(
                f"ns{i}",
                draw(st.sampled_from([None, "a"])),
                draw(labels_st),
                tuple(draw(st.lists(net_st, min_size=1, max_size=2))),
            )
            for i in range(draw(st.integers(0, 2)))
        ],
        nodes={"n1": Node("n1", {"zone": "z1"}, (ipaddress.ip_address("10.0.0.7"),))},
        services={
            ("a", "svc"): Service(
                "svc",
                "a",
                draw(st.sampled_from([None, {"app": "x"}])),
                (ipaddress.ip_address("10.0.0.8"),),
                (ServicePort(80, draw(st.sampled_from([8080, "http", None])), 6),),
            )
        },
        service_accounts={("a", "web"): ServiceAccount("web", "a", {"trusted": "yes"})},
        # enforce --node: another node's endpoints are peers only.
        enforcing_node=draw(st.sampled_from([None, None, "n1"])),
    )
    policies = [draw(policy_st(i)) for i in range(draw(st.integers(0, 4)))]
    tiers = [Tier("security", 500.0, draw(st.sampled_from([Action.DENY, Action.PASS])))]
    profiles = [Profile("prof", ingress=draw(rules_st()), egress=draw(rules_st()))] if draw(st.booleans()) else []
    return PolicySet.build(policies, tiers, profiles), inventory


@st.composite
def flow_st(draw, inventory: Inventory):
    def end():
        choice = draw(st.integers(0, 2))
        if choice == 0 and inventory.endpoints:
            ep = draw(st.sampled_from(inventory.endpoints))
            return FlowEnd(ep, draw(st.sampled_from([None, *ep.ips])) if ep.ips else None)
        return FlowEnd(None, ipaddress.ip_address(draw(st.sampled_from(ADDRS + ["203.0.113.5", "2001:db8::5"]))))

    src, dst = end(), end()
    protocol = draw(st.sampled_from(PROTOCOLS))
    icmp = protocol in (1, 58)
    return Flow(
        src,
        dst,
        protocol,
        draw(st.sampled_from([None, 1000, 40000])) if not icmp else None,
        draw(st.sampled_from([None, 53, 80, 443, 1000, 8080, 9090])) if not icmp else None,
        draw(st.sampled_from([None, 0, 3, 8])) if icmp else None,
        draw(st.sampled_from([None, 0, 1])) if icmp else None,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_native_engine_equals_reference(data):
    policy_set, inventory = data.draw(world_st())
    engine = NativeEngine(policy_set, inventory)
    defaults = data.draw(st.sampled_from([{}, {"default_pod": "deny", "default_host": "allow"}]))
    for _ in range(20):
        flow = data.draw(flow_st(inventory))
        want = evaluate(policy_set, inventory, flow, **defaults)
        got = engine.evaluate(flow, **defaults)
        assert got.to_json() == want.to_json(), flow


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_not_selector_peers_equal_reference(data):
    """Calico notSelector-only peers, first in force: outside addresses, network sets (global
    and namespaced) and endpoints of every kind on both sides."""
    policy_set, inventory = data.draw(world_st())
    inventory.network_sets.append(
        NetworkSet(
            "outside",
            data.draw(st.sampled_from([None, "a"])),
            data.draw(labels_st),
            (ipaddress.ip_network("203.0.113.0/24"),),
        )
    )

    def peer():
        return EntityMatch(
            not_selector=data.draw(selector_st),
            namespace=data.draw(st.sampled_from([None, None, *NAMESPACES])),
            endpoint_kinds=data.draw(
                st.sampled_from([None, None, None, frozenset({EndpointKind.POD}), frozenset(EndpointKind)])
            ),
        )

    rules = tuple(
        Rule(
            action=data.draw(st.sampled_from([Action.ALLOW, Action.DENY])),
            index=i,
            sources=(peer(),) if i % 2 == 0 else (),
            destinations=(peer(),) if i % 2 else (),
        )
        for i in range(data.draw(st.integers(1, 3)))
    )
    first = Policy(
        kind="GlobalNetworkPolicy",
        namespace=None,
        name="notsel",
        tier="kube-admin",
        order=0.0,
        subject=Subject(selector=Selector.all()),
        types=frozenset(Direction),
        ingress=rules,
        egress=rules,
    )
    policy_set = PolicySet.build([first, *policy_set.policies], list(policy_set.tiers), list(policy_set.profiles))
    engine = NativeEngine(policy_set, inventory)
    for _ in range(20):
        flow = data.draw(flow_st(inventory))
        want = evaluate(policy_set, inventory, flow)
        assert engine.evaluate(flow).to_json() == want.to_json(), flow


DOMAIN_PATTERNS = ["api.example.com", "*.example.com", "www.*.org", "update.*", "db.example.net"]
DOMAIN_NAMES = [
    "api.example.com",
    "a.b.example.com",
    "example.com",
    "www.x.org",
    "www.x.y.org",
    "update.z",
    "db.example.net",
    "other.net",
]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_domain_peers_equal_reference(data):
    """Domain peers (Calico ``domains``, ANP ``domainNames``) over what DNS taught: names to
    addresses (inside the inventory and outside it), each for a TTL from its time, judged at
    flow times before, inside and after the windows, and with no time."""
    from pyclassify import domains

    policy_set, inventory = data.draw(world_st())
    facts = inventory.domains = domains.new_facts(grace_s=data.draw(st.sampled_from([0, 5])))
    addresses = ADDRS + ["203.0.113.5", "2001:db8::5"]
    for _ in range(data.draw(st.integers(0, 8))):
        facts.learn(
            data.draw(st.sampled_from(DOMAIN_NAMES)),
            data.draw(st.sampled_from(addresses)),
            data.draw(st.sampled_from([0, 10, 60])),
            data.draw(st.sampled_from([100, 120])) * 10**9,
        )

    def peer():
        return EntityMatch(
            domains=tuple(data.draw(st.lists(st.sampled_from(DOMAIN_PATTERNS), min_size=1, max_size=2))),
            ports=data.draw(st.sampled_from([(), (PortMatch(6, PortRange(443, 443)),)])),
        )

    rules = tuple(
        Rule(action=data.draw(st.sampled_from([Action.ALLOW, Action.DENY])), index=i, destinations=(peer(),))
        for i in range(data.draw(st.integers(1, 3)))
    )
    first = Policy(
        kind="GlobalNetworkPolicy",
        namespace=None,
        name="names",
        tier="kube-admin",
        order=0.0,
        subject=Subject(selector=Selector.all()),
        types=frozenset({Direction.EGRESS}),
        egress=rules,
    )
    policy_set = PolicySet.build([first, *policy_set.policies], list(policy_set.tiers), list(policy_set.profiles))
    engine = NativeEngine(policy_set, inventory)
    for _ in range(20):
        flow = dataclasses.replace(
            data.draw(flow_st(inventory)),
            ts_ns=data.draw(
                st.sampled_from([None, 50 * 10**9, 101 * 10**9, 115 * 10**9, 125 * 10**9, 131 * 10**9, 200 * 10**9])
            ),
        )
        want = evaluate(policy_set, inventory, flow)
        assert engine.evaluate(flow).to_json() == want.to_json(), flow


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_batch_classify_equals_reference(data):
    """The batch path (IP-only ends, as packets are) agrees with the reference per packet."""
    policy_set, inventory = data.draw(world_st())
    engine = NativeEngine(policy_set, inventory)
    flows = [data.draw(flow_st(inventory)) for _ in range(16)]
    flows = [
        Flow(
            FlowEnd(None, f.src.address or ipaddress.ip_address("203.0.113.1")),
            FlowEnd(None, f.dst.address or ipaddress.ip_address("203.0.113.2")),
            *_rest(f),
        )
        for f in flows
    ]
    flows = [f for f in flows if f.src.ip.version == f.dst.ip.version]
    batch = packet_batch(flows)
    got = engine.classify(batch)
    for f, verdict, row in zip(flows, got, batch):
        packet = Flow(
            f.src,
            f.dst,
            f.protocol,
            f.sport if row["flags"] & FLAG_HAS_PORTS else None,
            f.dport if row["flags"] & FLAG_HAS_PORTS else None,
            (f.icmp_type or 0) if f.protocol in (1, 58) else None,
            (f.icmp_code or 0) if f.protocol in (1, 58) else None,
        )
        assert bool(verdict) == evaluate(policy_set, inventory, packet).allowed, packet


def _rest(f: Flow) -> tuple:
    return (f.protocol, f.sport, f.dport, f.icmp_type, f.icmp_code)


def test_batch_rejects_wrong_dtype_and_layout():
    import pytest

    engine = NativeEngine(PolicySet.build([]), Inventory())
    with pytest.raises(TypeError):
        engine.classify(np.zeros(4, dtype=np.uint8))
    assert engine.classify(new_batch(0)).shape == (0,)
    verdicts = engine.classify(new_batch(3))  # ip_version 0: undecodable, denied before parsing
    assert verdicts.tolist() == [0, 0, 0]


def test_end_of_tier_decisions_name_the_same_policies_in_both_evaluators():
    """A deny at a tier's end names the policies of that tier that selected the endpoint: the
    reference lists them, the engine reports them (per flow, and for a packet's side record)."""
    from pyclassify.project import load_project

    project = load_project(["examples/demo"])
    engine = NativeEngine(project.policy_set, project.inventory)
    named = 0
    pods = [e for e in project.inventory.endpoints if e.ips]
    flows, wants = [], []
    for a in pods:
        for b in pods:
            for protocol, port in ((6, 5432), (17, 9999), (6, 8080), (132, 1)):
                flow = Flow(FlowEnd(a, a.ips[0]), FlowEnd(b, b.ips[0]), protocol, 40000, port)
                want = evaluate(project.policy_set, project.inventory, flow)
                assert engine.evaluate(flow).to_json() == want.to_json(), flow
                flows.append(flow)
                wants.append(want)
                named += sum(
                    d is not None and d.reason == "end-of-tier" and bool(d.policies)
                    for d in (want.egress, want.ingress)
                )
    assert named
    # the packet path: a side record and the address of its endpoint name the same policies
    records = engine.judge(packet_batch(flows))
    for flow, want, rec in zip(flows, wants, records):
        for d, name, direction, end in (
            (want.egress, "egress", Direction.EGRESS, flow.src),
            (want.ingress, "ingress", Direction.INGRESS, flow.dst),
        ):
            got = engine.side_decision(rec[name], direction, str(end.ip))
            plain = lambda x: None if x is None else {k: v for k, v in x.to_json().items() if k != "logs"}  # noqa: E731
            assert plain(got) == plain(d), (flow, name)  # a record counts Log rules, does not name them
