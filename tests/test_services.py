"""Traffic to a Service's ClusterIP, or to a NodePort on a node's address (issue 18, item 8), is
judged as kube-proxy delivers it: per backend, to its target port — in ``explain`` (both
engines) and in ``replay`` (captures taken before DNAT), with Calico ``services`` rules intact."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyclassify.analysis import explain
from pyclassify.capture import CaptureWriter
from pyclassify.project import load_project

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo"
ENGINES = ["native", "reference"]

# Two backends behind one Service: api (frontend may reach it on 8080) and db (the ANP
# protect-db denies frontend).
MIXED = """apiVersion: v1
kind: Service
metadata: {name: mixed, namespace: backend}
spec:
  type: NodePort
  clusterIP: 10.96.0.40
  ports: [{name: web, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: mixed-1, namespace: backend, labels: {kubernetes.io/service-name: mixed}}
addressType: IPv4
endpoints: [{addresses: [10.0.2.20]}, {addresses: [10.0.2.30]}]
ports: [{name: web, port: 8080, protocol: TCP}]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: no-api-from-monitoring, namespace: monitoring}
spec:
  selector: all()
  types: [Egress]
  egress:
  - action: Deny
    destination: {services: {name: api, namespace: backend}}
  - action: Allow
"""


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("svc")
    shutil.copytree(DEMO, root / "demo")
    (root / "demo" / "90-services.yaml").write_text(MIXED)
    return root / "demo"


@pytest.fixture(scope="module")
def project(manifests):
    p = load_project([str(manifests)])
    assert not p.problems.errors, [str(e) for e in p.problems.errors]
    return p


@pytest.mark.parametrize("engine", ENGINES)
def test_cluster_ip_is_judged_per_backend(project, engine):
    # The demo's Service backend/api: ClusterIP 10.96.0.20:80 -> api's named port http (8080).
    r = explain(project, "frontend/web", "10.96.0.20", 6, 80, engine=engine)
    assert r.verdict.allowed and r.service.service.name == "api"
    (b,) = r.backends
    assert str(b.flow.dst.ip) == "10.0.2.20" and b.flow.dport == 8080
    assert r.verdict.ingress.policy == "NetworkPolicy/backend/allow-frontend-to-api"
    # Before, the ClusterIP was an outside address with no policy: allowed. The backend denies.
    denied = explain(project, "monitoring/prometheus", "10.96.0.20", 6, 80, engine=engine)
    assert not denied.verdict.allowed
    # Calico `services` rules still match (here as the egress of monitoring).
    assert denied.verdict.egress.policy == "NetworkPolicy/monitoring/no-api-from-monitoring"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_backend_is_judged_and_one_can_be_picked(project, engine):
    r = explain(project, "frontend/web", "10.96.0.40", 6, 80, engine=engine)
    assert [(str(b.flow.dst.ip), b.flow.dport, b.verdict.verdict) for b in r.backends] == [
        ("10.0.2.20", 8080, "allow"),
        ("10.0.2.30", 8080, "deny"),
    ]
    assert not r.verdict.allowed and r.verdict.ingress.policy == "AdminNetworkPolicy/protect-db"
    picked = explain(project, "frontend/web", "10.96.0.40", 6, 80, engine=engine, service_backend="backend/api")
    assert picked.verdict.allowed and len(picked.backends) == 1
    # The NodePort on a node's address is the same Service.
    node = explain(project, "frontend/web", "192.168.1.10", 6, 30080, engine=engine)
    assert node.service.via == "NodePort" and [b.verdict.verdict for b in node.backends] == ["allow", "deny"]
    # A port the Service does not have: kube-proxy delivers nothing.
    none = explain(project, "frontend/web", "10.96.0.40", 6, 81, engine=engine)
    assert not none.verdict.allowed and none.backends == [] and "no TCP port 81" in none.note


def test_explain_cli_per_backend(manifests):
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "pyclassify", "explain", str(manifests), *a],
        capture_output=True,
        text=True,
        timeout=120,
    )
    r = run("--from", "frontend/web", "--to", "10.96.0.40", "--port", "80")
    assert r.returncode == 0, r.stderr
    assert "backend: backend/api (10.0.2.20) TCP/8080: ALLOW" in r.stdout
    assert "backend: backend/db (10.0.2.30) TCP/8080: DENY" in r.stdout
    assert r.stdout.rstrip().endswith("verdict: DENY (1 of 2 backends)")
    doc = json.loads(run("--from", "frontend/web", "--to", "10.96.0.40", "--port", "80", "--json").stdout)
    assert doc["verdict"] == "deny" and [b["verdict"] for b in doc["service"]["backends"]] == ["allow", "deny"]
    r = run("--from", "frontend/web", "--to", "10.96.0.40", "--port", "80", "--service-backend", "10.9.9.9")
    assert r.returncode == 2 and "not a backend" in r.stderr
    assert "--service-backend" in run("--help").stdout


def _capture(path: Path) -> None:
    from scapy.all import IP, TCP, Ether

    packets = [
        IP(src="10.0.1.10", dst="10.96.0.20") / TCP(sport=40000, dport=80, flags="S"),  # web -> api: allowed
        IP(src="10.96.0.20", dst="10.0.1.10") / TCP(sport=80, dport=40000, flags="SA"),  # its reply
        IP(src="10.0.3.40", dst="10.96.0.20") / TCP(sport=40001, dport=80, flags="S"),  # prometheus: denied
        IP(src="10.0.1.10", dst="10.96.0.40") / TCP(sport=40002, dport=80, flags="S"),  # two backends, one denies
    ]
    with CaptureWriter(str(path)) as w:
        for i, p in enumerate(packets):
            w.write_packet(bytes(Ether() / p), ts_ns=i * 1000)


def test_replay_judges_service_traffic_against_its_backends(manifests, tmp_path):
    capture, out = tmp_path / "svc.pcap", tmp_path / "out.jsonl"
    _capture(capture)
    r = subprocess.run(
        [sys.executable, "-m", "pyclassify", "replay", str(manifests), "--pcap", str(capture), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["verdict"], x["reason"]) for x in lines] == [
        ("allow", "policy"),
        ("allow", "established"),
        ("deny", "policy"),
        ("deny", "policy"),
    ]
    assert lines[0]["ingress"]["policy"] == "NetworkPolicy/backend/allow-frontend-to-api"
    assert lines[0]["service"]["judged"] == "the only backend"
    assert lines[3]["service"]["backends"] == ["10.0.2.20:8080", "10.0.2.30:8080"]
    assert lines[3]["service"]["judged"].startswith("every backend")
    assert lines[3]["ingress"]["policy"] == "AdminNetworkPolicy/protect-db"


def _dual_stack_inventory(services: int = 40):
    import ipaddress

    from pyclassify.inventory import Inventory, Node, Service, ServicePort

    ip = ipaddress.ip_address
    inv = Inventory(nodes={"n1": Node("n1", {}, (ip("192.168.1.10"), ip("fd00::10")))})
    for i in range(services):
        backends = (ip(f"10.1.{i}.1"), ip(f"10.1.{i}.2"), ip(f"fd01::{i}:1")) if i % 3 else ()
        inv.services[("ns", f"s{i}")] = Service(
            f"s{i}",
            "ns",
            None,
            cluster_ips=(ip(f"10.96.{i}.1"), ip(f"fd96::{i}")),
            ports=(ServicePort(80, 8080, 6, "web", 30000 + i), ServicePort(53, 5353, 17, "dns")),
            endpoint_ips=backends,
            from_slices=True,
        )
    return inv


def test_backends_stay_in_the_virtual_address_family():
    from pyclassify.services import ServiceMap

    m = ServiceMap(_dual_stack_inventory())
    for e in m.entries:
        v6 = e.address[:12] != b"\0" * 10 + b"\xff\xff"
        assert all((a[:12] != b"\0" * 10 + b"\xff\xff") == v6 for a, _, _ in e.backends), e
    v4 = [
        e
        for e in m.entries
        if e.service == "ns/s1"
        and e.via == "ClusterIP"
        and e.protocol == 6
        and e.address.endswith(bytes([10, 96, 1, 1]))
    ]
    assert [(text, port) for _, port, text in v4[0].backends] == [("10.1.1.1", 8080), ("10.1.1.2", 8080)]


def test_explain_to_an_ipv4_cluster_ip_judges_only_ipv4_backends(manifests, tmp_path):
    import shutil as sh

    root = tmp_path / "dual"
    sh.copytree(manifests, root)
    (root / "91-dual.yaml").write_text("""apiVersion: v1
kind: Service
metadata: {name: dual, namespace: backend}
spec:
  clusterIPs: [10.96.0.50, fd96::50]
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dual-4, namespace: backend, labels: {kubernetes.io/service-name: dual}}
addressType: IPv4
endpoints: [{addresses: [10.0.2.20]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dual-6, namespace: backend, labels: {kubernetes.io/service-name: dual}}
addressType: IPv6
endpoints: [{addresses: ["fd00::2:20"]}]
""")
    project = load_project([str(root)])
    assert not project.problems.errors, [str(e) for e in project.problems.errors]
    r = explain(project, "frontend/web", "10.96.0.50", 6, 80)
    assert [str(b.flow.dst.ip) for b in r.backends] == ["10.0.2.20"]


def test_service_packets_are_found_as_a_scan_of_every_entry_finds_them():
    """``ServiceMap.match`` (the native index) against a brute-force scan of the entries, on
    requests, replies and near misses (right address, wrong port or protocol)."""
    import random

    from pyclassify.batch import FLAG_HAS_PORTS, FLAG_MALFORMED, new_batch
    from pyclassify.services import ServiceMap

    m = ServiceMap(_dual_stack_inventory())
    rng = random.Random(5)
    n = 4000
    h = new_batch(n)
    other = bytes(10) + b"\xff\xff" + bytes([10, 0, 1, 10])
    for i in range(n):
        e = rng.choice(m.entries)
        port = e.port if rng.random() < 0.7 else rng.choice([e.port + 1, 443])
        proto = e.protocol if rng.random() < 0.9 else (17 if e.protocol == 6 else 6)
        kind = rng.random()
        h[i]["protocol"] = proto
        h[i]["flags"] = FLAG_HAS_PORTS | (FLAG_MALFORMED if rng.random() < 0.02 else 0)
        if kind < 0.45:  # a request to the virtual address
            h[i]["dst_addr"], h[i]["dport"], h[i]["src_addr"], h[i]["sport"] = list(e.address), port, list(other), 40000
        elif kind < 0.9:  # a reply from it
            h[i]["src_addr"], h[i]["sport"], h[i]["dst_addr"], h[i]["dport"] = list(e.address), port, list(other), 40000
        else:  # neither
            h[i]["src_addr"], h[i]["dst_addr"], h[i]["sport"], h[i]["dport"] = list(other), list(other), 1, port
    entry, forward = m.match(h)
    first = {}
    for k, e in enumerate(m.entries):
        first.setdefault((e.address, e.protocol, e.port), k)
    for i in range(n):
        r = h[i]
        want, fwd = -1, False
        if r["flags"] & FLAG_HAS_PORTS and not r["flags"] & FLAG_MALFORMED:
            hit = first.get((bytes(r["dst_addr"]), int(r["protocol"]), int(r["dport"])))
            if hit is not None:
                want, fwd = hit, True
            else:
                want = first.get((bytes(r["src_addr"]), int(r["protocol"]), int(r["sport"])), -1)
        assert (int(entry[i]), bool(forward[i])) == (want, fwd), i
    assert (entry >= 0).sum() > n // 2 and forward.sum() > n // 4
    # Rewritten to backend 1: requests to the backend's address and port, replies from it.
    rows = np.flatnonzero((entry >= 0) & ~m.no_backend[np.maximum(entry, 0)])
    out = m.rewrite(h[rows], entry[rows], forward[rows], 1)
    for j, i in enumerate(rows.tolist()):
        backends = m.entries[entry[i]].backends
        addr, port, _ = backends[1 % len(backends)]
        side = ("dst_addr", "dport") if forward[i] else ("src_addr", "sport")
        assert bytes(out[j][side[0]]) == addr and int(out[j][side[1]]) == port


def test_a_connection_is_judged_in_the_same_lanes_whatever_its_batch_holds(manifests, tmp_path):
    """A reply in a later batch than its SYN, beside a packet to a Service with more backends:
    its connection was tracked for its own Service's one backend only, and so it is judged
    (before, every packet of a batch was judged once per backend of the batch's largest
    Service, and the reply met a tracker that never saw the SYN: denied as invalid)."""
    from scapy.all import IP, TCP, Ether

    first, second, out = tmp_path / "a.pcap", tmp_path / "b.pcap", tmp_path / "out.jsonl"
    with CaptureWriter(str(first)) as w:  # web -> api's ClusterIP (one backend)
        w.write_packet(
            bytes(Ether() / IP(src="10.0.1.10", dst="10.96.0.20") / TCP(sport=40000, dport=80, flags="S")), ts_ns=1000
        )
    with CaptureWriter(str(second)) as w:
        w.write_packet(
            bytes(Ether() / IP(src="10.96.0.20", dst="10.0.1.10") / TCP(sport=80, dport=40000, flags="SA")), ts_ns=2000
        )
        w.write_packet(
            bytes(Ether() / IP(src="10.0.1.10", dst="10.96.0.40") / TCP(sport=40002, dport=80, flags="S")), ts_ns=3000
        )  # two backends
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify",
            "replay",
            str(manifests),
            "--pcap",
            str(first),
            "--pcap",
            str(second),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["verdict"], x["reason"]) for x in lines] == [
        ("allow", "policy"),
        ("allow", "established"),
        ("deny", "policy"),
    ]
