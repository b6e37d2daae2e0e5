"""ClusterNetworkPolicy (v1alpha2): tiers, priority, actions, protocols, peers, validation and the
fail-closed rule for peers that cannot be resolved."""

from __future__ import annotations

import ipaddress

import pytest

from pyclassify.documents import Document, Problems
from pyclassify.inventory import ContainerPort, Endpoint, Inventory, Namespace
from pyclassify.ir import (
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    Action,
    EndpointKind,
    NamedPort,
    PolicySet,
    PortMatch,
    PortRange,
)
from pyclassify.kinds.clusternetworkpolicy import normalize_cnp
from pyclassify.reference import Flow, FlowEnd, evaluate

IP = ipaddress.ip_address
NS_ALL = {"namespaces": {}}


def cnp(spec, name="c"):
    return {
        "apiVersion": "policy.networking.k8s.io/v1alpha2",
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def run(obj):
    problems = Problems()
    return normalize_cnp(Document(obj, "cnp.yaml", 1), problems), problems


def one(spec, name="c"):
    out, problems = run(cnp(spec, name))
    assert not problems.errors, [str(p) for p in problems]
    return out[0]


@pytest.mark.parametrize("tier,ir_tier", [("Admin", "kube-admin"), ("Baseline", "kube-baseline")])
def test_tiers_and_priority(tier, ir_tier):
    p = one(
        {
            "tier": tier,
            "priority": 5,
            "subject": NS_ALL,
            "ingress": [{"action": "Accept", "from": [{"namespaces": {}}]}],
        }
    )
    assert (p.tier, p.order, p.kind) == (ir_tier, 5.0, "ClusterNetworkPolicy")


def test_actions():
    p = one(
        {
            "tier": "Admin",
            "priority": 1,
            "subject": NS_ALL,
            "ingress": [{"action": a, "from": [{"namespaces": {}}]} for a in ("Accept", "Deny", "Pass")],
        }
    )
    assert [r.action for r in p.ingress] == [Action.ALLOW, Action.DENY, Action.PASS]


def test_protocols():
    p = one(
        {
            "tier": "Admin",
            "priority": 1,
            "subject": NS_ALL,
            "egress": [
                {
                    "action": "Accept",
                    "to": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}],
                    "protocols": [
                        {"tcp": {"destinationPort": {"number": 80}}},
                        {"udp": {"destinationPort": {"range": {"start": 1000, "end": 2000}}}},
                        {"sctp": {"destinationPort": {"number": 9003}}},
                        {"destinationNamedPort": "web"},
                    ],
                }
            ],
        }
    )
    assert p.egress[0].destinations[0].ports == (
        PortMatch(PROTO_TCP, PortRange(80, 80)),
        PortMatch(PROTO_UDP, PortRange(1000, 2000)),
        PortMatch(PROTO_SCTP, PortRange(9003, 9003)),
        PortMatch(None, NamedPort("web")),
    )


def test_peers():
    p = one(
        {
            "tier": "Baseline",
            "priority": 0,
            "subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}}},
            "egress": [
                {
                    "action": "Deny",
                    "to": [
                        {"namespaces": {"matchLabels": {"t": "x"}}},
                        {"nodes": {}},
                        {"networks": ["0.0.0.0/0", "::/0"]},
                        {"domainNames": ["*.example.com"]},
                    ],
                }
            ],
        }
    )
    ns, nodes, nets, domains = p.egress[0].destinations
    assert ns.namespace_selector.matches({"t": "x"}) and nodes.node_selector.is_all and len(nets.nets) == 2
    # the addresses DNS taught for the names (Inventory.domains), enforceable
    assert domains.domains == ("*.example.com",) and domains.unresolvable is None and p.unenforceable == ()


@pytest.mark.parametrize(
    "spec,path,fragment",
    [
        ({"priority": 1, "subject": NS_ALL}, "spec.tier", "Required"),
        ({"tier": "Middle", "priority": 1, "subject": NS_ALL}, "spec.tier", "Unsupported"),
        ({"tier": "Admin", "subject": NS_ALL}, "spec.priority", "Required"),
        ({"tier": "Admin", "priority": 1001, "subject": NS_ALL}, "spec.priority", "between 0 and 1000"),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"namespaces": {}}]}],
            },
            "spec.ingress[0].action",
            "Unsupported",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Accept", "from": [{"namespaces": {}}]}] * 26,
            },
            "spec.ingress",
            "at most 25",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Accept", "from": [{"namespaces": {}}] * 26}],
            },
            "spec.ingress[0].from",
            "at most 25",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Accept", "from": [{"namespaces": {"related": "Self"}}]}],
            },
            "spec.ingress[0].from[0].namespaces",
            "label selector",
        ),
        (
            {"tier": "Admin", "priority": 1, "subject": NS_ALL, "ingress": [{"action": "Accept", "from": [{}]}]},
            "spec.ingress[0].from[0]",
            "exactly one",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Accept", "from": [{"namespaces": {}}], "protocols": []}],
            },
            "spec.ingress[0].protocols",
            "between 1 and 25",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Accept", "from": [{"namespaces": {}}], "protocols": [{"tcp": {}}]}],
            },
            "spec.ingress[0].protocols[0].tcp",
            "at least 1",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Accept",
                        "from": [{"namespaces": {}}],
                        "protocols": [{"tcp": {"destinationPort": {"number": 1, "range": {"start": 1, "end": 2}}}}],
                    }
                ],
            },
            "spec.ingress[0].protocols[0].tcp.destinationPort",
            "exactly one",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Accept",
                        "from": [{"namespaces": {}}],
                        "protocols": [{"udp": {"destinationPort": {"range": {"start": 5, "end": 5}}}}],
                    }
                ],
            },
            "spec.ingress[0].protocols[0].udp.destinationPort.range.end",
            "less than",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Accept",
                        "from": [{"namespaces": {}}],
                        "protocols": [{"tcp": {"destinationPort": {"number": 0}}}],
                    }
                ],
            },
            "spec.ingress[0].protocols[0].tcp.destinationPort.number",
            "between 1 and 65535",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Accept",
                        "from": [{"namespaces": {}}],
                        "protocols": [
                            {"tcp": {"destinationPort": {"number": 1}}, "udp": {"destinationPort": {"number": 1}}}
                        ],
                    }
                ],
            },
            "spec.ingress[0].protocols[0]",
            "exactly one",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "egress": [{"action": "Accept", "to": [{"nodes": {}}], "protocols": [{"destinationNamedPort": "web"}]}],
            },
            "spec.egress[0].protocols",
            "named ports",
        ),
        (
            {
                "tier": "Admin",
                "priority": 1,
                "subject": NS_ALL,
                "egress": [{"action": "Accept", "to": [{"networks": ["300.0.0.0/8"]}]}],
            },
            "spec.egress[0].to[0].networks[0]",
            "CIDR",
        ),
    ],
)
def test_validation(spec, path, fragment):
    out, problems = run(cnp(spec))
    assert out == []
    found = [(p.path, p.message) for p in problems.errors]
    assert any(p.startswith(path) and fragment in m for p, m in found), found


# -- behaviour, including fail closed ----------------------------------------------------------------


@pytest.fixture
def inv():
    i = Inventory()
    for n, name in enumerate(("a", "b")):
        i.namespaces[name] = Namespace(name, {"kubernetes.io/metadata.name": name})
        i.endpoints.append(
            Endpoint(
                EndpointKind.POD,
                "p",
                name,
                {"app": name},
                ips=(IP(f"10.0.0.{n + 1}"),),
                ports=(ContainerPort(8080, PROTO_TCP, "web"),),
            )
        )
    return i


def check(inv, objs, src, dst, port=8080):
    problems = Problems()
    policies = [p for o in objs for p in normalize_cnp(Document(o, "x", 1), problems)]
    assert not problems.errors
    dst_end = FlowEnd(inv.find(dst)) if "/" in dst else FlowEnd(None, IP(dst))
    return evaluate(PolicySet.build(policies), inv, Flow(FlowEnd(inv.find(src)), dst_end, PROTO_TCP, 40000, port))


def test_admin_before_baseline_and_named_port(inv):
    admin = cnp(
        {
            "tier": "Admin",
            "priority": 1,
            "subject": NS_ALL,
            "ingress": [
                {"action": "Accept", "from": [{"namespaces": {}}], "protocols": [{"destinationNamedPort": "web"}]}
            ],
        },
        "admin",
    )
    base = cnp(
        {
            "tier": "Baseline",
            "priority": 1,
            "subject": NS_ALL,
            "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}],
        },
        "base",
    )
    assert check(inv, [admin, base], "a/p", "b/p", 8080).allowed
    v = check(inv, [admin, base], "a/p", "b/p", 9090)
    assert not v.allowed and v.ingress.tier == "kube-baseline"


@pytest.mark.parametrize("action,allowed", [("Accept", False), ("Deny", False), ("Pass", False)])
def test_unknown_peer_fails_closed(inv, action, allowed):
    """A peer of a newer API (only unknown fields) is reported and fails closed: Accept through it
    matches nothing (the baseline Deny decides), Deny and Pass deny."""
    obj = cnp(
        {
            "tier": "Admin",
            "priority": 1,
            "subject": NS_ALL,
            "egress": [{"action": action, "to": [{"futurePeer": {"x": 1}}]}],
        }
    )
    base = cnp(
        {
            "tier": "Baseline",
            "priority": 1,
            "subject": NS_ALL,
            "egress": [{"action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}]}],
        },
        "base",
    )
    out, problems = run(obj)
    assert out and out[0].egress[0].destinations[0].unresolvable and problems.warnings
    v = check(inv, [obj, base], "a/p", "8.8.8.8", 53)
    assert v.allowed is allowed
    assert v.egress.tier == ("kube-baseline" if action == "Accept" else "kube-admin")


def test_domain_accept_never_widens(inv):
    obj = cnp(
        {
            "tier": "Admin",
            "priority": 1,
            "subject": NS_ALL,
            "egress": [
                {"action": "Accept", "to": [{"domainNames": ["example.com"]}]},
                {"action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}]},
            ],
        }
    )
    v = check(inv, [obj], "a/p", "93.184.216.34", 443)
    assert not v.allowed and v.egress.rule == 1
