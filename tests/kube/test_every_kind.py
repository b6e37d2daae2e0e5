"""Every kind pyclassify follows, through a real API server: the bundled demo (namespaces, pods, a
node, a service account, a service, NetworkPolicies, AdminNetworkPolicies and a baseline, a Calico
tier, GlobalNetworkPolicies, a GlobalNetworkSet, a HostEndpoint) and the kinds it lacks (a Calico
NetworkPolicy and NetworkSet, an EndpointSlice, a ClusterNetworkPolicy, a Profile, a staged policy) are created one
object at a time under a running watch, then deleted. Each time the engine answers exactly as the
same objects loaded from files and as a fresh list of the cluster, and it was never rebuilt."""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import Any

import yaml

from pyclassify.documents import Document, Problems
from pyclassify.engine import NativeEngine
from pyclassify.kube import KubeSource, load_client
from pyclassify.kube.client import KubeClient, object_path
from pyclassify.kube.resources import RESOURCES
from pyclassify.project import build_project
from pyclassify.reference import Flow, FlowEnd
from tests.kube.test_listwatch import MERGE, delete, wait_until

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"

EXTRA: list[dict[str, Any]] = [
    {
        "apiVersion": "projectcalico.org/v3",
        "kind": "NetworkPolicy",
        "metadata": {"name": "db-metrics", "namespace": "backend"},
        "spec": {
            "selector": "app == 'db'",
            "order": 50,
            "types": ["Ingress"],
            "ingress": [
                {
                    "action": "Deny",
                    "protocol": "TCP",
                    "source": {"selector": "role == 'scraper'"},
                    "destination": {"ports": [9187]},
                }
            ],
        },
    },
    {
        "apiVersion": "projectcalico.org/v3",
        "kind": "NetworkSet",
        "metadata": {"name": "scrapers", "namespace": "backend", "labels": {"role": "scraper"}},
        "spec": {"nets": ["198.51.100.0/28"]},
    },
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "external-db", "namespace": "backend"},
        "spec": {"ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]},
    },
    {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "external-db-1",
            "namespace": "backend",
            "labels": {"kubernetes.io/service-name": "external-db"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.9.9"]}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    },
    {
        "apiVersion": "policy.networking.k8s.io/v1alpha2",
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "no-udp-to-db"},
        "spec": {
            "tier": "Admin",
            "priority": 3,
            "subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "db"}}}},
            "ingress": [
                {
                    "action": "Deny",
                    "from": [{"namespaces": {}}],
                    "protocols": [{"udp": {"destinationPort": {"number": 53}}}],
                }
            ],
        },
    },
    {
        "apiVersion": "projectcalico.org/v3",
        "kind": "Profile",
        "metadata": {"name": "audit"},
        "spec": {"labelsToApply": {"audited": "yes"}},
    },
    {
        "apiVersion": "projectcalico.org/v3",
        "kind": "StagedNetworkPolicy",
        "metadata": {"name": "db-metrics", "namespace": "backend"},
        "spec": {"stagedAction": "Delete"},
    },
]

PORTS = [(6, 80), (6, 8080), (6, 5432), (6, 9090), (6, 9187), (6, 22), (17, 53)]


def objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(DEMO.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc:
                continue
            for obj in doc.get("items") or [doc] if doc.get("kind") == "List" else [doc]:
                if obj.get("kind") != "ConfigMap":
                    out.append(obj)
    return out + copy.deepcopy(EXTRA)


def collection(obj: dict[str, Any]) -> str:
    api_version = obj["apiVersion"].replace("projectcalico.org/v3", "crd.projectcalico.org/v1")
    res = next(r for r in RESOURCES if r.api_version == api_version and r.kind == obj["kind"])
    return object_path(res.prefix, res.plural, obj["metadata"].get("namespace"))


def create(kc: KubeClient, obj: dict[str, Any]) -> None:
    body = copy.deepcopy(obj)
    body["apiVersion"] = body["apiVersion"].replace("projectcalico.org/v3", "crd.projectcalico.org/v1")
    status = body.pop("status", None)
    path = collection(obj)
    kc.request("POST", path, body=body)
    if status:  # as a kubelet would report it
        kc.request("PATCH", f"{path}/{obj['metadata']['name']}/status", body={"status": status}, content_type=MERGE)


def remove(kc: KubeClient, obj: dict[str, Any]) -> None:
    path = f"{collection(obj)}/{obj['metadata']['name']}"
    delete(kc, path)
    if obj["kind"] == "Namespace":  # no namespace controller here: finalize it ourselves
        kc.request(
            "PUT",
            f"{path}/finalize",
            body={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": obj["metadata"]["name"]},
                "spec": {"finalizers": []},
            },
        )


def matrix(engine: Any, ips: list[str]) -> dict[tuple, Any]:
    out = {}
    for a in ips:
        for b in ips:
            if a == b:
                continue
            for proto, port in PORTS:
                flow = Flow(
                    FlowEnd(None, ipaddress.ip_address(a)), FlowEnd(None, ipaddress.ip_address(b)), proto, 40000, port
                )
                out[(a, b, proto, port)] = engine.evaluate(flow).to_json()
    return out


def fresh_matrix(kc: KubeClient, ips: list[str]) -> dict[tuple, Any]:
    """What a fresh list of the cluster answers."""
    fresh = KubeSource(kc)
    fresh.start()
    try:
        return matrix(fresh.engine(), ips)
    finally:
        fresh.stop()


def from_files(objs: list[dict[str, Any]]) -> NativeEngine:
    project = build_project([Document(copy.deepcopy(o), "files", 1) for o in objs], Problems())
    assert not project.problems.errors, project.problems.errors
    return NativeEngine(project.policy_set, project.inventory)


PER_OBJECT_KINDS = {
    "Namespace",
    "Pod",
    "Node",
    "ServiceAccount",
    "Service",
    "EndpointSlice",
    "NetworkPolicy",
    "AdminNetworkPolicy",
    "BaselineAdminNetworkPolicy",
    "ClusterNetworkPolicy",
    "GlobalNetworkPolicy",
}


def test_every_kind_created_then_deleted_under_a_watch(kube_cluster) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = objects()
    kinds = {o["kind"] for o in objs}
    assert {
        "Namespace",
        "Pod",
        "Node",
        "ServiceAccount",
        "Service",
        "EndpointSlice",
        "NetworkPolicy",
        "AdminNetworkPolicy",
        "BaselineAdminNetworkPolicy",
        "ClusterNetworkPolicy",
        "Tier",
        "GlobalNetworkPolicy",
        "GlobalNetworkSet",
        "NetworkSet",
        "HostEndpoint",
        "Profile",
    } <= kinds
    ips = sorted(
        {o["status"]["podIP"] for o in objs if o["kind"] == "Pod"}
        | {"192.168.1.10", "203.0.113.7", "198.51.100.3", "10.0.9.9"}
    )
    source = KubeSource(kc)
    source.start()
    created: list[dict[str, Any]] = []
    try:
        empty = matrix(source.engine(), ips)
        for obj in objs:
            create(kc, obj)
            created.append(obj)
        expected = matrix(from_files(objs), ips)
        assert expected != empty
        wait_until(lambda: matrix(source.engine(), ips) == expected, "every object created is in force")
        # A staged policy changes no verdict, so the matrix can be complete before its event is seen.
        wait_until(lambda: set(source.events_by_kind) >= kinds, "an event seen for every kind")
        assert source.full_builds == 1, "a watch event rebuilt the engine"
        # Only the kinds that link objects otherwise went through a project reload (a Node
        # may, when its addresses change under endpoints that take them).
        linking = [o for o in objs if o["kind"] not in PER_OBJECT_KINDS]
        assert source.metrics["reloads"] <= len(linking) + sum(o["kind"] == "Node" for o in objs), (
            source.metrics["reloads"],
            [o["kind"] for o in linking],
        )
        assert not source.rejected, source.rejected
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips) == expected

        for obj in reversed(objs):
            remove(kc, obj)
            created.remove(obj)
        wait_until(lambda: matrix(source.engine(), ips) == empty, "every object deleted is gone")
        names = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
        wait_until(
            lambda: not [k for k in source.objects if (k[1], k[2], k[3]) in names],
            "every deletion seen (a namespace's comes once it is finalized)",
        )
        assert source.full_builds == 1
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips)
    finally:
        source.stop()
        for obj in reversed(created):
            remove(kc, obj)
