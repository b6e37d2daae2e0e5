"""AdminNetworkPolicy / BaselineAdminNetworkPolicy: both v1alpha1 shapes, every field, the CRD's
validation errors, and the KEP's user stories 1-5 (seed 003) as behaviour tests."""

from __future__ import annotations

import ipaddress

import pytest

from pyclassify.documents import Document, Problems
from pyclassify.inventory import ContainerPort, Endpoint, Inventory, Namespace
from pyclassify.ir import (
    PROTO_TCP,
    PROTO_UDP,
    Action,
    Direction,
    EndpointKind,
    NamedPort,
    PolicySet,
    PortMatch,
    PortRange,
    Relation,
)
from pyclassify.kinds import schema
from pyclassify.kinds.adminnetworkpolicy import normalize_anp, normalize_banp
from pyclassify.kinds.networkpolicy import normalize_networkpolicy
from pyclassify.reference import Flow, FlowEnd, evaluate

IP = ipaddress.ip_address


def anp(spec, name="a", kind="AdminNetworkPolicy"):
    return {"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def run(obj):
    problems = Problems()
    fn = normalize_anp if obj["kind"] == "AdminNetworkPolicy" else normalize_banp
    return fn(Document(obj, "anp.yaml", 1), problems), problems


def one(obj):
    out, problems = run(obj)
    assert not problems.errors, [str(p) for p in problems]
    return out[0]


def errs(obj):
    out, problems = run(obj)
    assert out == []
    return [(p.path, p.message) for p in problems.errors]


NS_ALL = {"namespaces": {}}


def test_anp_tier_order_and_names():
    p = one(
        anp(
            {
                "priority": 7,
                "subject": NS_ALL,
                "ingress": [
                    {"name": "r1", "action": "Allow", "from": [{"namespaces": {}}]},
                    {"action": "Pass", "from": [{"namespaces": {}}]},
                ],
            }
        )
    )
    assert (p.tier, p.order, p.namespace) == ("kube-admin", 7.0, None)
    assert p.ref == "AdminNetworkPolicy/a"
    assert [r.label for r in p.ingress] == ["r1", 1] and p.ingress[1].action is Action.PASS
    assert p.types == {Direction.INGRESS}


def test_banp_tier():
    p = one(
        anp(
            {"subject": NS_ALL, "egress": [{"action": "Deny", "to": [{"namespaces": {}}]}]},
            name="default",
            kind="BaselineAdminNetworkPolicy",
        )
    )
    assert (p.tier, p.order, p.types) == ("kube-baseline", None, {Direction.EGRESS})


def test_subjects():
    p = one(
        anp(
            {
                "priority": 1,
                "subject": {
                    "pods": {
                        "namespaceSelector": {"matchLabels": {"t": "x"}},
                        "podSelector": {"matchLabels": {"app": "w"}},
                    }
                },
            }
        )
    )
    assert p.subject.namespace_selector.matches({"t": "x"}) and p.subject.selector.matches({"app": "w"})
    assert p.subject.endpoint_kinds == {EndpointKind.POD}


def test_released_shape_peers():
    p = one(
        anp(
            {
                "priority": 1,
                "subject": NS_ALL,
                "egress": [
                    {
                        "action": "Allow",
                        "to": [
                            {"namespaces": {"matchLabels": {"t": "x"}}},
                            {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "db"}}}},
                            {"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}},
                            {"networks": ["10.0.0.0/8", "fd00::/8"]},
                        ],
                    }
                ],
            }
        )
    )
    ns, pods, nodes, nets = p.egress[0].destinations
    assert ns.namespace_selector.matches({"t": "x"}) and ns.selector is None
    assert pods.selector.matches({"app": "db"}) and pods.namespace_selector.is_all
    assert nodes.node_selector.matches({"kubernetes.io/os": "linux"})
    assert len(nets.nets) == 2


def test_kep_shape_peers():
    p = one(
        anp(
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Deny",
                        "from": [
                            {"namespaces": {"related": "Self"}},
                            {"namespaces": {"related": "NotSelf"}},
                            {"namespaces": {"sameLabels": ["tenant"]}},
                            {"namespaces": {"notSameLabels": ["tenant"]}},
                            {
                                "pods": {
                                    "namespaces": {"namespaceSelector": {"matchLabels": {"t": "x"}}},
                                    "podSelector": {},
                                }
                            },
                            {"pods": {"namespaces": {"related": "Self"}, "podSelector": {"matchLabels": {"a": "b"}}}},
                        ],
                    }
                ],
            }
        )
    )
    s = p.ingress[0].sources
    assert s[0].namespace_relation is Relation.SELF and s[1].namespace_relation is Relation.NOT_SELF
    assert s[2].same_labels == ("tenant",) and s[3].not_same_labels == ("tenant",)
    assert s[4].namespace_selector.matches({"t": "x"}) and s[4].selector.is_all
    assert s[5].namespace_relation is Relation.SELF and s[5].selector.matches({"a": "b"})


def test_ports():
    p = one(
        anp(
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [
                            {"portNumber": {"protocol": "UDP", "port": 53}},
                            {"portNumber": {"port": 80}},
                            {"namedPort": "web"},
                            {"portRange": {"start": 1000, "end": 2000}},
                        ],
                    }
                ],
            }
        )
    )
    assert p.ingress[0].destinations[0].ports == (
        PortMatch(PROTO_UDP, PortRange(53, 53)),
        PortMatch(PROTO_TCP, PortRange(80, 80)),
        PortMatch(None, NamedPort("web")),
        PortMatch(PROTO_TCP, PortRange(1000, 2000)),
    )


def test_domain_names_match_learned_addresses():
    p = one(
        anp(
            {
                "priority": 1,
                "subject": NS_ALL,
                "egress": [{"action": "Allow", "to": [{"domainNames": ["*.example.com", "kubernetes.io"]}]}],
            }
        )
    )
    peer = p.egress[0].destinations[0]
    assert peer.domains == ("*.example.com", "kubernetes.io") and peer.unresolvable is None
    assert p.unenforceable == ()


@pytest.mark.parametrize(
    "spec,path,fragment",
    [
        ({"subject": NS_ALL}, "spec.priority", "Required"),
        ({"priority": 1001, "subject": NS_ALL}, "spec.priority", "between 0 and 1000"),
        ({"priority": -1, "subject": NS_ALL}, "spec.priority", "between 0 and 1000"),
        ({"priority": 1}, "spec.subject", "Required"),
        ({"priority": 1, "subject": {"namespaces": {}, "pods": {"podSelector": {}}}}, "spec.subject", "exactly one"),
        (
            {"priority": 1, "subject": NS_ALL, "ingress": [{"action": "Accept", "from": [{"namespaces": {}}]}]},
            "spec.ingress[0].action",
            "Unsupported",
        ),
        ({"priority": 1, "subject": NS_ALL, "ingress": [{"action": "Allow"}]}, "spec.ingress[0].from", "Required"),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "name": "x" * 101, "from": [{"namespaces": {}}]}],
            },
            "spec.ingress[0].name",
            "Too long",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"networks": ["10.0.0.0/8"]}]}],
            },
            "spec.ingress[0].from[0].networks",
            "unknown field",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"namespaces": {}, "pods": {"podSelector": {}}}]}],
            },
            "spec.ingress[0].from[0]",
            "exactly one",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"namespaces": {"related": "Sibling"}}]}],
            },
            "spec.ingress[0].from[0].namespaces.related",
            "Unsupported",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"namespaces": {"related": "Self", "sameLabels": ["a"]}}]}],
            },
            "spec.ingress[0].from[0].namespaces",
            "exactly one",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [{"action": "Allow", "from": [{"namespaces": {"sameLabels": []}}]}],
            },
            "spec.ingress[0].from[0].namespaces.sameLabels",
            "non-empty",
        ),
        (
            {"priority": 1, "subject": NS_ALL, "egress": [{"action": "Allow", "to": [{"networks": ["10.0.0.0/40"]}]}]},
            "spec.egress[0].to[0].networks[0]",
            "CIDR",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "egress": [{"action": "Allow", "to": [{"networks": [f"10.{i}.0.0/16" for i in range(26)]}]}],
            },
            "spec.egress[0].to[0].networks",
            "25",
        ),
        (
            {"priority": 1, "subject": NS_ALL, "egress": [{"action": "Allow", "to": [{"domainNames": ["bad..name"]}]}]},
            "spec.egress[0].to[0].domainNames[0]",
            "domain",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "egress": [{"action": "Allow", "to": [{"networks": ["10.0.0.0/8"]}], "ports": [{"namedPort": "web"}]}],
            },
            "spec.egress[0].ports",
            "named ports",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [{"portRange": {"start": 90, "end": 80}}],
                    }
                ],
            },
            "spec.ingress[0].ports[0].portRange.end",
            "greater",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [{"portRange": {"start": 80, "end": 80}}],
                    }
                ],
            },
            "spec.ingress[0].ports[0].portRange.end",
            "less than",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [{"portNumber": {"port": 80}, "namedPort": "x"}],
                    }
                ],
            },
            "spec.ingress[0].ports[0]",
            "exactly one",
        ),
        (
            {
                "priority": 1,
                "subject": NS_ALL,
                "ingress": [
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [{"portNumber": {"protocol": "ICMP", "port": 1}}],
                    }
                ],
            },
            "spec.ingress[0].ports[0].portNumber.protocol",
            "Unsupported",
        ),
        (
            {"priority": 1, "subject": NS_ALL, "ingress": [{"action": "Allow", "from": [{"namespaces": {}}]}] * 101},
            "spec.ingress",
            "at most 100",
        ),
    ],
)
def test_anp_validation(spec, path, fragment):
    found = errs(anp(spec))
    assert any(p.startswith(path) and fragment in m for p, m in found), found


def test_banp_name_and_actions():
    found = errs(
        anp(
            {"subject": NS_ALL, "ingress": [{"action": "Pass", "from": [{"namespaces": {}}]}]},
            name="other",
            kind="BaselineAdminNetworkPolicy",
        )
    )
    assert {p for p, _ in found} == {"metadata.name", "spec.ingress[0].action"}


# -- user stories (seed 003) -----------------------------------------------------------------------


@pytest.fixture
def cluster():
    inv = Inventory()
    spec = {
        "sensitive-ns": {},
        "monitoring-ns": {},
        "kube-system": {},
        "bar-ns-1": {},
        "t1-a": {"tenant": "t1"},
        "t1-b": {"tenant": "t1"},
        "t2-a": {"tenant": "t2"},
        "plain": {},
    }
    for i, (name, labels) in enumerate(spec.items()):
        inv.namespaces[name] = Namespace(name, {**labels, "kubernetes.io/metadata.name": name})
        app = {"kube-system": "kube-dns", "bar-ns-1": "svc-pub"}.get(name, "app")
        inv.endpoints.append(
            Endpoint(
                EndpointKind.POD,
                "p",
                name,
                {"app": app},
                ips=(IP(f"10.0.{i}.1"),),
                ports=(ContainerPort(8080, PROTO_TCP, "web"),),
            )
        )
    return inv


def verdict(inv, objs, src, dst, port=8080, proto=PROTO_TCP):
    problems = Problems()
    policies = []
    for o in objs:
        # The stories' objects are what the API server takes: their CRD's schema has every field.
        assert schema.field_problems(o) == []
        fn = {
            "AdminNetworkPolicy": normalize_anp,
            "BaselineAdminNetworkPolicy": normalize_banp,
            "NetworkPolicy": normalize_networkpolicy,
        }[o["kind"]]
        policies += fn(Document(o, "x", 1), problems)
    assert not problems.errors, [str(p) for p in problems]
    f = Flow(FlowEnd(inv.find(f"{src}/p")), FlowEnd(inv.find(f"{dst}/p")), proto, 40000, port)
    return evaluate(PolicySet.build(policies), inv, f)


def test_story_1_deny_at_cluster_level(cluster):
    pol = anp(
        {
            "priority": 10,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "sensitive-ns"}}},
            "ingress": [{"action": "Deny", "from": [{"namespaces": {"namespaceSelector": {}}}]}],
        },
        "cluster-wide-deny-example",
    )
    allow_all_np = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "open", "namespace": "sensitive-ns"},
        "spec": {"podSelector": {}, "ingress": [{}]},
    }
    v = verdict(cluster, [pol, allow_all_np], "plain", "sensitive-ns")
    assert not v.allowed and v.ingress.policy == "AdminNetworkPolicy/cluster-wide-deny-example"
    assert verdict(cluster, [pol], "sensitive-ns", "plain").allowed


def test_story_2_allow_at_cluster_level(cluster):
    # The seed writes "matchlabels"; the API rejects that (below), so it is spelled right here.
    pol = anp(
        {
            "priority": 30,
            "subject": {"namespaces": {}},
            "ingress": [
                {
                    "action": "Allow",
                    "from": [
                        {
                            "namespaces": {
                                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring-ns"}}
                            }
                        }
                    ],
                }
            ],
            "egress": [
                {
                    "action": "Allow",
                    "to": [
                        {
                            "pods": {
                                "namespaces": {
                                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
                                },
                                "podSelector": {"matchLabels": {"app": "kube-dns"}},
                            }
                        }
                    ],
                }
            ],
        }
    )
    deny_np = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "iso", "namespace": "plain"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    assert verdict(cluster, [pol, deny_np], "monitoring-ns", "plain").allowed
    assert verdict(cluster, [pol, deny_np], "plain", "kube-system", 53, PROTO_UDP).allowed
    assert not verdict(cluster, [pol, deny_np], "t1-a", "plain").allowed


def test_story_2_as_written_is_rejected():
    found = errs(
        anp(
            {
                "priority": 30,
                "subject": {"namespaces": {}},
                "egress": [
                    {
                        "action": "Allow",
                        "to": [
                            {
                                "pods": {
                                    "namespaces": {"namespaceSelector": {"matchlabels": {"a": "b"}}},
                                    "podSelector": {"matchlabels": {"app": "kube-dns"}},
                                }
                            }
                        ],
                    }
                ],
            }
        )
    )
    assert (
        "spec.egress[0].to[0].pods.namespaces.namespaceSelector.matchlabels",
        "unknown field 'matchlabels'",
    ) in found
    assert ("spec.egress[0].to[0].pods.podSelector.matchlabels", "unknown field 'matchlabels'") in found


def test_story_3_delegate_to_network_policy(cluster):
    pol = anp(
        {
            "priority": 20,
            "subject": {"namespaces": {}},
            "egress": [
                {
                    "action": "Pass",
                    "to": [
                        {
                            "pods": {
                                "namespaces": {
                                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bar-ns-1"}}
                                },
                                "podSelector": {"matchLabels": {"app": "svc-pub"}},
                            }
                        }
                    ],
                    "ports": [{"portNumber": {"protocol": "TCP", "port": 8080}}],
                }
            ],
        }
    )
    deny_all = anp(
        {
            "priority": 40,
            "subject": {"namespaces": {}},
            "egress": [{"action": "Deny", "to": [{"namespaces": {"namespaceSelector": {}}}]}],
        },
        "deny",
    )
    v = verdict(cluster, [pol, deny_all], "plain", "bar-ns-1")
    assert v.allowed and v.egress is not None and v.egress.reason == "default"
    np_deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "iso", "namespace": "plain"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]},
    }
    v = verdict(cluster, [pol, deny_all, np_deny], "plain", "bar-ns-1")
    assert not v.allowed and (v.egress.tier, v.egress.reason) == ("default", "end-of-tier")
    assert not verdict(cluster, [pol, deny_all], "plain", "t1-a").allowed


@pytest.mark.parametrize("form", ["notSameLabels", "pass-sameLabels"])
def test_story_4_tenants(cluster, form):
    subject = {"namespaces": {"matchExpressions": [{"key": "tenant", "operator": "Exists"}]}}
    if form == "notSameLabels":
        ingress = [{"action": "Deny", "from": [{"namespaces": {"notSameLabels": ["tenant"]}}]}]
    else:
        ingress = [
            {"action": "Pass", "from": [{"namespaces": {"sameLabels": ["tenant"]}}]},
            {"action": "Deny", "from": [{"namespaces": {"namespaceSelector": {}}}]},
        ]
    pol = anp({"priority": 50, "subject": subject, "ingress": ingress}, "tenant-creation-example")
    assert verdict(cluster, [pol], "t1-a", "t1-b").allowed
    assert not verdict(cluster, [pol], "t2-a", "t1-b").allowed
    assert not verdict(cluster, [pol], "plain", "t1-b").allowed
    assert verdict(cluster, [pol], "t1-a", "plain").allowed  # plain is no subject


def test_story_5_baseline_guardrails(cluster):
    banp = anp(
        {
            "subject": {"namespaces": {}},
            "ingress": [{"action": "Deny", "from": [{"namespaces": {"namespaceSelector": {}}}]}],
            "egress": [{"action": "Deny", "to": [{"namespaces": {"namespaceSelector": {}}}]}],
        },
        name="default",
        kind="BaselineAdminNetworkPolicy",
    )
    v = verdict(cluster, [banp], "plain", "t1-a")
    assert not v.allowed and v.egress.tier == "kube-baseline"
    open_np = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "open", "namespace": ns},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]},
        }
        for ns in ("plain", "t1-a")
    ]
    assert verdict(cluster, [banp, *open_np], "plain", "t1-a").allowed  # NetworkPolicy overrides the baseline


def test_story_5_as_written_is_rejected():
    found = errs(
        anp(
            {
                "subject": {"namespaces": {}},
                "egress": [{"action": "Deny", "to": [{"namespaces": {"namespaceSeletor": {}}}]}],
            },
            name="baseline-rule-example",
            kind="BaselineAdminNetworkPolicy",
        )
    )
    paths = {p for p, _ in found}
    assert "metadata.name" in paths and "spec.egress[0].to[0].namespaces.namespaceSeletor" in paths


def test_missing_pod_selector_is_all_with_warning():
    out, problems = run(anp({"priority": 1, "subject": {"pods": {"namespaceSelector": {}}}}))
    assert out[0].subject.selector.is_all and not problems.errors
    assert [p.path for p in problems.warnings] == ["spec.subject.pods.podSelector"]
