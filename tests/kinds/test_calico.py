"""Calico GlobalNetworkPolicy / NetworkPolicy / Tier / Profile: normalization, validation and
their meaning through the reference evaluator (seed 000_d33bb74be33d22d2.txt)."""

from __future__ import annotations

import ipaddress
import json
import textwrap
from dataclasses import replace

import pytest

from pyclassify.documents import Problems
from pyclassify.flow import HttpRequest
from pyclassify.inventory import ContainerPort, Endpoint, Inventory, Namespace, NetworkSet, Service, ServiceAccount
from pyclassify.ir import (
    PROTO_ICMP,
    PROTO_ICMPV6,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    PROTO_UDPLITE,
    Action,
    Direction,
    EndpointKind,
    Hook,
    HttpMatch,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Profile,
    ServiceRef,
    Tier,
)
from pyclassify.kinds import policy_normalizer, schema
from pyclassify.loader import load_text
from pyclassify.reference import Flow, FlowEnd, evaluate
from tests.evaluators import EVALUATORS
from tests.shared_data import SHARED, shared_path

CASES = SHARED / "cases"


# --- helpers ----------------------------------------------------------------------------------


def normalize(text: str) -> tuple[list, Problems]:
    """Every object of a YAML text through the registered Calico normalizers."""
    problems = Problems()
    out: list = []
    for doc in load_text(textwrap.dedent(text), "t.yaml", problems):
        normalizer = policy_normalizer(doc)
        assert normalizer is not None, doc.kind
        out.extend(normalizer(doc, problems))
    return out, problems


def ok(text: str) -> list:
    objs, problems = normalize(text)
    assert not problems.errors, [str(p) for p in problems.errors]
    return objs


def errors(text: str) -> list[str]:
    objs, problems = normalize(text)
    assert problems.errors, "expected errors"
    return [str(p) for p in problems.errors]


def gnp(spec: str, name: str = "p", extra_meta: str = "") -> str:
    return f"""\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: {name}{extra_meta}
spec:
{textwrap.indent(textwrap.dedent(spec), "  ")}"""


def np_(spec: str, name: str = "p", namespace: str = "prod") -> str:
    return f"""\
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: {name}
  namespace: {namespace}
spec:
{textwrap.indent(textwrap.dedent(spec), "  ")}"""


def rule_of(text: str, direction: str = "ingress"):
    (policy,) = [o for o in ok(text) if isinstance(o, Policy)]
    return policy.rules(Direction(direction))[0]


def pod(name: str, ns: str, ip: str, labels: dict | None = None, ports=(), sa=None, profiles=()) -> Endpoint:
    return Endpoint(
        EndpointKind.POD,
        name,
        ns,
        labels or {},
        (ipaddress.ip_address(ip),),
        tuple(ports),
        service_account=sa,
        profiles=tuple(profiles),
    )


def host(name: str, ip: str, labels: dict | None = None, profiles=()) -> Endpoint:
    return Endpoint(EndpointKind.HOST, name, None, labels or {}, (ipaddress.ip_address(ip),), profiles=tuple(profiles))


def policy_set(objs: list) -> PolicySet:
    return PolicySet.build(
        [o for o in objs if isinstance(o, Policy)],
        [o for o in objs if isinstance(o, Tier)],
        [o for o in objs if isinstance(o, Profile)],
    )


def flow(src, dst, proto=PROTO_TCP, dport=80, sport=40000, icmp_type=None, icmp_code=None) -> Flow:
    def end(x):
        return FlowEnd(x, None) if isinstance(x, Endpoint) else FlowEnd(None, ipaddress.ip_address(x))

    if proto in (PROTO_ICMP, PROTO_ICMPV6):
        sport = dport = None
    return Flow(end(src), end(dst), proto, sport, dport, icmp_type, icmp_code)


def verdict(objs: list, inv: Inventory, f: Flow, **kw):
    return evaluate(policy_set(objs), inv, f, **kw)


def inventory(*endpoints, namespaces=(), network_sets=(), services=(), service_accounts=()) -> Inventory:
    inv = Inventory()
    inv.endpoints.extend(endpoints)
    for ns in namespaces:
        inv.namespaces[ns.name] = ns
    inv.network_sets.extend(network_sets)
    for s in services:
        inv.services[(s.namespace, s.name)] = s
    for sa in service_accounts:
        inv.service_accounts[(sa.namespace, sa.name)] = sa
    return inv


# --- the seed's sample ------------------------------------------------------------------------

SEED_SAMPLE = """\
apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: internal-access
spec:
  order: 100
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: internal-access.allow-tcp-6379
spec:
  tier: internal-access
  selector: role == 'database'
  types:
  - Ingress
  - Egress
  ingress:
  - action: Allow
    metadata:
      annotations:
        from: frontend
        to: database
    protocol: TCP
    source:
      selector: role == 'frontend'
    destination:
      ports:
      - 6379
  egress:
  - action: Allow
"""


def test_seed_sample_normalizes():
    tier, policy = ok(SEED_SAMPLE)
    assert tier == Tier("internal-access", 100.0, Action.DENY)
    assert policy.kind == "GlobalNetworkPolicy" and policy.namespace is None
    assert policy.name == "internal-access.allow-tcp-6379" and policy.tier == "internal-access"
    assert policy.order is None
    assert policy.subject.selector.canonical == 'role == "database"'
    assert policy.subject.endpoint_kinds == {EndpointKind.POD, EndpointKind.HOST}
    assert policy.types == {Direction.INGRESS, Direction.EGRESS}
    (rule,) = policy.ingress
    assert rule.action is Action.ALLOW and rule.protocols == {PROTO_TCP}
    assert rule.sources[0].selector.canonical == 'role == "frontend"'
    assert rule.destinations[0].ports == (PortMatch(PROTO_TCP, PortRange(6379, 6379)),)
    assert rule.path == "spec.ingress[0]"
    assert policy.source.file == "t.yaml" and policy.source.line == 8


def test_seed_sample_conforms_to_the_crd_schemas():
    for doc in load_text(SEED_SAMPLE, "t.yaml", Problems()):
        assert schema.field_problems(doc.obj) == []


def test_seed_sample_evaluates():
    objs = ok(SEED_SAMPLE)
    front = pod("front", "a", "10.0.0.1", {"role": "frontend"})
    db = pod("db", "b", "10.0.0.2", {"role": "database"})
    other = pod("other", "a", "10.0.0.3", {"role": "other"})
    inv = inventory(front, db, other)
    v = verdict(objs, inv, flow(front, db, dport=6379))
    assert v.verdict == "allow"
    assert (v.ingress.tier, v.ingress.policy, v.ingress.rule, v.ingress.reason) == (
        "internal-access",
        "GlobalNetworkPolicy/internal-access.allow-tcp-6379",
        0,
        "rule",
    )
    # Another port or another peer: the tier applied and nothing allowed: its default Deny.
    for f in (flow(front, db, dport=6380), flow(other, db, dport=6379), flow(front, db, PROTO_UDP, 6379)):
        v = verdict(objs, inv, f)
        assert v.verdict == "deny" and v.ingress.reason == "end-of-tier"


# --- types defaulting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, types",
    [
        ("selector: all()", {Direction.INGRESS}),
        ("ingress: [{action: Allow}]", {Direction.INGRESS}),
        ("egress: [{action: Allow}]", {Direction.EGRESS}),
        ("ingress: [{action: Allow}]\negress: [{action: Allow}]", {Direction.INGRESS, Direction.EGRESS}),
        ("types: [Egress]\ningress: [{action: Allow}]", {Direction.EGRESS}),
        ("types: [Ingress, Egress]", {Direction.INGRESS, Direction.EGRESS}),
    ],
)
def test_types_default_as_the_seed_says(spec, types):
    (policy,) = ok(gnp(spec))
    assert policy.types == types


def test_rules_of_a_direction_not_in_types_never_apply():
    objs = ok(gnp("types: [Egress]\ningress: [{action: Deny}]\negress: [{action: Allow}]"))
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    v = verdict(objs, inventory(a, b), flow(a, b))
    assert v.ingress is None and v.egress.reason == "rule" and v.verdict == "allow"


def test_types_errors():
    errs = errors(gnp("types: [Ingress, Ingress, Sideways]"))
    assert "t.yaml:6: spec.types[1]: 'Ingress' type specified more than once" in errs
    assert any("spec.types[2]: Unsupported value: 'Sideways'" in e for e in errs)


# --- actions: Allow, Deny, Pass, Log; tiers ---------------------------------------------------

TIERS = """\
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: platform}
spec: {order: 200, defaultAction: Pass}
---
"""


def test_tiers_normalize_and_order():
    objs = ok(TIERS + gnp("tier: platform\nselector: all()", name="platform.x"))
    pset = policy_set(objs)
    names = [t.name for t in pset.tiers]
    assert names == ["security", "platform", "kube-admin", "default", "kube-baseline"]
    assert Tier("platform", 200.0, Action.PASS) in pset.tiers


def test_pass_goes_to_the_next_tier_and_log_continues():
    objs = ok(
        TIERS
        + gnp(
            """\
        tier: security
        order: 1
        ingress:
        - action: Log
        - action: Pass
          source: {selector: team == 'trusted'}
        - action: Deny
        """,
            name="security.gate",
        )
        + "\n---\n"
        + gnp(
            """\
        ingress:
        - action: Allow
          protocol: TCP
          destination: {ports: [80]}
        """,
            name="web",
        )
    )
    trusted = pod("t", "x", "10.0.0.1", {"team": "trusted"})
    stranger = pod("s", "x", "10.0.0.2")
    web = pod("w", "x", "10.0.0.3")
    inv = inventory(trusted, stranger, web)
    v = verdict(objs, inv, flow(trusted, web))
    assert v.verdict == "allow"
    assert (v.ingress.tier, v.ingress.policy, v.ingress.rule) == ("default", "GlobalNetworkPolicy/web", 0)
    assert v.ingress.logs == [("security", "GlobalNetworkPolicy/security.gate", 0)]
    v = verdict(objs, inv, flow(stranger, web))
    assert (v.verdict, v.ingress.tier, v.ingress.rule) == ("deny", "security", 2)
    # Passed, but the default tier has no rule for port 81: its end-of-tier Deny.
    v = verdict(objs, inv, flow(trusted, web, dport=81))
    assert (v.verdict, v.ingress.tier, v.ingress.reason) == ("deny", "default", "end-of-tier")


def test_tier_default_action_pass_falls_through():
    objs = ok(TIERS + gnp("tier: platform\ningress: [{action: Log}]", name="platform.log"))
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    v = verdict(objs, inventory(a, b), flow(a, b))
    # Nothing decided in platform (defaultAction Pass) and no other tier applies: the default.
    assert v.verdict == "allow" and v.ingress.reason == "default"


def test_policy_order_unset_is_last_and_ties_by_name():
    objs = ok(
        gnp("order: 10\ningress: [{action: Deny}]", name="b")
        + "\n---\n"
        + gnp("ingress: [{action: Allow}]", name="a")
        + "\n---\n"
        + gnp("order: 10\ningress: [{action: Allow}]", name="c")
    )
    assert [p.name for p in policy_set(objs).policies] == ["b", "c", "a"]
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    v = verdict(objs, inventory(a, b), flow(a, b))
    assert v.verdict == "deny" and v.ingress.policy == "GlobalNetworkPolicy/b"


def test_order_can_be_fractional():
    (policy,) = ok(gnp("order: 10.5"))
    assert policy.order == 10.5


def test_tier_validation():
    errs = errors("""\
        apiVersion: projectcalico.org/v3
        kind: Tier
        metadata: {name: default}
        spec: {order: 5}
        ---
        apiVersion: projectcalico.org/v3
        kind: Tier
        metadata: {name: Bad.Tier}
        spec: {defaultAction: Allow, order: "x"}
        """)
    assert "t.yaml:4: spec.order: default tier order must be 1e+06" in errs
    assert any(e.startswith("t.yaml:8: metadata.name: name must consist of lower case") for e in errs)
    assert 't.yaml:9: spec.defaultAction: Unsupported value: \'Allow\': supported values: "Deny", "Pass"' in errs
    assert "t.yaml:9: spec.order: must be a number, got 'x'" in errs


def test_builtin_tiers_with_their_own_orders_are_accepted():
    objs = ok("""\
        apiVersion: projectcalico.org/v3
        kind: Tier
        metadata: {name: default}
        spec: {order: 1000000}
        ---
        apiVersion: projectcalico.org/v3
        kind: Tier
        metadata: {name: kube-admin}
        spec: {order: 1000, defaultAction: Pass}
        """)
    assert objs == [Tier("default", 1e6, Action.DENY), Tier("kube-admin", 1000.0, Action.PASS)]


def test_tier_without_order_is_last():
    (tier,) = ok("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: late}\n")
    pset = policy_set([tier])
    assert tier.order is None and pset.tiers[-1].name == "late"


def test_name_prefix_of_another_tier_is_a_warning():
    objs, problems = normalize(gnp("tier: security", name="platform.x"))
    assert objs and not problems.errors
    assert [p.path for p in problems.warnings] == ["metadata.name"]
    assert "differs from the policy's tier 'security'" in problems.warnings[0].message
    # Current Calico accepts unprefixed names in any tier.
    objs, problems = normalize(gnp("tier: security", name="x"))
    assert objs and not problems.items


# --- protocols, ICMP, ipVersion --------------------------------------------------------------


@pytest.mark.parametrize(
    "value, number",
    [
        ("TCP", PROTO_TCP),
        ("UDP", PROTO_UDP),
        ("ICMP", PROTO_ICMP),
        ("ICMPv6", PROTO_ICMPV6),
        ("SCTP", PROTO_SCTP),
        ("UDPLite", PROTO_UDPLITE),
        (1, 1),
        (255, 255),
        ("'47'", 47),
    ],
)
def test_protocol_by_name_or_number(value, number):
    rule = rule_of(gnp(f"ingress: [{{action: Allow, protocol: {value}, notProtocol: {value}}}]"))
    assert rule.protocols == {number} and rule.not_protocols == {number}


@pytest.mark.parametrize("value", ["tcp", "GRE", 0, 256, "true"])
def test_protocol_errors(value):
    (err,) = errors(gnp(f"ingress: [{{action: Allow, protocol: {value}}}]"))
    assert err.startswith("t.yaml:6: spec.ingress[0].protocol: protocol")


def test_not_protocol_evaluates():
    objs = ok(gnp("ingress: [{action: Allow, notProtocol: UDP}]"))
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    inv = inventory(a, b)
    assert verdict(objs, inv, flow(a, b, PROTO_TCP)).verdict == "allow"
    assert verdict(objs, inv, flow(a, b, PROTO_UDP)).verdict == "deny"


def test_icmp_type_and_code():
    text = gnp("""\
        ingress:
        - action: Allow
          protocol: ICMP
          icmp: {type: 8, code: 0}
        - action: Allow
          protocol: ICMPv6
          notICMP: {type: 128}
        """)
    (policy,) = ok(text)
    assert policy.ingress[0].icmp == IcmpMatch(8, 0)
    assert policy.ingress[1].not_icmp == IcmpMatch(128, None)
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    a6, b6 = pod("a6", "x", "fd00::1"), pod("b6", "x", "fd00::2")
    inv = inventory(a, b, a6, b6)
    assert verdict([policy], inv, flow(a, b, PROTO_ICMP, icmp_type=8, icmp_code=0)).verdict == "allow"
    assert verdict([policy], inv, flow(a, b, PROTO_ICMP, icmp_type=8, icmp_code=1)).verdict == "deny"
    assert verdict([policy], inv, flow(a, b, PROTO_ICMP, icmp_type=0, icmp_code=0)).verdict == "deny"
    assert verdict([policy], inv, flow(a6, b6, PROTO_ICMPV6, icmp_type=129, icmp_code=0)).verdict == "allow"
    assert verdict([policy], inv, flow(a6, b6, PROTO_ICMPV6, icmp_type=128, icmp_code=0)).verdict == "deny"


def test_icmp_errors():
    errs = errors(
        gnp("""\
        ingress:
        - action: Allow
          icmp: {type: 8}
        - action: Allow
          protocol: ICMP
          icmp: {code: 1}
        - action: Allow
          protocol: ICMP
          ipVersion: 6
          notICMP: {type: 255, code: 256}
        - action: Allow
          protocol: ICMPv6
          ipVersion: 4
        """)
    )
    assert errs == [
        "t.yaml:8: spec.ingress[0].icmp: rules that specify ICMP fields must set protocol to ICMP",
        "t.yaml:11: spec.ingress[1].icmp.code: ICMP code specified without an ICMP type",
        "t.yaml:15: spec.ingress[2].notICMP.type: Invalid value: 255: must be an integer between 0 and 254",
        "t.yaml:15: spec.ingress[2].notICMP.code: Invalid value: 256: must be an integer between 0 and 255",
        "t.yaml:14: spec.ingress[2].ipVersion: must set ipversion to '4' with protocol icmp",
        "t.yaml:18: spec.ingress[3].ipVersion: must set ipversion to '6' with protocol icmpv6",
    ]


def test_ip_version():
    rule = rule_of(gnp("ingress: [{action: Allow, ipVersion: 6}]"))
    assert rule.ip_version == 6
    objs = ok(gnp("ingress: [{action: Allow, ipVersion: 6}]"))
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    a6, b6 = pod("a6", "x", "fd00::1"), pod("b6", "x", "fd00::2")
    inv = inventory(a, b, a6, b6)
    assert verdict(objs, inv, flow(a6, b6)).verdict == "allow"
    assert verdict(objs, inv, flow(a, b)).verdict == "deny"
    (err,) = errors(gnp("ingress: [{action: Allow, ipVersion: 5}]"))
    assert err == "t.yaml:6: spec.ingress[0].ipVersion: Unsupported value: 5: supported values: 4, 6"


# --- nets ---------------------------------------------------------------------------------


def test_nets_and_not_nets():
    objs = ok(
        gnp("""\
        ingress:
        - action: Allow
          source: {nets: [10.1.0.0/16], notNets: [10.1.2.0/24]}
        """)
    )
    rule = objs[0].ingress[0]
    assert rule.sources[0].nets == (ipaddress.ip_network("10.1.0.0/16"),)
    assert rule.ip_version == 4  # the nets fix the family, as felix renders the rule
    dst = pod("d", "x", "10.9.0.1")
    inv = inventory(dst)
    assert verdict(objs, inv, flow("10.1.1.1", dst)).verdict == "allow"
    assert verdict(objs, inv, flow("10.1.2.1", dst)).verdict == "deny"
    assert verdict(objs, inv, flow("10.2.0.1", dst)).verdict == "deny"


def test_not_nets_of_one_family_never_match_the_other():
    objs = ok(gnp("ingress: [{action: Allow, source: {notNets: [10.0.0.0/8]}}]"))
    dst6 = pod("d6", "x", "fd00::9")
    dst = pod("d", "x", "192.168.0.9")
    inv = inventory(dst6, dst)
    assert verdict(objs, inv, flow("192.168.0.1", dst)).verdict == "allow"
    assert verdict(objs, inv, flow("fd00::1", dst6)).verdict == "deny"


def test_net_errors():
    errs = errors(
        gnp("""\
        ingress:
        - action: Allow
          source: {nets: [10.0.0.1/8, bogus, 10.0.0.1]}
        - action: Allow
          source: {nets: [10.0.0.0/8]}
          destination: {notNets: ["fd00::/64"]}
        - action: Allow
          ipVersion: 6
          destination: {nets: [10.0.0.0/8]}
        """)
    )
    assert errs == [
        "t.yaml:8: spec.ingress[0].source.nets[0]: invalid CIDR '10.0.0.1/8': host bits must be zero",
        "t.yaml:8: spec.ingress[0].source.nets[1]: invalid CIDR 'bogus': must be address/prefix-length",
        "t.yaml:8: spec.ingress[0].source.nets[2]: invalid CIDR '10.0.0.1': must be address/prefix-length",
        "t.yaml:11: spec.ingress[1].destination.notNets: rule contains both IPv4 and IPv6 CIDRs",
        "t.yaml:14: spec.ingress[2].destination.nets: rule IP version doesn't match CIDR version",
    ]


# --- selectors, namespaces, global() ---------------------------------------------------------


def scope_inventory():
    prod_a = pod("a", "prod", "10.0.0.1", {"app": "a"})
    dev_a = pod("a", "dev", "10.0.1.1", {"app": "a"})
    target = pod("t", "prod", "10.0.0.9", {"app": "t"})
    gns = NetworkSet("gns", None, {"app": "a"}, (ipaddress.ip_network("192.0.2.0/24"),))
    ns_set = NetworkSet("nset", "prod", {"app": "a"}, (ipaddress.ip_network("198.51.100.0/24"),))
    namespaces = (Namespace("prod", {"env": "prod"}), Namespace("dev", {"env": "dev"}))
    return inventory(prod_a, dev_a, target, namespaces=namespaces, network_sets=(gns, ns_set)), prod_a, dev_a, target


def allowed(objs, inv, src, dst) -> bool:
    return verdict(objs, inv, flow(src, dst)).verdict == "allow"


def test_namespaced_policy_rule_selector_is_scoped_to_its_namespace():
    objs = ok(np_("selector: app == 't'\ningress: [{action: Allow, source: {selector: app == 'a'}}]"))
    rule = objs[0].ingress[0]
    assert rule.sources[0].namespace == "prod"
    assert objs[0].subject.namespace == "prod" and objs[0].subject.endpoint_kinds == {EndpointKind.POD}
    inv, prod_a, dev_a, target = scope_inventory()
    assert allowed(objs, inv, prod_a, target)
    assert not allowed(objs, inv, dev_a, target)
    assert allowed(objs, inv, "198.51.100.7", target)  # the namespace's own NetworkSet
    assert not allowed(objs, inv, "192.0.2.7", target)  # a GlobalNetworkSet is out of scope


def test_namespace_selector_widens_the_scope():
    objs = ok(np_("ingress: [{action: Allow, source: {selector: app == 'a', namespaceSelector: env == 'dev'}}]"))
    assert objs[0].ingress[0].sources[0].namespace is None
    inv, prod_a, dev_a, target = scope_inventory()
    assert allowed(objs, inv, dev_a, target) and not allowed(objs, inv, prod_a, target)


def test_namespace_selector_all_and_global():
    all_ns = ok(np_("ingress: [{action: Allow, source: {selector: app == 'a', namespaceSelector: all()}}]"))
    glob = ok(np_("ingress: [{action: Allow, source: {selector: app == 'a', namespaceSelector: global()}}]"))
    assert glob[0].ingress[0].sources[0].namespace_selector.is_global
    inv, prod_a, dev_a, target = scope_inventory()
    assert allowed(all_ns, inv, dev_a, target) and allowed(all_ns, inv, "198.51.100.7", target)
    assert not allowed(all_ns, inv, "192.0.2.7", target)
    assert allowed(glob, inv, "192.0.2.7", target)
    assert not allowed(glob, inv, prod_a, target) and not allowed(glob, inv, "198.51.100.7", target)


def test_global_policy_rule_selector_sees_every_namespace():
    objs = ok(gnp("selector: app == 't'\ningress: [{action: Allow, source: {selector: app == 'a'}}]"))
    inv, prod_a, dev_a, target = scope_inventory()
    assert allowed(objs, inv, prod_a, target) and allowed(objs, inv, dev_a, target)
    assert allowed(objs, inv, "192.0.2.7", target)


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
def test_not_selector(evaluator):
    objs = ok(np_("ingress: [{action: Allow, source: {notSelector: app == 'a'}}]"))
    m = objs[0].ingress[0].sources[0]
    assert m.not_selector.canonical == 'app == "a"' and m.selector is None and m.namespace == "prod"
    inv, prod_a, dev_a, target = scope_inventory()
    other = pod("o", "prod", "10.0.0.5", {"app": "o"})
    inv.endpoints.append(other)

    def allows(src) -> bool:  # the target's ingress side (a host endpoint's egress defaults to deny)
        decision = EVALUATORS[evaluator](policy_set(objs), inv, flow(src, target)).ingress
        return decision.verdict == "allow"

    assert allows(other)
    assert not allows(prod_a)
    assert not allows(pod("o2", "dev", "10.0.1.5"))  # scoped to prod
    # The scoping is the positive part: an outside address is nothing of prod's.
    assert not allows("8.8.8.8")
    assert not allows("198.51.100.7")  # prod's NetworkSet, matched by the notSelector


@pytest.mark.parametrize("evaluator", sorted(EVALUATORS))
def test_global_policy_not_selector_only_matches_outside_addresses(evaluator):
    """felix renders a notSelector as "source not in the IP set of what it matches" (pods,
    host endpoints, network sets), unscoped: an outside address is in no such set."""
    objs = ok(gnp("selector: app == 't'\ningress: [{action: Allow, source: {notSelector: app == 'a'}}]"))
    m = objs[0].ingress[0].sources[0]
    assert m.not_selector is not None and m.selector is None and m.namespace is None
    inv, prod_a, dev_a, target = scope_inventory()
    inv.network_sets.append(NetworkSet("other", None, {"app": "b"}, (ipaddress.ip_network("203.0.113.0/24"),)))
    inv.endpoints.append(host("h", "192.168.5.5", {"app": "a"}))

    def allows(src) -> bool:  # the target's ingress side (a host endpoint's egress defaults to deny)
        decision = EVALUATORS[evaluator](policy_set(objs), inv, flow(src, target)).ingress
        return decision.verdict == "allow"

    assert allows("8.8.8.8")  # outside: allowed
    assert allows("203.0.113.7")  # in a network set it does not match
    assert allows(pod("o", "dev", "10.0.1.5", {"app": "o"}))
    assert not allows(prod_a) and not allows(dev_a)  # pods it matches, in any namespace
    assert not allows("192.0.2.7")  # in a GlobalNetworkSet it matches
    assert not allows("198.51.100.7")  # in a (namespaced) NetworkSet it matches
    assert not allows("192.168.5.5")  # a host endpoint it matches


def test_nets_only_entity_is_not_namespace_scoped():
    objs = ok(np_("ingress: [{action: Allow, source: {nets: [10.0.1.0/24]}}]"))
    assert objs[0].ingress[0].sources[0].namespace is None
    inv, prod_a, dev_a, target = scope_inventory()
    assert allowed(objs, inv, dev_a, target)


def test_subject_fields_of_global_policies():
    (policy,) = ok(
        gnp("""\
        selector: app == 't'
        namespaceSelector: env == 'prod'
        serviceAccountSelector: role == 'api'
        """)
    )
    s = policy.subject
    assert s.namespace_selector.canonical == 'env == "prod"'
    assert s.service_account_selector.canonical == 'role == "api"'
    (policy,) = ok(gnp("namespaceSelector: all()"))
    assert policy.subject.endpoint_kinds == {EndpointKind.POD}


def test_subject_namespace_selector_applies():
    objs = ok(gnp("namespaceSelector: env == 'dev'\ningress: [{action: Deny}]"))
    inv, prod_a, dev_a, target = scope_inventory()
    assert not allowed(objs, inv, prod_a, dev_a)
    assert allowed(objs, inv, dev_a, prod_a)  # prod: not selected, no policy


def test_policy_field_validation_cases_of_calico():
    """libcalico-go validator cases: where global() may appear."""
    path = shared_path("cases", "selectors.json", what="Calico's selector and validator cases")
    cases = json.loads(path.read_text())["policy_field_validation"]["cases"]
    ran = 0
    for case in cases:
        sel = json.dumps(case["selector"])
        field = case["field"]
        if case["resource"] == "EntityRule" and field == "selector":
            text = gnp(f"ingress: [{{action: Allow, source: {{selector: {sel}}}}}]")
        elif case["resource"] not in ("GlobalNetworkPolicy", "NetworkPolicy"):
            continue  # IP pools and BGP peers are not policy
        elif field.startswith("spec.ingress[].source.namespaceSelector"):
            extra = (
                ", destination: {namespaceSelector: \"projectcalico.org/name == 'test'\"}"
                if "destination" in field
                else ""
            )
            text = gnp(f"ingress: [{{action: Allow, source: {{namespaceSelector: {sel}}}{extra}}}]")
        elif field == "spec.ingress[].source.selector":
            text = gnp(f"ingress: [{{action: Allow, source: {{selector: {sel}}}}}]")
        else:
            key = field.removeprefix("spec.")
            text = (gnp if case["resource"] == "GlobalNetworkPolicy" else np_)(f"{key}: {sel}")
        objs, problems = normalize(text)
        assert (not problems.errors) == case["valid"], (case["test"], [str(p) for p in problems])
        ran += 1
    assert ran >= 15


@pytest.mark.parametrize("field", ["selector", "serviceAccountSelector", "namespaceSelector"])
def test_global_is_refused_in_subject_selectors(field):
    (err,) = errors(gnp(f"{field}: global()"))
    assert err == f"t.yaml:6: spec.{field}: global() can only be used in an EntityRule namespaceSelector"


def test_selector_errors_carry_the_position():
    (err,) = errors(gnp("ingress: [{action: Allow, source: {selector: 'a == '}}]"))
    assert err.startswith("t.yaml:6: spec.ingress[0].source.selector: invalid selector 'a == ' at position 5")


# --- ports ----------------------------------------------------------------------------------


def test_ports_numbers_ranges_and_named():
    rule = rule_of(
        gnp("""\
        ingress:
        - action: Allow
          protocol: TCP
          source: {notPorts: ["1:1023"]}
          destination: {ports: [8080, "1234:5678", named-port, "443"]}
        """)
    )
    assert rule.destinations[0].ports == (
        PortMatch(PROTO_TCP, PortRange(8080, 8080)),
        PortMatch(PROTO_TCP, PortRange(1234, 5678)),
        PortMatch(PROTO_TCP, NamedPort("named-port")),
        PortMatch(PROTO_TCP, PortRange(443, 443)),
    )
    assert rule.sources[0].not_ports == (PortMatch(PROTO_TCP, PortRange(1, 1023)),)


def test_ports_evaluate_with_named_ports_per_endpoint():
    objs = ok(
        gnp("""\
        ingress:
        - action: Allow
          protocol: TCP
          source: {notPorts: ["1:1023"]}
          destination: {ports: [http-alt, "9000:9010"]}
        """)
    )
    client = pod("c", "x", "10.0.0.1")
    web80 = pod("w1", "x", "10.0.0.2", ports=[ContainerPort(80, PROTO_TCP, "http-alt")])
    web8080 = pod("w2", "x", "10.0.0.3", ports=[ContainerPort(8080, PROTO_TCP, "http-alt")])
    inv = inventory(client, web80, web8080)
    assert verdict(objs, inv, flow(client, web80, dport=80)).verdict == "allow"
    assert verdict(objs, inv, flow(client, web80, dport=8080)).verdict == "deny"
    assert verdict(objs, inv, flow(client, web8080, dport=8080)).verdict == "allow"
    assert verdict(objs, inv, flow(client, web8080, dport=9005)).verdict == "allow"
    assert verdict(objs, inv, flow(client, web8080, dport=9005, sport=22)).verdict == "deny"


@pytest.mark.parametrize("proto", ["SCTP", "UDP", 6])
def test_ports_with_port_protocols(proto):
    assert ok(gnp(f"ingress: [{{action: Allow, protocol: {proto}, destination: {{ports: [80]}}}}]"))


def test_port_errors():
    errs = errors(
        gnp("""\
        ingress:
        - action: Allow
          destination: {ports: [80]}
        - action: Allow
          protocol: ICMP
          source: {notPorts: [80]}
        - action: Allow
          protocol: UDPLite
          destination: {ports: [80]}
        - action: Allow
          protocol: TCP
          destination: {ports: [0, "9:3", "1:70000", Bad_Name, 1.5]}
        """)
    )
    assert errs == [
        "t.yaml:8: spec.ingress[0].destination.ports: "
        + "rules that specify ports must set protocol to TCP or UDP or SCTP",
        "t.yaml:11: spec.ingress[1].source.notPorts: rules that specify ports must set protocol to TCP or UDP or SCTP",
        "t.yaml:14: spec.ingress[2].destination.ports: rules that specify ports must set protocol to TCP or UDP or SCTP",
        "t.yaml:17: spec.ingress[3].destination.ports[0]: port range invalid, port number must be between 1 and 65535",
        "t.yaml:17: spec.ingress[3].destination.ports[1]: port range invalid",
        "t.yaml:17: spec.ingress[3].destination.ports[2]: port range invalid, port number must be between 1 and 65535",
        "t.yaml:17: spec.ingress[3].destination.ports[3]: invalid port name 'Bad_Name': "
        "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
        't.yaml:17: spec.ingress[3].destination.ports[4]: invalid port 1.5: must be a number, "min:max" or a port name',
    ]


# --- service accounts and services -----------------------------------------------------------


def test_service_accounts_by_name_and_selector():
    objs = ok(
        np_("""\
        ingress:
        - action: Allow
          source:
            serviceAccounts: {names: [api], selector: tier == 'gold'}
        """)
    )
    m = objs[0].ingress[0].sources[0]
    assert m.service_account_names == {"api"} and m.namespace == "prod"
    api = pod("api", "prod", "10.0.0.1", sa="api")
    api_dev = pod("api", "dev", "10.0.1.1", sa="api")
    web = pod("web", "prod", "10.0.0.2", sa="web")
    target = pod("t", "prod", "10.0.0.9")
    sas = (
        ServiceAccount("api", "prod", {"tier": "gold"}),
        ServiceAccount("api", "dev", {"tier": "gold"}),
        ServiceAccount("web", "prod", {"tier": "gold"}),
    )
    inv = inventory(api, api_dev, web, target, service_accounts=sas)
    assert allowed(objs, inv, api, target)
    assert not allowed(objs, inv, api_dev, target)  # another namespace
    assert not allowed(objs, inv, web, target)  # another name


def test_services_match():
    objs = ok(
        np_("""\
        types: [Egress]
        egress:
        - action: Allow
          destination: {services: {name: db}}
        """)
    )
    assert objs[0].egress[0].destinations[0].service == ServiceRef("db", "prod")
    client = pod("c", "prod", "10.0.0.1")
    db = pod("db", "prod", "10.0.0.2", {"app": "db"})
    other = pod("o", "prod", "10.0.0.3")
    svc = Service(
        "db", "prod", {"app": "db"}, (ipaddress.ip_address("10.96.0.10"),), (), (ipaddress.ip_address("10.0.0.2"),)
    )
    inv = inventory(client, db, other, services=(svc,))
    assert allowed(objs, inv, client, db)
    assert allowed(objs, inv, client, "10.96.0.10")
    assert not allowed(objs, inv, client, other)


def test_service_restrictions():
    errs = errors(
        gnp("""\
        ingress:
        - action: Allow
          destination: {services: {name: a, namespace: n}}
          source: {services: {name: b, namespace: n}, selector: x == 'y', nets: [10.0.0.0/8]}
        egress:
        - action: Allow
          protocol: TCP
          source: {services: {name: a, namespace: n}}
          destination:
            services: {name: c}
            namespaceSelector: all()
            serviceAccounts: {names: [x]}
            ports: [80]
        """)
    )
    assert errs == [
        "t.yaml:9: spec.ingress[0].source.services: cannot specify Selector/NotSelector and Services on the same rule",
        "t.yaml:9: spec.ingress[0].source.services: cannot specify Nets/NotNets and Services on the same rule",
        "t.yaml:8: spec.ingress[0].destination.services: not allowed in ingress rule destination",
        "t.yaml:13: spec.egress[0].source.services: not allowed in egress rule source",
        "t.yaml:15: spec.egress[0].destination.services.namespace: must specify a namespace",
        "t.yaml:15: spec.egress[0].destination.services: cannot specify NamespaceSelector and Services on the same rule",
        "t.yaml:15: spec.egress[0].destination.services: cannot specify ServiceAccounts and Services on the same rule",
        "t.yaml:18: spec.egress[0].destination.ports: cannot specify ports with a service selector",
    ]


def test_ingress_source_service_may_have_ports():
    rule = rule_of(
        np_("""\
        ingress:
        - action: Allow
          protocol: TCP
          source: {services: {name: a}, ports: [80]}
        """)
    )
    assert rule.sources[0].service == ServiceRef("a", "prod") and rule.sources[0].ports


# --- domains: the addresses DNS taught; http: the connection's request ---------------------------


@pytest.mark.parametrize("engine", ["reference", "native"])
def test_domains_match_the_addresses_dns_taught(engine):
    from pyclassify import domains
    from tests.evaluators import EVALUATORS

    objs = ok(
        gnp("""\
        types: [Egress]
        egress:
        - action: Allow
          destination: {domains: [api.example.com, "*.example.org"]}
        - action: Deny
        """)
    )
    policy = objs[0]
    assert policy.egress[0].destinations[0].domains == ("api.example.com", "*.example.org")
    assert policy.unenforceable == () and policy.egress[0].destinations[0].unresolvable is None
    a = pod("a", "x", "10.0.0.1")
    inv = inventory(a)
    judge = lambda dst: EVALUATORS[engine](policy_set(objs), inv, flow(a, dst, dport=443))  # noqa: E731
    v = judge("93.184.216.34")
    assert v.verdict == "deny" and v.egress.rule == 1  # nothing learned: never widened
    inv.domains = domains.new_facts()
    inv.domains.learn("www.example.org", "93.184.216.34", 30, 0)
    assert judge("93.184.216.34").egress.rule == 0
    assert judge("93.184.216.35").egress.rule == 1


def test_domain_errors():
    errs = errors(
        gnp("""\
        ingress:
        - action: Allow
          destination: {domains: [a.com]}
        egress:
        - action: Deny
          destination: {domains: ["*.*.com", "ww*.x.com", "bad_name.com"], nets: [10.0.0.0/8]}
        """)
    )
    assert errs == [
        "t.yaml:8: spec.ingress[0].destination.domains: domains are only valid in the destination of egress rules",
        "t.yaml:11: spec.egress[0].destination.domains: domains are only valid for Allow rules",
        "t.yaml:11: spec.egress[0].destination.domains: cannot specify Domains and Nets on the same rule",
        "t.yaml:11: spec.egress[0].destination.domains[0]: invalid domain '*.*.com': only one wildcard is allowed",
        "t.yaml:11: spec.egress[0].destination.domains[1]: invalid domain 'ww*.x.com': "
        "a wildcard must be an entire name component",
        "t.yaml:11: spec.egress[0].destination.domains[2]: invalid domain 'bad_name.com': "
        "'bad_name' is not a valid DNS label",
    ]


@pytest.mark.parametrize("evaluate_with", EVALUATORS.values(), ids=EVALUATORS.keys())
def test_http_matches_the_connections_request(evaluate_with):
    objs = ok(
        gnp("""\
        ingress:
        - action: Allow
          protocol: TCP
          http:
            methods: [GET]
            paths: [{exact: /health}, {prefix: /api/}]
        """)
    )
    policy = objs[0]
    assert not policy.unenforceable
    assert policy.ingress[0].http == HttpMatch(("GET",), (("exact", "/health"), ("prefix", "/api/")))
    a, b = pod("a", "x", "10.0.0.1"), pod("b", "x", "10.0.0.2")
    inv, ps = inventory(a, b), policy_set(objs)

    def judge(request=None, proto=PROTO_TCP):
        return evaluate_with(ps, inv, replace(flow(a, b, proto), request=request and HttpRequest.parse(request)))

    # Without the request: denied, but only for want of it (admitted provisionally when tracked)
    v = judge()
    assert (v.verdict, v.awaits_request, v.ingress.awaits_request) == ("deny", True, True)
    assert not v.egress  # b's egress has no policy
    for request, want in (
        ("GET /health", "allow"),
        ("GET /api/v1?x=1", "allow"),
        ("GET /api", "deny"),
        ("GET /healthz", "deny"),
        ("POST /health", "deny"),
        ("get /health", "deny"),
    ):
        v = judge(request)
        assert (request, v.verdict, v.awaits_request) == (request, want, False)
    # UDP carries no requests: the rule never matches, and nothing awaits one
    v = judge(proto=PROTO_UDP)
    assert (v.verdict, v.awaits_request) == ("deny", False)
    # A rule that decides before the http rule leaves nothing to await
    objs = ok(
        gnp("""\
        ingress:
        - action: Deny
          protocol: TCP
        - action: Allow
          protocol: TCP
          http: {methods: [GET]}
        """)
    )
    v = evaluate_with(policy_set(objs), inv, flow(a, b))
    assert (v.verdict, v.awaits_request) == ("deny", False)
    errs = errors(
        gnp("""\
        ingress:
        - action: Deny
          protocol: UDP
          http: {methods: [GET, GET], paths: [{exact: /a, prefix: /b}, {exact: "no-slash"}, {}]}
        egress:
        - action: Allow
          http: {methods: [GET]}
        """)
    )
    assert errs == [
        "t.yaml:9: spec.ingress[0].http: only valid for Allow rules",
        "t.yaml:8: spec.ingress[0].protocol: rules that specify HTTP fields must set protocol to TCP or empty",
        "t.yaml:9: spec.ingress[0].http.methods: Invalid methods (duplicates): ['GET', 'GET']",
        "t.yaml:9: spec.ingress[0].http.paths[0]: Invalid path match. Both 'exact' and 'prefix' are set",
        "t.yaml:9: spec.ingress[0].http.paths[1]: Invalid path no-slash. (must start with `/` and not contain `?` or `#`",
        "t.yaml:9: spec.ingress[0].http.paths[2]: Invalid path match. Either 'exact' or 'prefix' must be set",
        "t.yaml:12: spec.egress[0].http: not allowed in egress rules",
    ]


# --- doNotTrack / preDNAT / applyOnForward -----------------------------------------------------


def test_host_endpoint_options():
    (policy,) = ok(gnp("doNotTrack: true\napplyOnForward: true\ningress: [{action: Deny}]"))
    assert policy.do_not_track and policy.apply_on_forward and not policy.pre_dnat
    assert policy.subject.endpoint_kinds == {EndpointKind.HOST}  # untracked policy is host-only
    (policy,) = ok(gnp("preDNAT: true\napplyOnForward: true\ningress: [{action: Deny}]"))
    assert policy.pre_dnat and policy.subject.endpoint_kinds == {EndpointKind.HOST}
    (policy,) = ok(gnp("applyOnForward: true"))
    assert policy.apply_on_forward and policy.subject.endpoint_kinds == {EndpointKind.POD, EndpointKind.HOST}


def test_untracked_policy_governs_host_endpoints_only_at_their_hook():
    objs = ok(gnp("doNotTrack: true\napplyOnForward: true\ningress: [{action: Deny}]"))
    h = host("h", "10.0.5.1")
    p = pod("p", "x", "10.0.0.1")
    inv = inventory(h, p)
    untracked = policy_set(objs).for_hook(Hook.UNTRACKED)
    assert evaluate(untracked, inv, flow(p, h)).ingress.reason == "rule"
    assert evaluate(untracked, inv, flow(h, p)).ingress is None
    # felix never puts untracked (or pre-DNAT) policy in the filter chains
    assert policy_set(objs).policies == () and verdict(objs, inv, flow(p, h)).ingress is None


def test_host_endpoint_option_errors():
    errs = errors(gnp("doNotTrack: true\npreDNAT: true\ntypes: [Ingress, Egress]\negress: [{action: Allow}]"))
    assert errs == [
        "t.yaml:7: spec.preDNAT: PreDNAT and DoNotTrack cannot both be true, for a given PolicySpec",
        "t.yaml:9: spec.egress: PreDNAT PolicySpec cannot have any Egress rules",
        "t.yaml:8: spec.types: PreDNAT PolicySpec cannot have 'egress' Type",
        "t.yaml:5: spec.applyOnForward: ApplyOnForward must be true if either PreDNAT or DoNotTrack is true, "
        "for a given PolicySpec",
    ]
    (err,) = errors(np_("applyOnForward: true"))
    assert err == "t.yaml:7: spec.applyOnForward: unknown field 'applyOnForward'"


# --- profiles ---------------------------------------------------------------------------------

PROFILE = """\
apiVersion: projectcalico.org/v3
kind: Profile
metadata:
  name: kns.prod
spec:
  labelsToApply:
    pcns.env: prod
  ingress:
  - action: Deny
    source: {nets: [10.9.0.0/16]}
  - action: Allow
  egress:
  - action: Allow
"""


def test_profile_normalizes():
    (profile,) = ok(PROFILE)
    assert profile.name == "kns.prod" and profile.labels_to_apply == (("pcns.env", "prod"),)
    assert [r.action for r in profile.ingress] == [Action.DENY, Action.ALLOW]
    assert profile.egress[0].action is Action.ALLOW


def test_profiles_decide_after_the_tiers():
    objs = ok(PROFILE + "---\n" + gnp("ingress: [{action: Pass, source: {nets: [10.0.0.0/8]}}]"))
    target = pod("t", "prod", "10.1.0.9", profiles=["kns.prod"])
    inv = inventory(target)
    v = verdict(objs, inv, flow("10.2.0.1", target))
    assert (v.verdict, v.ingress.policy, v.ingress.reason) == ("allow", "Profile/kns.prod", "profile")
    v = verdict(objs, inv, flow("10.9.0.1", target))
    assert (v.verdict, v.ingress.rule) == ("deny", 0)
    v = verdict(objs, inv, flow("192.168.0.1", target))  # the policy applied, no Pass: end of tier
    assert (v.verdict, v.ingress.reason) == ("deny", "end-of-tier")


def test_profile_errors_and_enforced_fields():
    objs, problems = normalize("""\
        apiVersion: projectcalico.org/v3
        kind: Profile
        metadata: {name: p}
        spec:
          ingress:
          - action: Allow
            protocol: TCP
            http: {methods: [GET]}
          egress:
          - action: Allow
            destination: {domains: [example.com]}
        """)
    assert objs and not problems.errors
    assert not problems.warnings  # http and domains are both enforced
    assert objs[0].ingress[0].http is not None
    errs = errors("""\
        apiVersion: projectcalico.org/v3
        kind: Profile
        metadata: {name: p}
        spec:
          labelsToApply: [a]
          ingress: [{action: Jump}]
          selector: all()
        """)
    assert errs == [
        "t.yaml:7: spec.selector: unknown field 'selector'",
        "t.yaml:6: spec.ingress[0].action: Unsupported value: 'Jump': supported values: "
        '"Allow", "Deny", "Log", "Pass"',
        "t.yaml:5: spec.labelsToApply: must be an object",
    ]


# --- the rest of the spec, and every error at once -------------------------------------------


def test_performance_hints_are_accepted():
    (policy,) = ok(gnp("performanceHints: [AssumeNeededOnEveryNode]"))
    assert policy.name == "p"
    (err,) = errors(gnp("performanceHints: [GoFast]"))
    assert err.startswith("t.yaml:6: spec.performanceHints[0]: Unsupported value: 'GoFast'")


def test_staged_action_and_unknown_fields_are_refused():
    errs = errors(gnp("stagedAction: Set\ningress: [{action: Allow, source: {tag: x}, bogus: 1}]"))
    assert errs == [
        "t.yaml:6: spec.stagedAction: unknown field 'stagedAction'",
        "t.yaml:7: spec.ingress[0].bogus: unknown field 'bogus'",
        "t.yaml:7: spec.ingress[0].source.tag: unknown field 'tag'",
    ]


def test_crd_api_group_is_the_same_kind():
    text = gnp("ingress: [{action: Allow}]").replace("projectcalico.org/v3", "crd.projectcalico.org/v1")
    (policy,) = ok(text)
    assert policy.kind == "GlobalNetworkPolicy" and policy.ingress[0].action is Action.ALLOW
    text = np_("selector: all()").replace("projectcalico.org/v3", "crd.projectcalico.org/v1")
    (policy,) = ok(text)
    assert policy.kind == "NetworkPolicy" and policy.namespace == "prod"


def test_namespaced_policy_without_namespace_is_in_default():
    (policy,) = ok("apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: p}\n")
    assert policy.namespace == "default" and policy.ref == "NetworkPolicy/default/p"


def test_policy_names():
    assert ok(gnp("selector: all()", name="tier1.x"))
    errs = errors(gnp("selector: all()", name="a.b.c") + "\n---\n" + np_("selector: all()", name="Upper"))
    assert [e.split(":")[2].strip() for e in errs] == ["metadata.name", "metadata.name"]
    assert ok(np_("selector: all()", name="knp.default.a.b"))


def test_every_error_of_a_broken_policy_in_one_run():
    text = """\
        apiVersion: projectcalico.org/v3
        kind: NetworkPolicy
        metadata:
          name: broken
          namespace: prod
        spec:
          order: first
          tier: Bad_Tier
          selector: app = 'x'
          ingress:
          - action: allow
            protocol: TCP
            source:
              nets: [300.0.0.0/8]
            destination:
              ports: [99999]
          egress:
          - action: Deny
            protocol: XYZ
        """
    objs, problems = normalize(text)
    assert objs == []
    assert [str(p) for p in problems.errors] == [
        "t.yaml:7: spec.order: must be a number, got 'first'",
        "t.yaml:8: spec.tier: invalid tier name 'Bad_Tier': must match [a-z0-9]([-a-z0-9]*[a-z0-9])?",
        "t.yaml:9: spec.selector: invalid selector \"app = 'x'\" at position 4: expected '==', found '='",
        "t.yaml:11: spec.ingress[0].action: Unsupported value: 'allow': supported values: "
        '"Allow", "Deny", "Log", "Pass"',
        "t.yaml:14: spec.ingress[0].source.nets[0]: invalid CIDR '300.0.0.0/8': "
        "'300.0.0.0/8' does not appear to be an IPv4 or IPv6 network",
        "t.yaml:16: spec.ingress[0].destination.ports[0]: port range invalid, port number must be between 1 and 65535",
        "t.yaml:19: spec.egress[0].protocol: protocol name invalid: 'XYZ' "
        "(supported: TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or 1-255)",
    ]
