"""``pyclassify enforce --kubeconfig``: the daemon in a node network namespace follows a real API
server, and real TCP connections between pod namespaces follow the policies created, changed and
deleted through the API; each change reaches the running engine as a delta (one build, at the
start); an invalid object is rejected alone, named, and gets a Warning Event.

The API server listens on the root namespace's loopback; the node namespace reaches it through a
relay over a Unix socket (the filesystem is shared across network namespaces), on its own
loopback at the same port, so the kubeconfig and the serving certificate hold unchanged."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyclassify.kube import load_client
from tests.enforce.netns import PY, Daemon, Topology, root_reason
from tests.kube.test_listwatch import GNP, create_namespace, create_pod, delete, network_policy

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

RELAY = r"""
import socket, sys, threading
mode, listen, target = sys.argv[1], sys.argv[2], sys.argv[3]

def pipe(x, y):
    try:
        while True:
            data = x.recv(65536)
            if not data:
                break
            y.sendall(data)
    except OSError:
        pass
    finally:
        for s in (x, y):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def serve(c):
    if mode == "tcp-to-unix":
        o = socket.socket(socket.AF_UNIX)
        o.connect(target)
    else:
        o = socket.create_connection(("127.0.0.1", int(target)))
    threading.Thread(target=pipe, args=(c, o), daemon=True).start()
    pipe(o, c)

if mode == "tcp-to-unix":  # listen: PORT (on the loopback) or ADDRESS:PORT
    host, _, lport = listen.rpartition(":")
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host or "127.0.0.1", int(lport)))
else:
    l = socket.socket(socket.AF_UNIX)
    l.bind(listen)
l.listen(64)
print("ready", flush=True)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


@pytest.fixture
def topo() -> Iterator[Topology]:
    t = Topology()
    try:
        t.up()
        yield t
    finally:
        t.down()


def relay(kube_cluster, topo: Topology, tmp_path: Path) -> subprocess.Popen[str]:
    sock = str(tmp_path / "apiserver.sock")
    outside = subprocess.Popen(
        [PY, "-c", RELAY, "unix-to-tcp", sock, str(kube_cluster.port)], stdout=subprocess.PIPE, text=True
    )
    assert outside.stdout is not None and outside.stdout.readline().strip() == "ready"
    inside = topo.spawn(topo.node, [PY, "-c", RELAY, "tcp-to-unix", str(kube_cluster.port), sock])
    assert inside.stdout is not None and inside.stdout.readline().strip() == "ready"
    return outside


def until(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: still not so after {timeout:.0f} s")


def test_enforce_follows_the_cluster(kube_cluster, topo: Topology, tmp_path: Path) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    ns = f"e-{topo.node[-6:]}"
    create_namespace(kc, ns, {"team": ns})
    # p1 and p2 run on this node; p3 on another (the DaemonSet's NODE_NAME scopes enforcement).
    for i, (app, ip) in enumerate(zip(["a", "b", "c"], topo.ips)):
        create_pod(kc, ns, f"p{i + 1}", {"app": app}, ip, node="node-1" if i < 2 else "node-2")
    outside = relay(kube_cluster, topo, tmp_path)
    daemon = Daemon(
        topo,
        [],
        0,
        extra=("--kubeconfig", str(kube_cluster.kubeconfig), "--context", "test", "--metrics", "127.0.0.1:9465"),
        env={"NODE_NAME": "node-1"},
    )
    try:
        start = daemon.wait_event("start")
        assert start["endpoints"] >= 3 and start["node"] == "node-1"
        assert topo.get("http://127.0.0.1:9465/readyz") == (200, "ok\n")
        assert topo.reach(0, 1) and topo.reach(2, 1)

        # p3 closed to all ingress: the other node enforces that, not this one.
        closed = network_policy(ns, "c-closed", ns)
        closed["spec"]["podSelector"] = {"matchLabels": {"app": "c"}}
        closed["spec"]["ingress"] = []
        kc.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", body=closed)
        # Only app=c may reach app=b (created after c-closed: in force means c-closed is, too).
        policy = network_policy(ns, "b-from-c", ns)
        policy["spec"]["podSelector"] = {"matchLabels": {"app": "b"}}
        policy["spec"]["ingress"] = [{"from": [{"podSelector": {"matchLabels": {"app": "c"}}}]}]
        kc.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", body=policy)
        until(lambda: not topo.reach(0, 1), "a -> b denied once the NetworkPolicy is created")
        assert topo.reach(2, 1)
        assert topo.reach(1, 2) and topo.reach(0, 2), "p3's own policy is node-2's to enforce"
        reloads = [e for e in daemon.events() if e.get("event") == "reload"]
        assert reloads and all(e["engine_builds"] == 1 for e in reloads), reloads

        # An invalid object: rejected alone, named; the policy in force stays.
        kc.request(
            "POST",
            GNP,
            body={
                "apiVersion": "crd.projectcalico.org/v1",
                "kind": "GlobalNetworkPolicy",
                "metadata": {"name": f"{ns}-bad"},
                "spec": {"selector": "app ==", "ingress": [{"action": "Allow"}]},
            },
        )
        try:
            rejected = daemon.wait_event("reload-rejected")
            assert any(e.startswith(f"GlobalNetworkPolicy {ns}-bad: spec.selector: ") for e in rejected["errors"]), (
                rejected
            )
            assert not topo.reach(0, 1) and topo.reach(2, 1)
            # ... and reported on the object, from the node (pyclassify.kube.events)
            query = [("fieldSelector", f"involvedObject.name={ns}-bad,reason=PolicyRejected")]
            until(
                lambda: kc.request("GET", "/api/v1/namespaces/default/events", query=query)["items"],
                "a Warning Event on the rejected object",
            )
            (event,) = kc.request("GET", "/api/v1/namespaces/default/events", query=query)["items"]
            assert "spec.selector: " in event["message"] and event["source"]["host"] == "node-1", event
        finally:
            delete(kc, f"{GNP}/{ns}-bad")

        # The pod relabelled out of the policy: a -> b allowed again; the policy deleted, too.
        kc.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/p2",
            body={"metadata": {"labels": {"app": "b2"}}},
            content_type="application/merge-patch+json",
        )
        until(lambda: topo.reach(0, 1), "a -> b allowed once b is relabelled")
        kc.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/p2",
            body={"metadata": {"labels": {"app": "b"}}},
            content_type="application/merge-patch+json",
        )
        until(lambda: not topo.reach(0, 1), "a -> b denied once b has its label back")
        delete(kc, f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/b-from-c")
        until(lambda: topo.reach(0, 1), "a -> b allowed once the NetworkPolicy is deleted")
        reloads = [e for e in daemon.events() if e.get("event") == "reload"]
        assert all(e["engine_builds"] == 1 for e in reloads), reloads

        # The watch's counters, and each event's time to in force, on /metrics.
        status, text = topo.get("http://127.0.0.1:9465/metrics")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert status == 200
        assert samples[("pyclassify_watch_events_total", (("kind", "NetworkPolicy"),))] >= 3
        assert samples[("pyclassify_watch_events_total", (("kind", "Pod"),))] >= 2
        assert samples[("pyclassify_watch_lists_total", ())] == 1
        assert samples[("pyclassify_watch_rejected_total", ())] >= 1
        assert samples[("pyclassify_rejection_events_total", (("outcome", "created"),))] >= 1
        assert samples[("pyclassify_policy_apply_seconds_count", ())] >= 4
        assert daemon.terminate() == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()
        outside.kill()
        outside.wait()
        for i in range(3):  # the addresses are the topology's, which other tests reuse
            delete(kc, f"/api/v1/namespaces/{ns}/pods/p{i + 1}")


def test_enforce_follows_every_policy_kind_through_the_api(kube_cluster, topo: Topology, tmp_path: Path) -> None:
    """The netns test's manifests (a pair decided by each of NetworkPolicy, AdminNetworkPolicy,
    Calico GlobalNetworkPolicy, BaselineAdminNetworkPolicy and ClusterNetworkPolicy) created,
    updated and deleted through the API under a running ``enforce --kubeconfig``: real TCP and
    UDP connections follow ``pyclassify matrix`` of the same objects in files each time, and the
    engine is never rebuilt."""
    import yaml

    from bench.kube_cluster import create as create_object
    from bench.kube_cluster import resource_of
    from tests.enforce import manifests
    from tests.enforce.test_enforce_netns import matrix, observed, off_diagonal

    kc = load_client(str(kube_cluster.kubeconfig), "test")
    files = tmp_path / "files"
    files.mkdir()
    manifests.write(files)
    inventory = [d for d in yaml.safe_load_all(manifests.INVENTORY) if d]
    policies = [yaml.safe_load(getattr(manifests, name)) for name in ("NETPOL", "ANP", "GNP", "BANP", "CNP")]

    def path_of(obj: dict) -> str:
        res = resource_of(obj)
        md = obj["metadata"]
        from pyclassify.kube.client import object_path

        return object_path(res.prefix, res.plural, md.get("namespace") if res.namespaced else None, md["name"])

    def connections() -> dict[str, list]:
        seen = observed(topo)
        return {p: off_diagonal(seen[p]) for p in ("TCP", "UDP")}

    def expected() -> dict[str, list]:
        return {
            p: off_diagonal(matrix(files, p, port))
            for p, port in (("TCP", Topology.TCP_PORT), ("UDP", Topology.UDP_PORT))
        }

    everything = {p: off_diagonal([[True] * 3 for _ in range(3)]) for p in ("TCP", "UDP")}
    for obj in inventory:
        create_object(kc, obj)
    outside = relay(kube_cluster, topo, tmp_path)
    daemon = Daemon(topo, [], 0, extra=("--kubeconfig", str(kube_cluster.kubeconfig), "--context", "test"))
    try:
        daemon.wait_event("start")
        until(lambda: connections() == everything, "no policy yet: every pair connects")
        for obj in policies:  # created
            create_object(kc, obj)
        want = expected()
        assert want != everything
        until(lambda: connections() == want, "every policy kind in force", timeout=60)
        # updated: b's NetworkPolicy closes b to everyone
        current = kc.request("GET", path_of(policies[0]))
        current["spec"] = yaml.safe_load(manifests.NETPOL_DENY_ALL)["spec"]
        kc.request("PUT", path_of(policies[0]), body=current)
        manifests.replace(files / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
        want = expected()
        until(lambda: connections() == want, "the updated NetworkPolicy in force", timeout=60)
        for obj in reversed(policies):  # deleted
            delete(kc, path_of(obj))
        until(lambda: connections() == everything, "every policy deleted", timeout=60)
        reloads = [e for e in daemon.events() if e.get("event") == "reload"]
        assert reloads and all(e["engine_builds"] == 1 for e in reloads), reloads
        assert daemon.terminate() == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()
        outside.kill()
        outside.wait()
        for obj in [*policies, *(o for o in inventory if o["kind"] == "Pod")]:
            delete(kc, path_of(obj))  # the addresses are the topology's, which other tests reuse
