"""The watch at its edges, against the real API server: etcd compacted under a disconnected
watch (the API server answers ``410 Gone`` and the source lists again), and bookmarks moving the
resourceVersion on while nothing changes.

The compaction test talks to a second kube-apiserver on the same etcd with its watch cache off
(``--watch-cache=false``), as a cluster's API servers may run: watches are then served by etcd
itself, so compacting etcd is what expires them (the shared API server's watch cache would serve
them from memory)."""

from __future__ import annotations

import base64
import ipaddress
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from pyclassify.kube import KubeSource, load_client
from pyclassify.kube.resources import RESOURCES
from tests.kube.apiserver import KubeCluster, free_port
from tests.kube.test_listwatch import (
    create_namespace,
    create_pod,
    delete,
    fresh_matrix,
    matrix,
    network_policy,
    verdict,
    wait_until,
)

#: Namespaces, pods and NetworkPolicies: enough kinds, fewer watches.
FEW = tuple(
    r for r in RESOURCES if r.kind in ("Namespace", "Pod", "NetworkPolicy") and not r.group.endswith("calico.org")
)


@pytest.fixture
def uncached(kube_cluster: KubeCluster, tmp_path: Path):
    """A second kube-apiserver on the same etcd without a watch cache; its kubeconfig."""
    port = free_port()
    d = kube_cluster.dir
    log = open(tmp_path / "uncached-apiserver.log", "ab")
    proc = subprocess.Popen(
        [
            str(kube_cluster.bindir / "kube-apiserver"),
            f"--etcd-servers={kube_cluster.etcd_url}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            f"--cert-dir={tmp_path / 'certs'}",
            f"--tls-cert-file={d / 'server.crt'}",
            f"--tls-private-key-file={d / 'server.key'}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--authorization-mode=RBAC",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
            "--watch-cache=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        path = tmp_path / "uncached.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        client = load_client(str(path), "test")
        wait_until(lambda: _ready(client), "the uncached kube-apiserver ready", timeout=120)
        yield client
    finally:
        KubeCluster._terminate(proc)


def _ready(client) -> bool:
    try:
        client.request("GET", "/api/v1/namespaces", [("limit", 1)], timeout=5)
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def etcd(kube_cluster: KubeCluster, call: str, body: dict) -> dict:
    """etcd's v3 JSON gateway."""
    req = urllib.request.Request(
        f"{kube_cluster.etcd_url}/v3/{call}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_compacted_etcd_expires_the_watch_and_the_source_lists_again(kube_cluster: KubeCluster, uncached) -> None:
    kc = uncached
    create_namespace(kc, "k-a", {"team": "ka"})
    web, client, gone = "10.59.0.1", "10.59.0.2", "10.59.0.3"  # unique among tests/kube
    create_pod(kc, "k-a", "web", {"app": "web"}, web)
    create_pod(kc, "k-a", "client", {"app": "client"}, client)
    create_pod(kc, "k-a", "gone", {"app": "client"}, gone)
    source = KubeSource(kc, resources=FEW, backoff_cap=1.0)
    source.start()
    try:
        assert verdict(source.engine(), client, web, 80) == "allow"
        listed_at = dict(source._versions)
        # Disconnected; meanwhile a policy is created, a pod deleted, and etcd compacted past
        # the watch's resourceVersion (the API server's own compaction runs every 5 minutes).
        source.suspend()
        kc.request(
            "POST",
            "/apis/networking.k8s.io/v1/namespaces/k-a/networkpolicies",
            body=network_policy("k-a", "web-from-nobody", "nobody"),
        )
        delete(kc, "/api/v1/namespaces/k-a/pods/gone")
        revision = int(etcd(kube_cluster, "kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        assert revision > max(int(v) for v in listed_at.values())
        etcd(kube_cluster, "kv/compaction", {"revision": revision, "physical": True})
        relists = source.metrics["relists"]
        source.resume()
        wait_until(lambda: source.metrics["relists"] > relists, "a relist after 410 Gone")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "the policy created meanwhile")
        wait_until(
            lambda: source.engine().inventory.owner_of(ipaddress.ip_address(gone)) is None, "the pod deleted meanwhile"
        )
        assert source.full_builds == 1
        ips = [web, client]
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips)
    finally:
        source.stop()
        delete(kc, "/apis/networking.k8s.io/v1/namespaces/k-a/networkpolicies/web-from-nobody")
        delete(kc, "/api/v1/namespaces/k-a")


def test_bookmarks_move_the_resource_version_on(kube_cluster: KubeCluster) -> None:
    """Watches ask for bookmarks; the API server sends one before a watch's timeout ends, and the
    source resumes from it (a later reconnect does not replay or expire)."""
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    source = KubeSource(kc, resources=FEW, watch_timeout=3)
    source.start()
    try:
        create_namespace(kc, "k-b", {"team": "kb"})  # the cluster moves on while we watch
        wait_until(lambda: source.metrics["bookmarks"] >= 1, "a bookmark", timeout=30)
        assert source.metrics["reconnects"] == 0 and source.metrics["relists"] == 0
        assert source.engine().inventory.namespace_labels("k-b").get("team") == "kb"
    finally:
        source.stop()
        delete(kc, "/api/v1/namespaces/k-b")


def test_a_crd_installed_after_the_start_is_followed_from_then_on(kube_cluster: KubeCluster) -> None:
    """A kind whose CRD is missing at the start is skipped, then followed once the CRD is
    installed: its objects are applied and later changes arrive by watch. (A test-only CRD,
    ``latesets.crd.projectcalico.org``, read as GlobalNetworkSets.)"""
    from pyclassify.kube.resources import Resource
    from tests.kube.apiserver import minimal_crd

    kc = load_client(str(kube_cluster.kubeconfig), "test")
    late = Resource("crd.projectcalico.org", "v1", "latesets", "GlobalNetworkSet", False)
    namespaces = next(r for r in RESOURCES if r.kind == "Namespace")
    source = KubeSource(kc, resources=(namespaces, late), crd_retry=0.3)
    source.start()
    crd = minimal_crd("crd.projectcalico.org", "v1", "LateSet", "latesets", "Cluster")
    try:
        assert source.skipped == ["crd.projectcalico.org/v1 GlobalNetworkSet"]
        kube_cluster.http("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        wait_until(lambda: _ready_list(kc, late.path), "the new CRD served")
        kc.request(
            "POST",
            late.path,
            body={
                "apiVersion": "crd.projectcalico.org/v1",
                "kind": "LateSet",
                "metadata": {"name": "early", "labels": {"role": "db"}},
                "spec": {"nets": ["198.51.100.0/28"]},
            },
        )
        names = lambda: {n.name for n in source.engine().inventory.network_sets}  # noqa: E731
        wait_until(lambda: "early" in names(), "an object that existed when the CRD appeared")
        assert source.skipped == [] and source.metrics["crds_appeared"] == 1
        kc.request(
            "POST",
            late.path,
            body={
                "apiVersion": "crd.projectcalico.org/v1",
                "kind": "LateSet",
                "metadata": {"name": "later"},
                "spec": {"nets": ["198.51.100.16/28"]},
            },
        )
        wait_until(lambda: "later" in names(), "an object created under the new watch")
        assert source.full_builds == 1
    finally:
        source.stop()
        try:
            kube_cluster.http(
                "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
            )
        except Exception:  # noqa: BLE001 - never installed
            pass


def _ready_list(kc, path: str) -> bool:
    try:
        kc.request("GET", path)
        return True
    except Exception:  # noqa: BLE001 - not served yet
        return False
