"""pyclassify.kube.KubeSource against a real kube-apiserver: objects created, changed and deleted
through the API reach the engine as deltas (never a rebuild), invalid objects are rejected alone,
a 410 Gone relists, and an API server restart is survived. After each, the engine answers as a
fresh list of the cluster does.

Waits poll until a deadline (the watch is asynchronous); nothing asserts how long anything took.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from typing import Any

import pytest

from pyclassify.kube import KubeSource, load_client
from pyclassify.kube.client import ApiException, KubeClient
from pyclassify.kube.resources import RESOURCES, Resource
from pyclassify.reference import Flow, FlowEnd

MERGE = "application/merge-patch+json"


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30, every: float = 0.05) -> Any:
    """``check()`` every ``every`` seconds until it is true (its value returned)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: still not so after {timeout:.0f} s (last: {last!r})")


def verdict(engine: Any, src: str, dst: str, port: int, proto: int = 6) -> str:
    flow = Flow(FlowEnd(None, ipaddress.ip_address(src)), FlowEnd(None, ipaddress.ip_address(dst)), proto, 40000, port)
    return engine.evaluate(flow).verdict


def matrix(engine: Any, ips: list[str]) -> dict[tuple, Any]:
    out = {}
    for a in ips:
        for b in ips:
            for proto, port in ((6, 80), (6, 443), (17, 53)):
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


# --- objects through the API ---


def create_namespace(kc: KubeClient, name: str, labels: dict[str, str]) -> None:
    kc.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )


def label_namespace(kc: KubeClient, name: str, labels: dict[str, str]) -> None:
    kc.request("PATCH", f"/api/v1/namespaces/{name}", body={"metadata": {"labels": labels}}, content_type=MERGE)


def create_pod(kc: KubeClient, ns: str, name: str, labels: dict[str, str], ip: str, node: str = "node-1") -> None:
    """A pod with an address, as a kubelet would report it (no kubelet runs here)."""
    kc.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/app:1"}]},
        },
    )
    kc.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/status",
        content_type=MERGE,
        body={"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "192.0.2.1"}},
    )


def label_pod(kc: KubeClient, ns: str, name: str, labels: dict[str, str]) -> None:
    kc.request(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body={"metadata": {"labels": labels}}, content_type=MERGE
    )


def delete(kc: KubeClient, path: str) -> None:
    try:
        kc.request("DELETE", path, query=[("gracePeriodSeconds", 0)])
    except ApiException as exc:
        if exc.status != 404:
            raise


def network_policy(ns: str, name: str, from_team: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"team": from_team}}}],
                    "ports": [{"protocol": "TCP", "port": 80}],
                }
            ],
        },
    }


def global_network_policy(name: str, selector: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "types": ["Ingress"],
            "order": 10,
            "ingress": [{"action": "Deny", "protocol": "TCP", "destination": {"ports": [port]}}, {"action": "Allow"}],
        },
    }


GNP = "/apis/crd.projectcalico.org/v1/globalnetworkpolicies"
ANP = "/apis/policy.networking.k8s.io/v1alpha1/adminnetworkpolicies"


@pytest.fixture
def cluster_scoped(kc: KubeClient):
    """Paths of cluster-scoped objects a test creates: deleted after it."""
    paths: list[str] = []
    yield paths
    for path in paths:
        delete(kc, path)


def test_watch_applies_each_change_as_a_delta(kc: KubeClient, cluster_scoped: list[str]) -> None:
    create_namespace(kc, "w-a", {"team": "a"})
    create_namespace(kc, "w-b", {"team": "b"})
    create_pod(kc, "w-a", "web", {"app": "web"}, "10.61.0.1")
    create_pod(kc, "w-b", "client", {"app": "client"}, "10.61.0.2")
    source = KubeSource(kc)
    source.start()
    web, client = "10.61.0.1", "10.61.0.2"
    try:
        assert source.ready.is_set()
        assert verdict(source.engine(), client, web, 80) == "allow"
        assert verdict(source.engine(), client, web, 443) == "allow"

        # NetworkPolicy added: port 80 from team=b only.
        kc.request(
            "POST",
            "/apis/networking.k8s.io/v1/namespaces/w-a/networkpolicies",
            body=network_policy("w-a", "web-from-b", "b"),
        )
        wait_until(lambda: verdict(source.engine(), client, web, 443) == "deny", "NetworkPolicy added")
        assert verdict(source.engine(), client, web, 80) == "allow"

        # Namespace relabelled: its pods no longer match the namespaceSelector.
        label_namespace(kc, "w-b", {"team": "c"})
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "namespace relabelled")

        # NetworkPolicy changed to follow the new label.
        kc.request(
            "PUT",
            "/apis/networking.k8s.io/v1/namespaces/w-a/networkpolicies/web-from-b",
            body=network_policy("w-a", "web-from-b", "c"),
        )
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "allow", "NetworkPolicy changed")
        assert verdict(source.engine(), client, web, 443) == "deny"

        # Pod relabelled out of the policy's podSelector, then back.
        label_pod(kc, "w-a", "web", {"app": "other"})
        wait_until(lambda: verdict(source.engine(), client, web, 443) == "allow", "pod relabelled")
        label_pod(kc, "w-a", "web", {"app": "web"})
        wait_until(lambda: verdict(source.engine(), client, web, 443) == "deny", "pod relabelled back")

        # A new pod is an endpoint at once; deleted, its address is outside again.
        create_pod(kc, "w-b", "client2", {"app": "client"}, "10.61.0.3")
        wait_until(
            lambda: source.engine().inventory.owner_of(ipaddress.ip_address("10.61.0.3")) is not None, "pod added"
        )
        assert verdict(source.engine(), "10.61.0.3", web, 80) == "allow"
        delete(kc, "/api/v1/namespaces/w-b/pods/client2")
        wait_until(lambda: source.engine().inventory.owner_of(ipaddress.ip_address("10.61.0.3")) is None, "pod deleted")
        assert verdict(source.engine(), "10.61.0.3", web, 80) == "deny"

        # Calico GlobalNetworkPolicy (crd.projectcalico.org/v1), before the NetworkPolicy's tier.
        kc.request("POST", GNP, body=global_network_policy("deny-web-80", "app == 'web'", 80))
        cluster_scoped.append(f"{GNP}/deny-web-80")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "GlobalNetworkPolicy added")
        delete(kc, f"{GNP}/deny-web-80")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "allow", "GlobalNetworkPolicy deleted")

        # AdminNetworkPolicy (v1alpha1, the upstream CRD): denies before any NetworkPolicy.
        kc.request(
            "POST",
            ANP,
            body={
                "apiVersion": "policy.networking.k8s.io/v1alpha1",
                "kind": "AdminNetworkPolicy",
                "metadata": {"name": "w-deny-c"},
                "spec": {
                    "priority": 10,
                    "subject": {"namespaces": {"matchLabels": {"team": "a"}}},
                    "ingress": [
                        {"name": "deny-c", "action": "Deny", "from": [{"namespaces": {"matchLabels": {"team": "c"}}}]}
                    ],
                },
            },
        )
        cluster_scoped.append(f"{ANP}/w-deny-c")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "AdminNetworkPolicy added")
        delete(kc, f"{ANP}/w-deny-c")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "allow", "AdminNetworkPolicy deleted")

        # NetworkPolicy deleted.
        delete(kc, "/apis/networking.k8s.io/v1/namespaces/w-a/networkpolicies/web-from-b")
        wait_until(lambda: verdict(source.engine(), client, web, 443) == "allow", "NetworkPolicy deleted")

        for kind in ("Pod", "Namespace", "NetworkPolicy", "GlobalNetworkPolicy", "AdminNetworkPolicy"):
            assert source.events_by_kind[kind] > 0, kind
        assert source.full_builds == 1, "a watch event rebuilt the engine"
        assert not source.rejected
        with source._lock:  # a late event (a namespace finalized) may be mid-apply
            assert len(source.apply_seconds) == sum(source.events_by_kind.values())
        ips = [web, client]
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips)
    finally:
        source.stop()


def test_invalid_object_is_rejected_alone(kc: KubeClient, cluster_scoped: list[str]) -> None:
    create_namespace(kc, "i-a", {"team": "ia"})
    create_pod(kc, "i-a", "web", {"app": "web"}, "10.62.0.1")
    create_pod(kc, "i-a", "client", {"app": "client"}, "10.62.0.2")
    web, client = "10.62.0.1", "10.62.0.2"
    source = KubeSource(kc)
    source.start()
    try:
        kc.request("POST", GNP, body=global_network_policy("i-deny-80", "app == 'web'", 80))
        cluster_scoped.append(f"{GNP}/i-deny-80")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "GlobalNetworkPolicy added")

        # The API server takes any string; pyclassify's selector parser does not.
        bad = global_network_policy("i-deny-80", "has((", 443)
        bad["metadata"]["resourceVersion"] = kc.request("GET", f"{GNP}/i-deny-80")["metadata"]["resourceVersion"]
        kc.request("PUT", f"{GNP}/i-deny-80", body=bad)
        key = ("projectcalico.org", "GlobalNetworkPolicy", None, "i-deny-80")
        error = wait_until(lambda: source.rejected.get(key), "invalid update rejected")
        assert error.startswith("GlobalNetworkPolicy i-deny-80: spec.selector: "), error
        # The last good version stays in force; the rest keeps following.
        assert verdict(source.engine(), client, web, 80) == "deny"
        assert verdict(source.engine(), client, web, 443) == "allow"

        kc.request("POST", GNP, body=global_network_policy("i-new-bad", "app ==", 443))
        cluster_scoped.append(f"{GNP}/i-new-bad")
        new_key = ("projectcalico.org", "GlobalNetworkPolicy", None, "i-new-bad")
        wait_until(lambda: new_key in source.rejected, "invalid new object rejected")
        assert verdict(source.engine(), client, web, 443) == "allow"

        label_pod(kc, "i-a", "web", {"app": "other"})
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "allow", "pod change applies beside them")

        # Deleting the rejected object's name drops its last good version.
        delete(kc, f"{GNP}/i-deny-80")
        wait_until(lambda: key not in source.objects and key not in source.rejected, "deleted")
        assert source.metrics["rejected"] >= 2
        assert source.full_builds == 1
        ips = [web, client]
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips)
    finally:
        source.stop()


def test_kind_without_crd_is_skipped_once(kc: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    missing = Resource("crd.projectcalico.org", "v9", "tiers", "Tier", False)
    source = KubeSource(kc, resources=(RESOURCES[0], missing))
    with caplog.at_level("WARNING", logger="pyclassify.kube"):
        source.start()
    try:
        assert source.skipped == ["crd.projectcalico.org/v9 Tier"]
        said = [r for r in caplog.records if "CRD not installed" in r.getMessage()]
        assert len(said) == 1
        assert source.ready.is_set()
    finally:
        source.stop()


def test_gone_relists_and_apiserver_restart_is_survived(kube_cluster, kc: KubeClient) -> None:
    create_namespace(kc, "r-a", {"team": "ra"})
    create_pod(kc, "r-a", "web", {"app": "web"}, "10.63.0.1")
    create_pod(kc, "r-a", "client", {"app": "client"}, "10.63.0.2")
    create_pod(kc, "r-a", "gone", {"app": "client"}, "10.63.0.3")
    web, client, gone = "10.63.0.1", "10.63.0.2", "10.63.0.3"
    source = KubeSource(kc, backoff_cap=1.0)
    source.start()
    try:
        assert verdict(source.engine(), client, web, 80) == "allow"
        # Disconnected: objects created and deleted meanwhile; the API server restarts, so its
        # watch cache starts after them and the old resourceVersions are gone (410).
        source.suspend()
        kc.request(
            "POST",
            "/apis/networking.k8s.io/v1/namespaces/r-a/networkpolicies",
            body=network_policy("r-a", "web-from-nobody", "nobody"),
        )
        delete(kc, "/api/v1/namespaces/r-a/pods/gone")
        kube_cluster.restart_apiserver()
        source.resume()
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "deny", "relisted NetworkPolicy")
        wait_until(
            lambda: source.engine().inventory.owner_of(ipaddress.ip_address(gone)) is None,
            "pod deleted while disconnected",
        )
        assert source.metrics["relists"] >= 1
        assert source.full_builds == 1

        # Restarted under a live watch: it reconnects and follows.
        kube_cluster.restart_apiserver()
        delete(kc, "/apis/networking.k8s.io/v1/namespaces/r-a/networkpolicies/web-from-nobody")
        wait_until(lambda: verdict(source.engine(), client, web, 80) == "allow", "change after restart")
        assert source.metrics["reconnects"] + source.metrics["relists"] >= 2
        assert source.full_builds == 1
        ips = [web, client]
        assert matrix(source.engine(), ips) == fresh_matrix(kc, ips)
    finally:
        source.stop()


def test_in_cluster_configuration(kube_cluster, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pod: the service-account token and CA where the client library reads them (moved
    here from /var/run/secrets), the API server from KUBERNETES_SERVICE_HOST/PORT."""
    from kubernetes.config import incluster_config

    from tests.kube.apiserver import TOKEN

    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "ca.crt").write_bytes((kube_cluster.dir / "ca.crt").read_bytes())
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(kube_cluster.port))
    kc = load_client()  # nothing named: in a pod, the pod's service account
    assert kc.api.configuration.host == f"https://127.0.0.1:{kube_cluster.port}"
    names = {ns["metadata"]["name"] for ns in kc.list("/api/v1/namespaces")[0]}
    assert "kube-system" in names
    (tmp_path / "token").write_text("not-a-token")
    with pytest.raises(ApiException) as exc:
        load_client(in_cluster=True).list("/api/v1/namespaces")
    assert exc.value.status == 401
