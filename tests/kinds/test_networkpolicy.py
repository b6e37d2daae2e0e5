"""Kubernetes NetworkPolicy normalization: every field, every API-server validation error (with
its field path), the proposal's examples 1-3 (seed 001) and the v1beta1 isolation annotation."""

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
    Direction,
    EndpointKind,
    NamedPort,
    PolicySet,
    PortMatch,
    PortRange,
)
from pyclassify.kinds import schema
from pyclassify.kinds.networkpolicy import isolation_policies, normalize_networkpolicy
from pyclassify.reference import Flow, FlowEnd, evaluate

IP = ipaddress.ip_address


def np(spec, name="p", namespace="myns"):
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def normalize(obj):
    problems = Problems()
    out = normalize_networkpolicy(Document(obj, "np.yaml", 1), problems)
    return out, problems


def one(spec, **kw):
    out, problems = normalize(np(spec, **kw))
    assert not problems.errors, [str(p) for p in problems]
    assert len(out) == 1
    return out[0]


def errors(spec, **kw):
    out, problems = normalize(np(spec, **kw))
    assert out == []
    return [(p.path, p.message) for p in problems.errors]


# -- fields ------------------------------------------------------------------------------------


def test_basic_shape():
    p = one({"podSelector": {"matchLabels": {"role": "db"}}})
    assert p.kind == "NetworkPolicy" and p.tier == "default" and p.order is None
    assert p.ref == "NetworkPolicy/myns/p"
    assert p.subject.namespace == "myns" and p.subject.endpoint_kinds == {EndpointKind.POD}
    assert p.subject.selector.matches({"role": "db"}) and not p.subject.selector.matches({"role": "web"})


def test_missing_namespace_defaults_to_default():
    obj = np({"podSelector": {}})
    del obj["metadata"]["namespace"]
    out, _ = normalize(obj)
    assert out[0].namespace == "default"


@pytest.mark.parametrize(
    "spec,types",
    [
        ({"podSelector": {}}, {Direction.INGRESS}),
        ({"podSelector": {}, "egress": [{}]}, {Direction.INGRESS, Direction.EGRESS}),
        ({"podSelector": {}, "egress": []}, {Direction.INGRESS}),
        ({"podSelector": {}, "policyTypes": ["Egress"]}, {Direction.EGRESS}),
        ({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, {Direction.INGRESS, Direction.EGRESS}),
    ],
)
def test_policy_types_defaulting(spec, types):
    assert one(spec).types == types


def test_rules_are_ordered_allows_with_paths():
    p = one({"podSelector": {}, "ingress": [{}, {"from": [{"podSelector": {}}]}]})
    assert [r.action for r in p.ingress] == [Action.ALLOW, Action.ALLOW]
    assert [r.index for r in p.ingress] == [0, 1]
    assert p.ingress[1].path == "spec.ingress[1]"
    assert p.ingress[0].sources == () and p.ingress[0].destinations == ()


def test_peers():
    p = one(
        {
            "podSelector": {},
            "ingress": [
                {
                    "from": [
                        {"podSelector": {"matchLabels": {"a": "1"}}},
                        {"namespaceSelector": {"matchLabels": {"team": "x"}}},
                        {
                            "namespaceSelector": {"matchLabels": {"team": "x"}},
                            "podSelector": {"matchLabels": {"a": "1"}},
                        },
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    ]
                }
            ],
        }
    )
    pods, nss, both, block = p.ingress[0].sources
    assert pods.namespace == "myns" and pods.namespace_selector is None and pods.selector.matches({"a": "1"})
    assert nss.namespace is None and nss.selector is None and nss.namespace_selector.matches({"team": "x"})
    assert both.namespace is None and both.selector.matches({"a": "1"}) and both.namespace_selector is not None
    assert block.nets == (ipaddress.ip_network("10.0.0.0/8"),) and block.not_nets == (
        ipaddress.ip_network("10.1.0.0/16"),
    )
    assert block.endpoint_kinds is None


def test_ports():
    p = one(
        {
            "podSelector": {},
            "ingress": [
                {
                    "ports": [
                        {"port": 80},
                        {"protocol": "UDP", "port": 53},
                        {"protocol": "SCTP"},
                        {"port": "http"},
                        {"port": 32000, "endPort": 32768},
                    ]
                }
            ],
        }
    )
    (dest,) = p.ingress[0].destinations
    assert dest.ports == (
        PortMatch(PROTO_TCP, PortRange(80, 80)),
        PortMatch(PROTO_UDP, PortRange(53, 53)),
        PortMatch(PROTO_SCTP, None),
        PortMatch(PROTO_TCP, NamedPort("http")),
        PortMatch(PROTO_TCP, PortRange(32000, 32768)),
    )


def test_a_quoted_port_number_is_a_port_name_and_no_valid_one():
    """An IntOrString decodes a quoted number as a string, and the API server validates it as a
    port name (apimachinery IsValidPortName): "8080" has no letter."""
    out, problems = normalize(np({"podSelector": {}, "ingress": [{"ports": [{"port": "8080"}]}]}))
    assert out == []
    assert [(p.path, p.message) for p in problems.errors] == [
        ("spec.ingress[0].ports[0].port", "Invalid value: '8080': must contain at least one letter (a-z)")
    ]


def test_egress_ports_go_on_each_peer():
    p = one(
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {}}, {"ipBlock": {"cidr": "1.2.3.0/24"}}], "ports": [{"port": 443}]}],
        }
    )
    assert all(d.ports == (PortMatch(PROTO_TCP, PortRange(443, 443)),) for d in p.egress[0].destinations)
    assert p.egress[0].sources == ()


def test_ipblock_host_bits_accepted_as_api_server_does():
    p = one({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "192.168.242.213/24"}}]}]})
    assert p.ingress[0].sources[0].nets == (ipaddress.ip_network("192.168.242.0/24"),)


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,path,fragment",
    [
        ({"podSelector": {}, "policyTypes": ["Sideways"]}, "spec.policyTypes[0]", "Unsupported value"),
        ({"podSelector": {}, "policyTypes": ["Ingress", "Ingress"]}, "spec.policyTypes[1]", "Duplicate"),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "endPort": 79}]}]},
            "spec.ingress[0].ports[0].endPort",
            "greater than or equal",
        ),
        ({"podSelector": {}, "ingress": [{"ports": [{"endPort": 90}]}]}, "spec.ingress[0].ports[0].endPort", "port"),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 90}]}]},
            "spec.ingress[0].ports[0].endPort",
            "non-numeric",
        ),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]},
            "spec.ingress[0].ports[0].port",
            "between 1 and 65535",
        ),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": 70000}]}]},
            "spec.ingress[0].ports[0].port",
            "between 1 and 65535",
        ),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": "Http_Port"}]}]},
            "spec.ingress[0].ports[0].port",
            "alpha-numeric",
        ),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"port": "a-very-long-port-name"}]}]},
            "spec.ingress[0].ports[0].port",
            "15 characters",
        ),
        (
            {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]},
            "spec.ingress[0].ports[0].protocol",
            "Unsupported value",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]},
            "spec.ingress[0].from[0].ipBlock.cidr",
            "CIDR",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}]},
            "spec.ingress[0].from[0].ipBlock.cidr",
            "CIDR",
        ),
        (
            {
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}],
            },
            "spec.ingress[0].from[0].ipBlock.except[0]",
            "strict subset",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}}]}]},
            "spec.ingress[0].from[0].ipBlock.except[0]",
            "strict subset",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["fd00::/64"]}}]}]},
            "spec.ingress[0].from[0].ipBlock.except[0]",
            "strict subset",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]},
            "spec.ingress[0].from[0]",
            "ipBlock",
        ),
        ({"podSelector": {}, "ingress": [{"from": [{}]}]}, "spec.ingress[0].from[0]", "peer"),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}},
            "spec.podSelector.matchExpressions[0].operator",
            "",
        ),
        (
            {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"bad key!": "x"}}}]}]},
            "spec.ingress[0].from[0].namespaceSelector.matchLabels",
            "",
        ),
        ({"podSelector": {}, "ingres": []}, "spec.ingres", "unknown field"),
    ],
)
def test_validation_errors(spec, path, fragment):
    errs = errors(spec)
    assert any(p.startswith(path) and fragment in m for p, m in errs), errs


def test_every_error_reported_in_one_run():
    errs = errors(
        {
            "podSelector": {},
            "ingress": [
                {"ports": [{"port": 0}, {"protocol": "XTP"}]},
                {"from": [{"ipBlock": {"cidr": "nope"}}]},
            ],
        }
    )
    assert {p for p, _ in errs} == {
        "spec.ingress[0].ports[0].port",
        "spec.ingress[0].ports[1].protocol",
        "spec.ingress[1].from[0].ipBlock.cidr",
    }


def test_error_line_comes_from_document_lines():
    doc = Document(
        np({"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]}),
        "f.yaml",
        3,
        lines={("spec", "ingress", 0, "ports", 0, "port"): 12},
    )
    problems = Problems()
    normalize_networkpolicy(doc, problems)
    assert str(problems.errors[0]).startswith("f.yaml:12: spec.ingress[0].ports[0].port: ")


# -- the proposal's examples (seed 001), written as v1 --------------------------------------------


@pytest.fixture
def myns():
    inv = Inventory()
    inv.namespaces["myns"] = Namespace("myns", {"kubernetes.io/metadata.name": "myns"})
    inv.namespaces["bobs"] = Namespace("bobs", {"user": "bob", "kubernetes.io/metadata.name": "bobs"})
    for i, (ns, name, role) in enumerate(
        [("myns", "fe", "frontend"), ("myns", "be", "backend"), ("myns", "other", "other"), ("bobs", "bobpod", "x")]
    ):
        inv.endpoints.append(
            Endpoint(
                EndpointKind.POD,
                name,
                ns,
                {"role": role},
                ips=(IP(f"10.0.0.{i + 1}"),),
                ports=(ContainerPort(6379, PROTO_TCP, "redis"),),
            )
        )
    return inv


NS_ISOLATED = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": "myns",
        "annotations": {"net.beta.kubernetes.io/network-policy": '{"ingress": {"isolation": "DefaultDeny"}}'},
    },
}


def _allowed(inv, objs, src, dst, port, namespaces=()):
    problems = Problems()
    # The proposal's examples, written as v1, are what the API server takes.
    assert [schema.field_problems(o) for o in [*objs, *namespaces]] == [[]] * (len(objs) + len(namespaces))
    policies = [p for o in objs for p in normalize_networkpolicy(Document(o, "x", 1), problems)]
    policies += isolation_policies([Document(n, "ns", 1) for n in namespaces], problems)
    assert not problems.errors
    flow = Flow(FlowEnd(inv.find(src)), FlowEnd(inv.find(dst)), PROTO_TCP, 40000, port)
    return evaluate(PolicySet.build(policies), inv, flow).allowed


def test_example_1_frontend_to_backend_6379(myns):
    pol = np(
        {
            "podSelector": {"matchLabels": {"role": "backend"}},
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                    "ports": [{"protocol": "TCP", "port": 6379}],
                }
            ],
        },
        name="allow-frontend",
    )
    assert _allowed(myns, [pol], "myns/fe", "myns/be", 6379, [NS_ISOLATED])
    assert not _allowed(myns, [pol], "myns/fe", "myns/be", 6380, [NS_ISOLATED])
    assert not _allowed(myns, [pol], "myns/other", "myns/be", 6379, [NS_ISOLATED])
    # The namespace's DefaultDeny isolates pods no policy selects too.
    assert not _allowed(myns, [pol], "myns/be", "myns/fe", 6379, [NS_ISOLATED])
    assert _allowed(myns, [pol], "myns/be", "myns/fe", 6379)


def test_example_2_tcp_443_from_bobs_namespaces(myns):
    pol = np(
        {
            "podSelector": {"matchLabels": {"role": "frontend"}},
            "ingress": [
                {
                    "ports": [{"protocol": "TCP", "port": 443}],
                    "from": [{"namespaceSelector": {"matchLabels": {"user": "bob"}}}],
                }
            ],
        },
        name="allow-tcp-443",
    )
    assert _allowed(myns, [pol], "bobs/bobpod", "myns/fe", 443)
    assert not _allowed(myns, [pol], "myns/be", "myns/fe", 443)
    assert not _allowed(myns, [pol], "bobs/bobpod", "myns/fe", 80)


def test_example_3_allow_all(myns):
    pol = np({"podSelector": {}, "ingress": [{}]}, name="allow-all")
    assert _allowed(myns, [pol], "bobs/bobpod", "myns/be", 1234, [NS_ISOLATED])


def test_named_port_rule(myns):
    pol = np({"podSelector": {}, "ingress": [{"ports": [{"port": "redis"}]}]})
    assert _allowed(myns, [pol], "bobs/bobpod", "myns/be", 6379)
    assert not _allowed(myns, [pol], "bobs/bobpod", "myns/be", 6380)


def test_isolation_annotation_errors():
    bad = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "x",
            "annotations": {"net.beta.kubernetes.io/network-policy": '{"ingress": {"isolation": "Maybe"}}'},
        },
    }
    broken = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "y", "annotations": {"net.beta.kubernetes.io/network-policy": '{"ingress": '}},
    }
    problems = Problems()
    assert isolation_policies([Document(bad, "a", 1), Document(broken, "b", 1)], problems) == []
    assert [p.path for p in problems.errors] == ["metadata.annotations.net.beta.kubernetes.io/network-policy"] * 2


def test_isolation_policy_shape():
    problems = Problems()
    (p,) = isolation_policies([Document(NS_ISOLATED, "ns.yaml", 1)], problems)
    assert p.subject.namespace == "myns" and p.types == {Direction.INGRESS} and p.ingress == ()
    assert p.ref == "Namespace/myns"
