"""load_project on the bundled examples: the demo loads cleanly, the broken set reports each error."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from pyclassify import kinds
from pyclassify.documents import Problems
from pyclassify.ir import PROTO_TCP, EndpointKind
from pyclassify.project import load_project

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEMO = EXAMPLES / "demo"
BROKEN = EXAMPLES / "broken"


@pytest.fixture(scope="module")
def demo():
    return load_project([str(DEMO)])


def test_demo_loads_without_problems(demo):
    assert [str(p) for p in demo.problems] == []
    assert demo.skipped == {"v1/ConfigMap": 1}
    assert sorted(e.ref for e in demo.inventory.endpoints) == [
        "backend/api",
        "backend/db",
        "frontend/web",
        "monitoring/prometheus",
        "node1-eth0",
    ]
    assert sorted(demo.inventory.namespaces) == ["backend", "frontend", "monitoring"]
    assert [n.name for n in demo.inventory.network_sets] == ["blocked-addresses"]
    assert demo.inventory.services[("backend", "api")].endpoint_ips == (ipaddress.ip_address("10.0.2.20"),)
    refs = sorted(p.ref for p in demo.policy_set.policies)
    assert refs == [
        "AdminNetworkPolicy/allow-monitoring",
        "AdminNetworkPolicy/protect-db",
        "BaselineAdminNetworkPolicy/default",
        "Failsafe/inbound",  # built in: the failsafe ports of the host endpoint (Calico's)
        "Failsafe/outbound",
        "GlobalNetworkPolicy/allow-ssh-to-hosts",
        "GlobalNetworkPolicy/security.block-known-bad",
        "NetworkPolicy/backend/allow-api-to-db",
        "NetworkPolicy/backend/allow-frontend-to-api",
        "NetworkPolicy/backend/default-deny-ingress",
    ]
    # The Calico tier sits between nothing and kube-admin: order 100 comes first.
    assert [t.name for t in demo.policy_set.tiers] == ["failsafe", "security", "kube-admin", "default", "kube-baseline"]


def test_every_policy_remembers_its_source(demo):
    for policy in demo.policy_set.policies:
        if policy.kind == "Failsafe":  # built in, not read
            continue
        assert policy.source is not None and Path(policy.source.file).parent == DEMO
        assert policy.source.line >= 1


def test_find_endpoint(demo):
    assert demo.find_endpoint("backend/api").name == "api"
    assert demo.find_endpoint("10.0.2.30").ref == "backend/db"
    assert demo.find_endpoint("192.168.1.10").kind is EndpointKind.HOST
    assert demo.find_endpoint("node1-eth0").interface == "eth0"
    assert demo.find_endpoint("10.9.9.9") is None
    assert demo.find_endpoint("backend/nope") is None


@pytest.mark.parametrize(
    ("src", "dst", "port", "verdict", "deciding"),
    [
        ("frontend/web", "backend/api", 8080, "allow", "NetworkPolicy/backend/allow-frontend-to-api"),
        ("frontend/web", "backend/db", 5432, "deny", "AdminNetworkPolicy/protect-db"),
        ("backend/api", "backend/db", 5432, "allow", "NetworkPolicy/backend/allow-api-to-db"),
        ("monitoring/prometheus", "backend/api", 9090, "allow", "AdminNetworkPolicy/allow-monitoring"),
        ("frontend/web", "monitoring/prometheus", 9090, "deny", "BaselineAdminNetworkPolicy/default"),
        ("198.51.100.9", "frontend/web", 8080, "deny", "GlobalNetworkPolicy/security.block-known-bad"),
        # SSH to a host endpoint is a failsafe port: open whatever the policy says.
        ("frontend/web", "node1-eth0", 22, "allow", "Failsafe/inbound"),
    ],
)
def test_demo_flows(demo, src, dst, port, verdict, deciding):
    """The stories the docs tell about the demo hold (ingress side decides each of them)."""
    from pyclassify.reference import Flow, FlowEnd, evaluate

    def end(ref: str) -> FlowEnd:
        ep = demo.find_endpoint(ref)
        return FlowEnd(ep, ep.ips[0]) if ep is not None else FlowEnd(None, ipaddress.ip_address(ref))

    result = evaluate(demo.policy_set, demo.inventory, Flow(end(src), end(dst), PROTO_TCP, 40000, port))
    assert result.verdict == verdict
    assert result.ingress is not None and result.ingress.policy == deciding


# (file, line, field path) of every error in examples/broken.
BROKEN_ERRORS = {
    ("policies.yaml", 17, "spec.egress[0].to[0].ipBlock.cidr"),  # /33
    ("policies.yaml", 21, "spec.egress[0].to[1].ipBlock.except[0]"),  # except outside cidr
    ("policies.yaml", 25, "spec.egress[0].ports[0].endPort"),  # endPort < port
    ("policies.yaml", 26, "spec.egress[0].ports[1].protocol"),  # ICMP is not a NetworkPolicy protocol
    ("policies.yaml", 38, "spec.podSelector.matchExpressions[0].operator"),  # no such operator
    ("policies.yaml", 49, "spec.selector"),  # Calico selector cut short
    ("pods.yaml", 8, "metadata.labels.version"),  # 1.0 is a number, not a string
    ("pods.yaml", 16, "spec.containers[0].ports[1].name"),  # duplicate port name
    ("pods.yaml", 17, "spec.containers[0].ports[1].containerPort"),  # 70000
    ("pods.yaml", 18, "spec.containers[0].ports[1].protocol"),  # HTTP
    ("pods.yaml", 20, "status.podIP"),  # 10.0.2.300
}


def test_broken_examples_report_every_error_with_file_line_and_path():
    project = load_project([str(BROKEN)])
    found = {(Path(p.file).name, p.line, p.path) for p in project.problems.errors}
    assert found == BROKEN_ERRORS
    for p in project.problems.errors:
        assert str(p).startswith(f"{p.file}:{p.line}: {p.path}: ")
    # Broken policies are not in force; the pod is, with what was valid in it.
    assert project.policy_set.policies == ()
    (pod,) = project.inventory.endpoints
    assert pod.ips == () and [p.name for p in pod.ports] == ["http"]


def test_missing_normalizer_module_is_a_problem_not_a_crash(monkeypatch, tmp_path):
    key = ("projectcalico.org", "GlobalNetworkPolicy")
    monkeypatch.setitem(kinds.POLICY_KINDS, key, "pyclassify.kinds.no_such_module:normalize")
    f = tmp_path / "gnp.yaml"
    f.write_text("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: x\n")
    project = load_project([str(f)])
    (p,) = project.problems.errors
    assert (p.file, p.line) == (str(f), 1)
    assert "pyclassify.kinds.no_such_module" in p.message
    assert project.policy_set.policies == ()


def test_unknown_kinds_are_counted_and_api_groups_matter(tmp_path):
    f = tmp_path / "misc.yaml"
    f.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: r}\n---\n"
        # Same kind name, foreign group: not a NetworkPolicy of ours.
        "apiVersion: example.com/v1\nkind: NetworkPolicy\nmetadata: {name: n}\n"
    )
    project = load_project([str(f)])
    assert not project.problems.items
    assert project.skipped == {
        "example.com/v1/NetworkPolicy": 1,
        "rbac.authorization.k8s.io/v1/RoleBinding": 1,
        "v1/ConfigMap": 2,
    }
    assert project.document_count == 4


def test_problems_collector_is_shared(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("a: [\n")
    problems = Problems()
    project = load_project([str(f)], problems)
    assert project.problems is problems and len(problems.errors) == 1


def test_crd_group_of_calico_is_the_same_kind():
    problems = Problems()
    from pyclassify.loader import load_text

    (doc,) = load_text(
        "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkSet\nmetadata: {name: g}\n", "x", problems
    )
    assert kinds.kind_key(doc) == ("projectcalico.org", "GlobalNetworkSet") and kinds.is_inventory_kind(doc)


def test_namespace_is_inventory_and_its_isolation_annotation_a_policy(tmp_path):
    f = tmp_path / "ns.yaml"
    f.write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n"
        '    net.beta.kubernetes.io/network-policy: \'{"ingress": {"isolation": "DefaultDeny"}}\'\n'
    )
    project = load_project([str(f)])
    assert not project.problems.items and project.skipped == {}
    assert "shop" in project.inventory.namespaces
    (policy,) = project.policy_set.policies
    assert (policy.kind, policy.subject.namespace) == ("Namespace", "shop")


def test_undeployed_workloads_and_their_pods(tmp_path):
    """A folder as np-guard reads it: controllers are endpoints without IPs; owned pods say whose."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "deploy.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n"
        "spec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
        "    spec: {containers: [{name: c, ports: [{name: http, containerPort: 80}]}]}\n"
    )
    (tmp_path / "pods.json").write_text(
        '{"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "agent-x", "namespace": "kube-system",'
        ' "labels": {"app": "agent"}, "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "controller": true}]},'
        ' "status": {"podIP": "10.0.0.9"}}]}'
    )
    project = load_project([str(tmp_path)])
    assert not project.problems.items
    web = project.find_endpoint("shop/Deployment/web")
    assert web is project.find_endpoint("shop/web") and web.ips == () and web.named_port("http", PROTO_TCP) == [80]
    agent = project.find_endpoint("kube-system/DaemonSet/agent")
    assert agent is project.find_endpoint("10.0.0.9") is project.find_endpoint("kube-system/agent-x")
    assert project.find_endpoint("kube-system/agent") is agent  # the owner's name finds its pods


def test_duplicate_objects_of_any_kind_are_errors_naming_both_places(tmp_path):
    np = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: a}
spec: {podSelector: {}}
"""
    (tmp_path / "one.yaml").write_text(np)
    (tmp_path / "two.yaml").write_text("# the same policy again\n" + np)
    problems = Problems()
    project = load_project([str(tmp_path)], problems)
    (p,) = problems.errors
    assert (p.file, p.line, p.path) == (str(tmp_path / "two.yaml"), 4, "metadata.name")
    assert f"already defined at {tmp_path / 'one.yaml'}:3" in p.message
    assert len(project.policy_set.policies) == 1
    assert ("networking.k8s.io", "NetworkPolicy", "a", "deny") in project.invalid


def test_invalid_objects_are_named_with_their_first_error(tmp_path):
    (tmp_path / "m.yaml").write_text("""\
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: a}
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: a}
status: {podIP: 10.0.0.300}
""")
    project = load_project([str(tmp_path)])
    assert list(project.invalid) == [("", "Pod", "a", "bad")]
    assert "invalid IP address" in project.invalid[("", "Pod", "a", "bad")]
