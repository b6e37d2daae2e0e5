"""``explain``, ``matrix``, ``render``, ``replay`` and ``check`` with ``--kubeconfig``: the live
cluster as input answers exactly as the same objects in files do; errors name the object
(``Kind namespace/name``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from pyclassify.kube import load_client
from tests.kube.test_listwatch import GNP, create_namespace, create_pod, delete, network_policy

PYCLASSIFY = [sys.executable, "-m", "pyclassify"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PYCLASSIFY, *args], capture_output=True, text=True, timeout=120)


def test_explain_and_matrix_from_the_cluster_equal_files(kube_cluster, tmp_path: Path) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    create_namespace(kc, "c-a", {"team": "ca"})
    create_namespace(kc, "c-b", {"team": "cb"})
    create_pod(kc, "c-a", "web", {"app": "web"}, "10.64.0.1")
    create_pod(kc, "c-b", "client", {"app": "client"}, "10.64.0.2")
    create_pod(kc, "c-b", "other", {"app": "other"}, "10.64.0.3")
    kc.request(
        "POST",
        "/apis/networking.k8s.io/v1/namespaces/c-a/networkpolicies",
        body=network_policy("c-a", "web-from-cb", "cb"),
    )
    # The same objects as files, as the API returns them.
    docs = []
    for path in ("/api/v1/namespaces", "/api/v1/pods", "/apis/networking.k8s.io/v1/networkpolicies"):
        listed = kc.request("GET", path)
        kind = listed["kind"].removesuffix("List")
        for item in listed["items"]:
            item.setdefault("apiVersion", listed["apiVersion"])
            item.setdefault("kind", kind)
            docs.append(item)
    files = tmp_path / "cluster.yaml"
    files.write_text(yaml.safe_dump_all(docs))

    kube = ["--kubeconfig", str(kube_cluster.kubeconfig), "--context", "test"]
    for args in (
        ["--from", "c-b/client", "--to", "c-a/web", "--port", "80"],
        ["--from", "c-b/client", "--to", "c-a/web", "--port", "443"],
        ["--from", "203.0.113.9", "--to", "c-a/web", "--port", "80"],
    ):
        live = run("explain", *kube, *args, "--json")
        offline = run("explain", str(files), *args, "--json")
        assert live.returncode == 0, live.stderr
        assert json.loads(live.stdout) == json.loads(offline.stdout)
    first = json.loads(
        run("explain", *kube, "--from", "c-b/client", "--to", "c-a/web", "--port", "443", "--json").stdout
    )
    assert first["verdict"] == "deny"

    live = run("matrix", *kube, "--port", "80", "--json")
    offline = run("matrix", str(files), "--port", "80", "--json")
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == json.loads(offline.stdout)

    live = run("render", *kube, "--endpoint", "c-a/web", "--json")
    offline = run("render", str(files), "--endpoint", "c-a/web", "--json")
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == json.loads(offline.stdout)
    assert json.loads(live.stdout)["tables"]

    # A capture among the pods: client -> web on 80 (allowed) and 443 (denied), other -> web on 80.
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    pcap = tmp_path / "pods.pcap"
    wrpcap(
        str(pcap),
        [
            Ether() / IP(src=s, dst="10.64.0.1") / TCP(sport=40000 + i, dport=p, flags="S")
            for i, (s, p) in enumerate([("10.64.0.2", 80), ("10.64.0.2", 443), ("10.64.0.3", 80)])
        ],
    )
    live = run("replay", *kube, "--pcap", str(pcap), "--json")
    offline = run("replay", str(files), "--pcap", str(pcap), "--json")
    assert live.returncode == 0, live.stderr
    timing = ("seconds", "packets_per_second")
    summary = {k: v for k, v in json.loads(live.stdout).items() if k not in timing}
    assert summary == {k: v for k, v in json.loads(offline.stdout).items() if k not in timing}
    assert (summary["allowed"], summary["denied"]) == (2, 1), summary  # 443 is not allowed from c-b

    # Files and the cluster together: a file's policy beside the live objects.
    extra = tmp_path / "allow-443.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "https", "namespace": "c-a"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": 443}]}]},
            }
        )
    )
    both = json.loads(
        run("explain", str(extra), *kube, "--from", "c-b/other", "--to", "c-a/web", "--port", "443", "--json").stdout
    )
    assert both["verdict"] == "allow"

    # diff: the live cluster as OLD, a change applied to it, as the same objects in files give.
    live = run("diff", *kube, "--apply", str(extra), "--json")
    offline = run("diff", str(files), "--apply", str(extra), "--json")
    assert live.returncode == offline.returncode == 5, live.stderr + offline.stderr
    # The changes, not the counts: the live side also holds what the API server makes itself
    # (the `kubernetes` Service: more port classes).
    keep = ("changed", "policies_changed", "changes")
    live_doc = {k: v for k, v in json.loads(live.stdout).items() if k in keep}
    assert live_doc == {k: v for k, v in json.loads(offline.stdout).items() if k in keep}
    opened = [c for c in live_doc["changes"] if c["now"]["verdict"] == "allow"]
    assert any(
        c["from"].get("endpoints") == ["c-b/other"]
        and c["to"]["endpoints"] == ["c-a/web"]
        and c["flows"][0]["ports"] == [[443, 443]]
        for c in opened
    ), live_doc["changes"]


def test_check_names_the_cluster_object(kube_cluster) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    kc.request(
        "POST",
        GNP,
        body={
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "c-broken"},
            "spec": {"selector": "app in {", "types": ["Ingress"], "ingress": [{"action": "Allow"}]},
        },
    )
    try:
        r = run("check", "--kubeconfig", str(kube_cluster.kubeconfig))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "GlobalNetworkPolicy c-broken: spec.selector: " in r.stderr, r.stderr
        checked = json.loads(run("check", "--kubeconfig", str(kube_cluster.kubeconfig), "--json").stdout)
        assert any(
            e["file"] == "GlobalNetworkPolicy c-broken" and e["path"] == "spec.selector" for e in checked["errors"]
        )
    finally:
        delete(kc, f"{GNP}/c-broken")
    r = run("explain", "--from", "10.0.0.1", "--to", "10.0.0.2")
    assert r.returncode == 2 and "--kubeconfig" in r.stderr
    r = run("check", "--kubeconfig", str(kube_cluster.dir / "missing-kubeconfig"))
    assert r.returncode == 2 and "cannot read the cluster" in r.stderr, r.stderr
