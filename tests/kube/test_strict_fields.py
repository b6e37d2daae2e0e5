"""Strict field validation, held to a real kube-apiserver (v1.34.4, with the network-policy-api
and Calico CRDs of scripts/kube-testenv.sh): each object of the table is sent with
``dryRun=All&fieldValidation=Strict`` (what ``kubectl apply`` does by default), and pyclassify
must take exactly what the API server takes, naming the field it names. Then the watch source: an
object the API server keeps because its test CRD preserves unknown fields (the minimal Profile
CRD) is rejected by pyclassify, and its last good version stays."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from pyclassify.documents import Document, Problems
from pyclassify.kube import KubeSource, load_client
from pyclassify.kube.client import ApiException, KubeClient
from pyclassify.project import build_project
from tests.kube.test_listwatch import delete, wait_until

NS = "strict"

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {
        "containers": [
            {"name": "web", "image": "registry.invalid/web:1", "ports": [{"name": "http", "containerPort": 8080}]}
        ]
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1"},
}
NETPOL = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "db"},
    "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"ports": [{"port": 5432}, {"port": "http"}]}]},
}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "api"},
    "spec": {
        "selector": {"app": "api"},
        "ports": [
            {"name": "8001-8000", "port": 8001, "targetPort": 8000},
            {"name": "https-metrics-endpoint", "port": 8443, "targetPort": "metrics"},
        ],
    },
}
SLICE = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["10.0.0.2"]}],
    "ports": [{"name": "8001-8000", "port": 8000, "protocol": "TCP"}],
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]},
    },
}
GNP = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "GlobalNetworkPolicy",
    "metadata": {"name": "deny"},
    "spec": {
        "selector": "app == 'web'",
        "order": 10,
        "types": ["Ingress"],
        "ingress": [
            {
                "action": "Deny",
                "protocol": "TCP",
                "source": {"nets": ["10.0.0.0/8"]},
                "destination": {"ports": [80, "8080:8090"]},
            }
        ],
    },
}
CALICO_NP = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "allow"},
    "spec": {"selector": "all()", "ingress": [{"action": "Allow", "protocol": "UDP", "destination": {"ports": [53]}}]},
}
TIER = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "Tier",
    "metadata": {"name": "security"},
    "spec": {"order": 100},
}
HOST_ENDPOINT = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "HostEndpoint",
    "metadata": {"name": "node1-eth0"},
    "spec": {"node": "node1", "interfaceName": "eth0", "expectedIPs": ["192.0.2.1"]},
}
NETWORK_SET = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "GlobalNetworkSet",
    "metadata": {"name": "bad-hosts"},
    "spec": {"nets": ["198.51.100.0/24"]},
}
ANP = {
    "apiVersion": "policy.networking.k8s.io/v1alpha1",
    "kind": "AdminNetworkPolicy",
    "metadata": {"name": "a"},
    "spec": {
        "priority": 10,
        "subject": {"namespaces": {}},
        "ingress": [
            {
                "name": "deny",
                "action": "Deny",
                "from": [{"namespaces": {}}],
                "ports": [{"portNumber": {"protocol": "TCP", "port": 22}}],
            }
        ],
    },
}
BANP = {
    "apiVersion": "policy.networking.k8s.io/v1alpha1",
    "kind": "BaselineAdminNetworkPolicy",
    "metadata": {"name": "default"},
    "spec": {"subject": {"namespaces": {}}, "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]},
}


def changed(obj: dict[str, Any], path: str, value: Any = None, rename: str | None = None) -> dict[str, Any]:
    """``obj`` with the field at ``path`` (``a.b[0].c``) set to ``value``, or renamed."""
    out = copy.deepcopy(obj)
    parts = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]
    node = out
    for part in parts[:-1]:
        node = node[part]
    if rename is not None:
        node[rename] = node.pop(parts[-1])
    else:
        node[parts[-1]] = value
    return out


CASES = [
    ("pod", POD, None),
    ("pod-metadata-lables", changed(POD, "metadata.labels", rename="lables"), "metadata.lables"),
    (
        "pod-port-nmae",
        changed(POD, "spec.containers[0].ports[0].name", rename="nmae"),
        "spec.containers[0].ports[0].nmae",
    ),
    ("pod-status-podIPz", changed(POD, "status.podIP", rename="podIPz"), "status.podIPz"),
    (
        "pod-containerPort-string",
        changed(POD, "spec.containers[0].ports[0].containerPort", "8080"),
        "spec.containers[0].ports[0].containerPort",
    ),
    ("pod-label-number", changed(POD, "metadata.labels.app", 1), "metadata.labels.app"),
    ("pod-Spec", changed(POD, "spec", rename="Spec"), "Spec"),
    ("networkpolicy", NETPOL, None),
    ("networkpolicy-spce", changed(NETPOL, "spec", rename="spce"), "spce"),
    (
        "networkpolicy-port-quoted-number",
        changed(NETPOL, "spec.ingress[0].ports[0].port", "5432"),
        "spec.ingress[0].ports[0].port",
    ),
    ("networkpolicy-status", {**NETPOL, "status": {}}, "status"),
    ("service-port-names", SERVICE, None),
    (
        "service-targetPort-quoted-number",
        changed(SERVICE, "spec.ports[0].targetPort", "8000"),
        "spec.ports[0].targetPort",
    ),
    ("endpointslice-port-name", SLICE, None),
    ("deployment", DEPLOYMENT, None),
    ("deployment-template-typo", changed(DEPLOYMENT, "spec.template.spec", rename="sepc"), "spec.template.sepc"),
    ("globalnetworkpolicy", GNP, None),
    ("globalnetworkpolicy-lables", changed(GNP, "metadata.lables", {"a": "b"}), "metadata.lables"),
    (
        "globalnetworkpolicy-rule-typo",
        changed(GNP, "spec.ingress[0].source", rename="sourec"),
        "spec.ingress[0].sourec",
    ),
    ("globalnetworkpolicy-order-string", changed(GNP, "spec.order", "10"), "spec.order"),
    ("calico-networkpolicy", CALICO_NP, None),
    ("calico-networkpolicy-applyOnForward", changed(CALICO_NP, "spec.applyOnForward", True), "spec.applyOnForward"),
    ("tier", TIER, None),
    ("tier-ordr", changed(TIER, "spec.order", rename="ordr"), "spec.ordr"),
    ("hostendpoint", HOST_ENDPOINT, None),
    ("hostendpoint-expectedIP", changed(HOST_ENDPOINT, "spec.expectedIPs", rename="expectedIP"), "spec.expectedIP"),
    ("globalnetworkset", NETWORK_SET, None),
    ("globalnetworkset-net", changed(NETWORK_SET, "spec.nets", rename="net"), "spec.net"),
    ("adminnetworkpolicy", ANP, None),
    ("adminnetworkpolicy-subjct", changed(ANP, "spec.subject", rename="subjct"), "spec.subjct"),
    (
        "adminnetworkpolicy-port-string",
        changed(ANP, "spec.ingress[0].ports[0].portNumber.port", "22"),
        "spec.ingress[0].ports[0].portNumber.port",
    ),
    ("baselineadminnetworkpolicy", BANP, None),
    ("baselineadminnetworkpolicy-ingres", changed(BANP, "spec.ingress", rename="ingres"), "spec.ingres"),
]

_PLURALS = {
    "Pod": "pods",
    "NetworkPolicy": "networkpolicies",
    "Service": "services",
    "EndpointSlice": "endpointslices",
    "Deployment": "deployments",
    "GlobalNetworkPolicy": "globalnetworkpolicies",
    "Tier": "tiers",
    "HostEndpoint": "hostendpoints",
    "GlobalNetworkSet": "globalnetworksets",
    "AdminNetworkPolicy": "adminnetworkpolicies",
    "BaselineAdminNetworkPolicy": "baselineadminnetworkpolicies",
}
_CLUSTER_SCOPED = {
    "GlobalNetworkPolicy",
    "Tier",
    "HostEndpoint",
    "GlobalNetworkSet",
    "AdminNetworkPolicy",
    "BaselineAdminNetworkPolicy",
}


@pytest.fixture(scope="module")
def kc(kube_cluster) -> KubeClient:
    client = load_client(str(kube_cluster.kubeconfig), "test")
    try:
        client.request(
            "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    return client


def api_server_verdict(kc: KubeClient, obj: dict[str, Any]) -> str | None:
    """None if the API server takes ``obj``, else its message."""
    group, _, version = obj["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    scope = "" if obj["kind"] in _CLUSTER_SCOPED else f"/namespaces/{NS}"
    try:
        kc.request(
            "POST",
            f"{base}{scope}/{_PLURALS[obj['kind']]}",
            body=obj,
            query=[("dryRun", "All"), ("fieldValidation", "Strict")],
        )
    except ApiException as exc:
        assert exc.status in (400, 422), exc
        return json.loads(exc.body)["message"]
    return None


@pytest.mark.parametrize("case_id,obj,field", CASES, ids=[c[0] for c in CASES])
def test_pyclassify_takes_what_the_api_server_takes(
    kc: KubeClient, case_id: str, obj: dict[str, Any], field: str | None
) -> None:
    if obj["kind"] not in _CLUSTER_SCOPED:
        obj = changed(obj, "metadata.namespace", NS)
    refused = api_server_verdict(kc, obj)
    problems = Problems()
    build_project([Document(copy.deepcopy(obj), f"{case_id}.yaml", 1)], problems)
    ours = [p for p in problems.errors]
    if field is None:
        assert refused is None, refused
        assert not ours, [str(p) for p in ours]
    else:
        assert refused is not None, "the API server took it: the table is wrong"
        # It names the field (a decoding error names it without indices, a map by the map's path).
        named = re.sub(r"\[\d+\]", "", field)
        assert field in refused or named in refused or named.rpartition(".")[0] + " of type" in refused, refused
        assert ours and ours[0].path == field, [str(p) for p in ours]  # and then what else it finds


PROFILES = "/apis/crd.projectcalico.org/v1/profiles"


def test_watch_rejects_what_the_kind_schema_refuses(kube_cluster, kc: KubeClient) -> None:
    """The tests' Profile CRD keeps any spec (a minimal CRD): the API server stores a misspelt
    field; the watch source refuses the object as Calico's API would, and the last good version
    stays in force."""
    good = {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "Profile",
        "metadata": {"name": "strict-p"},
        "spec": {"ingress": [{"action": "Allow"}], "labelsToApply": {"team": "a"}},
    }
    kc.request("POST", PROFILES, body=good)
    source = KubeSource(kc)
    source.start()
    key = ("projectcalico.org", "Profile", None, "strict-p")
    try:
        wait_until(lambda: key in source.objects, "profile listed")
        bad = changed(good, "spec.ingress", rename="ingres")
        bad["metadata"]["resourceVersion"] = kc.request("GET", f"{PROFILES}/strict-p")["metadata"]["resourceVersion"]
        kc.request("PUT", f"{PROFILES}/strict-p", body=bad)
        error = wait_until(lambda: source.rejected.get(key), "misspelt update rejected")
        assert error == "Profile strict-p: spec.ingres: unknown field 'ingres' (did you mean 'ingress'?)", error
        kept = json.loads(source.objects[key])
        assert "ingress" in kept["spec"], "the last good version stays"
    finally:
        source.stop()
        delete(kc, f"{PROFILES}/strict-p")
