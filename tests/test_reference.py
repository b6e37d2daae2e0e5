"""The reference evaluator over hand-built IR: every field, tier walk and default."""

from __future__ import annotations

import ipaddress

import pytest

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
    PROTO_ICMP,
    PROTO_TCP,
    PROTO_UDP,
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
from tests.evaluators import EVALUATORS

IP = ipaddress.ip_address
NET = ipaddress.ip_network
POD = frozenset({EndpointKind.POD})
BOTH = frozenset({Direction.INGRESS, Direction.EGRESS})


def pod(name, ns="a", labels=None, ip=None, ports=(), **kw):
    return Endpoint(EndpointKind.POD, name, ns, labels or {"app": name}, ips=(IP(ip),) if ip else (), ports=ports, **kw)


@pytest.fixture
def inv():
    i = Inventory()
    i.namespaces["a"] = Namespace("a", {"team": "x", "env": "prod", "kubernetes.io/metadata.name": "a"})
    i.namespaces["b"] = Namespace("b", {"team": "x", "env": "dev", "kubernetes.io/metadata.name": "b"})
    i.namespaces["c"] = Namespace("c", {"team": "y", "env": "prod", "kubernetes.io/metadata.name": "c"})
    i.endpoints += [
        pod(
            "web",
            "a",
            ip="10.0.0.1",
            ports=(ContainerPort(8080, PROTO_TCP, "http"), ContainerPort(53, PROTO_UDP, "dns")),
        ),
        pod("db", "a", ip="10.0.0.2", ports=(ContainerPort(5432, PROTO_TCP, "http"),), service_account="dbsa"),
        pod("cli", "b", ip="10.0.1.1"),
        pod("other", "c", ip="10.0.2.1"),
        pod("hostnet", "c", ip="192.168.0.1", host_network=True),
        Endpoint(
            EndpointKind.HOST, "node1-eth0", None, {"role": "node"}, ips=(IP("192.168.0.9"),), profiles=("hostprof",)
        ),
    ]
    i.nodes["node1"] = Node("node1", {"kubernetes.io/os": "linux"}, (IP("192.168.0.1"),))
    i.service_accounts[("a", "dbsa")] = ServiceAccount("dbsa", "a", {"tier": "data"})
    return i


def flow(inv, src, dst, proto=PROTO_TCP, dport=80, **kw):
    def end(x):
        if isinstance(x, str) and "/" in x and not x[0].isdigit():
            return FlowEnd(inv.find(x))
        if isinstance(x, str):
            return FlowEnd(inv.find(x)) if inv.find(x) else FlowEnd(None, IP(x))
        return x

    return Flow(end(src), end(dst), proto, 40000, dport, **kw)


def policy(
    name,
    ingress=(),
    egress=(),
    subject=None,
    tier="default",
    order=None,
    types=None,
    kind="GlobalNetworkPolicy",
    ns=None,
):
    types = (
        types
        if types is not None
        else frozenset(d for d, r in ((Direction.INGRESS, ingress), (Direction.EGRESS, egress)) if r) or BOTH
    )
    return Policy(
        kind, ns, name, tier, order, subject or Subject(endpoint_kinds=POD), types, tuple(ingress), tuple(egress)
    )


def allow(i=0, **kw):
    return Rule(Action.ALLOW, i, **kw)


def deny(i=0, **kw):
    return Rule(Action.DENY, i, **kw)


def ev(inv, policies, f, tiers=(), profiles=(), **kw):
    return evaluate(PolicySet.build(list(policies), list(tiers), list(profiles)), inv, f, **kw)


def test_no_policy_allows_pods_and_reports_no_decision(inv):
    v = ev(inv, [], flow(inv, "a/web", "a/db"))
    assert v.allowed and v.egress is None and v.ingress is None
    assert v.to_json() == {"verdict": "allow", "egress": None, "ingress": None}


def test_default_deny_overrides(inv):
    assert not ev(inv, [], flow(inv, "a/web", "a/db"), default_pod="deny").allowed


def test_isolation_end_of_tier_deny(inv):
    p = policy("iso", types=frozenset({Direction.INGRESS}))
    v = ev(inv, [p], flow(inv, "a/web", "a/db"))
    assert not v.allowed
    assert v.ingress.reason == "end-of-tier" and v.ingress.tier == "default"
    assert v.egress is None


def test_both_directions_must_allow(inv):
    p = policy("eg", egress=[deny()], subject=Subject(selector=Selector("app == 'web'"), endpoint_kinds=POD))
    v = ev(inv, [p], flow(inv, "a/web", "a/db"))
    assert not v.allowed and v.egress.verdict == "deny" and v.ingress is None
    assert ev(inv, [p], flow(inv, "a/db", "a/web")).allowed


@pytest.mark.parametrize("dst,allowed", [("10.1.2.3", True), ("10.1.9.9", False), ("11.0.0.1", False)])
def test_nets_and_not_nets(inv, dst, allowed):
    r = allow(destinations=(EntityMatch(nets=(NET("10.1.0.0/16"),), not_nets=(NET("10.1.9.0/24"),)),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert ev(inv, [p], flow(inv, "a/web", dst)).allowed is allowed


def test_outside_address_has_no_policy(inv):
    p = policy("iso", types=BOTH)
    v = ev(inv, [p], flow(inv, "8.8.8.8", "9.9.9.9"))
    assert v.allowed and v.egress is None and v.ingress is None


@pytest.mark.parametrize("src,allowed", [("a/web", True), ("b/cli", False)])
def test_namespace_scoped_selector(inv, src, allowed):
    r = allow(sources=(EntityMatch(selector=Selector.all(), endpoint_kinds=POD, namespace="a"),))
    p = policy("p", ingress=[r], subject=Subject(selector=Selector("app == 'db'"), endpoint_kinds=POD, namespace="a"))
    assert ev(inv, [p], flow(inv, src, "a/db")).allowed is allowed


@pytest.mark.parametrize("src,allowed", [("b/cli", True), ("c/other", False), ("a/web", True)])
def test_namespace_selector(inv, src, allowed):
    r = allow(sources=(EntityMatch(endpoint_kinds=POD, namespace_selector=Selector("team == 'x'")),))
    assert ev(inv, [policy("p", ingress=[r])], flow(inv, src, "a/db")).allowed is allowed


def test_not_selector(inv):
    r = allow(sources=(EntityMatch(not_selector=Selector("app == 'cli'")),))
    p = policy("p", ingress=[r])
    assert ev(inv, [p], flow(inv, "a/web", "a/db")).allowed
    assert not ev(inv, [p], flow(inv, "b/cli", "a/db")).allowed


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
@pytest.mark.parametrize(
    "namespace,src,allowed",
    [
        # GlobalNetworkPolicy: only what the notSelector matches is out (felix: "not in its IP set")
        (None, "8.8.8.8", True),  # outside: no identity there to match it
        (None, "a/web", True),
        (None, "b/cli", False),  # a pod it matches
        (None, "8.8.4.4", False),  # in a GlobalNetworkSet it matches
        (None, "8.8.5.5", False),  # in a NetworkSet it matches (another namespace: not scoped)
        (None, "8.8.6.6", True),  # in a network set it does not match
        (None, "c/hostnet", True),  # a host-network pod is in no selector's IP set
        # namespaced NetworkPolicy: the scoping (namespace) is the positive part
        ("a", "8.8.8.8", False),
        ("a", "a/web", True),
        ("a", "c/other", False),
    ],
)
def test_not_selector_only_excludes_what_it_matches(inv, evaluator, namespace, src, allowed):
    inv.network_sets += [
        NetworkSet("bad", None, {"app": "cli"}, (NET("8.8.4.0/24"),)),
        NetworkSet("bad-c", "c", {"app": "cli"}, (NET("8.8.5.0/24"),)),
        NetworkSet("ok", None, {"app": "ok"}, (NET("8.8.6.0/24"),)),
    ]
    inv.endpoints[4] = pod("hostnet", "c", {"app": "cli"}, ip="192.168.0.1", host_network=True)
    r = allow(sources=(EntityMatch(not_selector=Selector("app == 'cli'"), namespace=namespace),))
    p = policy("p", ingress=[r])
    ps = PolicySet.build([p])
    v = EVALUATORS[evaluator](ps, inv, flow(inv, src, "a/db"))
    assert v.allowed is allowed
    assert (v.ingress.reason == "rule") is allowed


@pytest.mark.parametrize(
    "rel,src,allowed",
    [
        (Relation.SELF, "a/web", True),
        (Relation.SELF, "b/cli", False),
        (Relation.NOT_SELF, "b/cli", True),
        (Relation.NOT_SELF, "a/web", False),
    ],
)
def test_namespace_relation_is_relative_to_subject(inv, rel, src, allowed):
    r = allow(sources=(EntityMatch(endpoint_kinds=POD, namespace_relation=rel),))
    assert ev(inv, [policy("p", ingress=[r])], flow(inv, src, "a/db")).allowed is allowed


@pytest.mark.parametrize(
    "field,src,allowed",
    [
        ("same_labels", "b/cli", True),
        ("same_labels", "c/other", False),
        ("not_same_labels", "c/other", True),
        ("not_same_labels", "b/cli", False),
    ],
)
def test_same_and_not_same_labels(inv, field, src, allowed):
    r = allow(sources=(EntityMatch(endpoint_kinds=POD, **{field: ("team",)}),))
    assert ev(inv, [policy("p", ingress=[r])], flow(inv, src, "a/db")).allowed is allowed


@pytest.mark.parametrize("dport,allowed", [(8080, True), (5432, False)])
def test_named_port_resolves_against_destination(inv, dport, allowed):
    r = allow(destinations=(EntityMatch(ports=(PortMatch(PROTO_TCP, NamedPort("http")),)),))
    # web's "http" is 8080; a flow to web:5432 does not match even though db names 5432 "http".
    assert ev(inv, [policy("p", ingress=[r])], flow(inv, "a/db", "a/web", dport=dport)).allowed is allowed


def test_named_port_to_outside_address_never_matches(inv):
    r = allow(destinations=(EntityMatch(ports=(PortMatch(PROTO_TCP, NamedPort("http")),)),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert not ev(inv, [p], flow(inv, "a/web", "8.8.8.8", dport=8080)).allowed


@pytest.mark.parametrize(
    "proto,dport,allowed",
    [
        (PROTO_TCP, 1000, True),
        (PROTO_TCP, 2000, True),
        (PROTO_TCP, 2001, False),
        (PROTO_UDP, 1500, False),
        (PROTO_UDP, 53, True),
    ],
)
def test_port_ranges_and_protocols(inv, proto, dport, allowed):
    r = allow(
        destinations=(
            EntityMatch(ports=(PortMatch(PROTO_TCP, PortRange(1000, 2000)), PortMatch(PROTO_UDP, PortRange(53, 53)))),
        )
    )
    assert ev(inv, [policy("p", ingress=[r])], flow(inv, "b/cli", "a/web", proto, dport)).allowed is allowed


def test_not_ports_and_source_ports(inv):
    r = allow(
        sources=(EntityMatch(ports=(PortMatch(None, PortRange(40000, 40000)),)),),
        destinations=(EntityMatch(not_ports=(PortMatch(None, PortRange(22, 22)),)),),
    )
    p = policy("p", ingress=[r])
    assert ev(inv, [p], flow(inv, "b/cli", "a/web", dport=80)).allowed
    assert not ev(inv, [p], flow(inv, "b/cli", "a/web", dport=22)).allowed


def test_rule_protocols_and_not_protocols(inv):
    p = policy("p", ingress=[allow(protocols=frozenset({PROTO_UDP}))])
    assert ev(inv, [p], flow(inv, "b/cli", "a/web", PROTO_UDP, 53)).allowed
    assert not ev(inv, [p], flow(inv, "b/cli", "a/web", PROTO_TCP, 53)).allowed
    q = policy("q", ingress=[allow(not_protocols=frozenset({PROTO_UDP}))])
    assert not ev(inv, [q], flow(inv, "b/cli", "a/web", PROTO_UDP, 53)).allowed


@pytest.mark.parametrize("t,c,allowed", [(8, 0, True), (8, 1, False), (0, 0, False)])
def test_icmp_type_code(inv, t, c, allowed):
    p = policy("p", ingress=[allow(protocols=frozenset({PROTO_ICMP}), icmp=IcmpMatch(8, 0))])
    f = flow(inv, "b/cli", "a/web", PROTO_ICMP, None, icmp_type=t, icmp_code=c)
    assert ev(inv, [p], f).allowed is allowed


def test_not_icmp(inv):
    p = policy("p", ingress=[allow(not_icmp=IcmpMatch(8))])
    assert not ev(inv, [p], flow(inv, "b/cli", "a/web", PROTO_ICMP, None, icmp_type=8, icmp_code=0)).allowed
    assert ev(inv, [p], flow(inv, "b/cli", "a/web", PROTO_ICMP, None, icmp_type=0, icmp_code=0)).allowed


def test_ip_version(inv):
    p = policy("p", ingress=[allow(ip_version=6)])
    assert not ev(inv, [p], flow(inv, "b/cli", "a/web")).allowed


def test_rules_in_order_first_decides(inv):
    p = policy(
        "p", ingress=[deny(0, destinations=(EntityMatch(ports=(PortMatch(PROTO_TCP, PortRange(80, 80)),)),)), allow(1)]
    )
    v = ev(inv, [p], flow(inv, "b/cli", "a/web", dport=80))
    assert not v.allowed and v.ingress.rule == 0 and v.ingress.reason == "rule"
    assert ev(inv, [p], flow(inv, "b/cli", "a/web", dport=81)).ingress.rule == 1


def test_policy_order_within_tier(inv):
    first = policy("z-first", ingress=[deny()], order=1)
    second = policy("a-second", ingress=[allow()], order=2)
    v = ev(inv, [second, first], flow(inv, "b/cli", "a/web"))
    assert v.ingress.policy == "GlobalNetworkPolicy/z-first"


def test_tier_order_and_pass(inv):
    tiers = [Tier("security", 100), Tier("app", 200)]
    passing = policy("pass", ingress=[Rule(Action.PASS, 0)], tier="security")
    denying = policy("deny", ingress=[deny()], tier="security", order=5)
    allowing = policy("allow", ingress=[allow()], tier="app")
    v = ev(inv, [denying, passing, allowing], flow(inv, "b/cli", "a/web"), tiers=tiers)
    # "pass" (no order) is after "deny" (order 5): deny decides in tier security.
    assert v.ingress.policy == "GlobalNetworkPolicy/deny"
    passing_first = policy("pass", ingress=[Rule(Action.PASS, 0)], tier="security", order=1)
    v = ev(inv, [denying, passing_first, allowing], flow(inv, "b/cli", "a/web"), tiers=tiers)
    assert v.allowed and v.ingress.tier == "app"


def test_end_of_tier_pass_default_action(inv):
    tiers = [Tier("soft", 100, Action.PASS)]
    p = policy("nomatch", ingress=[allow(protocols=frozenset({PROTO_UDP}))], tier="soft")
    v = ev(inv, [p], flow(inv, "b/cli", "a/web"), tiers=tiers)
    assert v.allowed and v.ingress.reason == "default"
    v = ev(inv, [p], flow(inv, "b/cli", "a/web"), tiers=[Tier("soft", 100)])
    assert not v.allowed and v.ingress.reason == "end-of-tier" and v.ingress.tier == "soft"


def test_log_records_and_continues(inv):
    p = policy("p", ingress=[Rule(Action.LOG, 0), allow(1)])
    v = ev(inv, [p], flow(inv, "b/cli", "a/web"))
    assert v.allowed and v.ingress.logs == [("default", "GlobalNetworkPolicy/p", 0)]
    assert v.to_json()["ingress"]["logs"] == [{"tier": "default", "policy": "GlobalNetworkPolicy/p", "rule": 0}]


def test_types_limit_direction(inv):
    p = policy("p", ingress=[deny()], types=frozenset({Direction.EGRESS}))
    assert ev(inv, [p], flow(inv, "b/cli", "a/web")).ingress is None


def test_profiles_after_tiers_and_host_default(inv):
    prof = Profile(
        "hostprof", ingress=(allow(0, destinations=(EntityMatch(ports=(PortMatch(PROTO_TCP, PortRange(22, 22)),)),)),)
    )
    v = ev(inv, [], flow(inv, "b/cli", "192.168.0.9", dport=22), profiles=[prof])
    assert v.allowed and v.ingress.reason == "profile" and v.ingress.policy == "Profile/hostprof"
    v = ev(inv, [], flow(inv, "b/cli", "192.168.0.9", dport=23), profiles=[prof])
    assert not v.allowed and v.ingress.reason == "profile"


def test_host_endpoint_default_deny(inv):
    assert not ev(inv, [], flow(inv, "b/cli", "192.168.0.9")).allowed
    assert ev(inv, [], flow(inv, "b/cli", "192.168.0.9"), default_host="allow").allowed


def test_host_network_pod_not_subject_and_not_a_pod_peer(inv):
    iso = policy("iso", types=BOTH)
    v = ev(inv, [iso], flow(inv, "a/web", "c/hostnet"))
    assert v.ingress is None
    sel = allow(destinations=(EntityMatch(selector=Selector.all(), endpoint_kinds=POD),))
    p = policy("p", egress=[sel], types=frozenset({Direction.EGRESS}))
    assert not ev(inv, [p], flow(inv, "a/web", "c/hostnet")).allowed


def test_node_selector(inv):
    r = allow(destinations=(EntityMatch(node_selector=Selector("kubernetes.io/os == 'linux'")),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert ev(inv, [p], flow(inv, "a/web", "192.168.0.1")).allowed
    assert not ev(inv, [p], flow(inv, "a/web", "192.168.0.2")).allowed


def test_service_accounts(inv):
    by_name = allow(sources=(EntityMatch(service_account_names=frozenset({"dbsa"})),))
    by_labels = allow(sources=(EntityMatch(service_account_selector=Selector("tier == 'data'")),))
    for r in (by_name, by_labels):
        p = policy("p", ingress=[r])
        assert ev(inv, [p], flow(inv, "a/db", "a/web")).allowed
        assert not ev(inv, [p], flow(inv, "b/cli", "a/web")).allowed


def test_network_set_selector(inv):
    inv.network_sets.append(NetworkSet("ext", None, {"kind": "ext"}, (NET("8.8.0.0/16"),)))
    r = allow(destinations=(EntityMatch(selector=Selector("kind == 'ext'")),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert ev(inv, [p], flow(inv, "a/web", "8.8.8.8")).allowed
    assert not ev(inv, [p], flow(inv, "a/web", "9.9.9.9")).allowed


def test_service_match(inv):
    inv.services[("a", "web")] = Service(
        "web", "a", {"app": "web"}, (IP("10.96.0.10"),), (ServicePort(80, "http", PROTO_TCP),)
    )
    r = allow(destinations=(EntityMatch(service=ServiceRef("web", "a")),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert ev(inv, [p], flow(inv, "b/cli", "a/web", dport=8080)).allowed
    assert not ev(inv, [p], flow(inv, "b/cli", "a/web", dport=9090)).allowed
    assert not ev(inv, [p], flow(inv, "b/cli", "a/db", dport=8080)).allowed


@pytest.mark.parametrize(
    "action,expect_allowed,expect_tier",
    [
        (Action.ALLOW, False, "default"),  # Allow through it matches nothing -> next rule (deny) decides
        (Action.DENY, False, "kube-admin"),
        (Action.PASS, False, "kube-admin"),  # Pass with an unresolvable peer denies
    ],
)
def test_unresolvable_fails_closed(inv, action, expect_allowed, expect_tier):
    r = Rule(action, 0, destinations=(EntityMatch(unresolvable="unknown peer"),))
    admin = policy("cnp", egress=[r], tier="kube-admin", order=1, kind="ClusterNetworkPolicy")
    np_deny = policy("iso", types=frozenset({Direction.EGRESS}), kind="NetworkPolicy")
    v = ev(inv, [admin, np_deny], flow(inv, "a/web", "8.8.8.8"))
    assert v.allowed is expect_allowed and v.egress.tier == expect_tier


def test_domains_never_match(inv):
    r = allow(destinations=(EntityMatch(domains=("example.com",)),))
    p = policy("p", egress=[r], types=frozenset({Direction.EGRESS}))
    assert not ev(inv, [p], flow(inv, "a/web", "93.184.216.34")).allowed


def test_pod_without_ip_still_evaluates(inv):
    inv.endpoints.append(pod("new", "b", ip=None))
    r = allow(sources=(EntityMatch(selector=Selector("app == 'new'"), endpoint_kinds=POD),))
    p = policy("p", ingress=[r])
    assert ev(inv, [p], flow(inv, "b/new", "a/web")).allowed


def test_flow_end_needs_something():
    with pytest.raises(ValueError):
        FlowEnd()


def test_bad_default_rejected(inv):
    with pytest.raises(ValueError):
        ev(inv, [], flow(inv, "a/web", "a/db"), default_pod="maybe")
