"""Flow records written by real exporters: softflowd (NetFlow v5, v9, IPFIX) fed a capture made
here, and the kernel's own conntrack table (``conntrack -L``) after real connections between
network namespaces. Each connection gets the verdict its packets get in ``replay --pcap``
(softflowd), or the reference evaluator gives its original tuple (conntrack)."""

from __future__ import annotations

import io
import ipaddress
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.captures import PCAP_HEADER, ipv4_frame, pcap_record, tcp_segment, udp_datagram
from pyclassify import reference
from pyclassify.engine import NativeEngine
from pyclassify.flow import Flow, FlowEnd
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay
from pyclassify.replay import Replay

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"

# (client, server, sport, dport, protocol) of the demo's pods and outsiders; each TCP
# connection completes its handshake and carries a request, each UDP flow is answered
CONNECTIONS = [
    ("10.0.1.10", "10.0.2.20", 41000, 8080, 6),
    ("10.0.2.20", "10.0.2.30", 42000, 5432, 6),
    ("10.0.1.10", "10.0.2.30", 43000, 5432, 6),
    ("10.0.3.40", "10.0.2.20", 44000, 9090, 6),
    ("10.0.3.40", "10.0.1.10", 45000, 8080, 6),
    ("198.51.100.9", "10.0.1.10", 46000, 8080, 6),
    ("10.0.1.10", "10.96.0.10", 47000, 53, 17),
    ("10.0.2.20", "10.0.2.30", 48000, 9999, 17),
]


def write_capture(path: Path) -> Path:
    t = 0
    records = [PCAP_HEADER]
    for client, server, sport, dport, proto in CONNECTIONS:
        c, s = socket.inet_aton(client), socket.inet_aton(server)
        if proto == 6:
            packets = [
                (c, s, tcp_segment(sport, dport, 1, 0, 0x02)),
                (s, c, tcp_segment(dport, sport, 9, 2, 0x12)),
                (c, s, tcp_segment(sport, dport, 2, 10, 0x10)),
                (c, s, tcp_segment(sport, dport, 2, 10, 0x18, b"GET /")),
                (s, c, tcp_segment(dport, sport, 10, 7, 0x18, b"200 OK")),
            ]
            frames = [ipv4_frame(a, b, 6, body) for a, b, body in packets]
        else:
            frames = [
                ipv4_frame(c, s, 17, udp_datagram(sport, dport, b"q")),
                ipv4_frame(s, c, 17, udp_datagram(dport, sport, b"a")),
            ]
        for f in frames:
            records.append(pcap_record(t, f))
            t += 1000
    path.write_bytes(b"".join(records))
    return path


# A collector: a UDP socket the exporter sends to, its datagrams written back to back (as a
# collector stores them).
COLLECT = r"""
import os, socket, subprocess, sys
capture, version, out = sys.argv[1:4]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
sock.settimeout(2)
# softflowd 1.1.0 waits forever at the capture's end when its control socket's path is longer
# than 12 bytes or so: short paths of this process's
ctl, pid = "/tmp/sc%05d" % (os.getpid() % 100000), "/tmp/sp%05d" % (os.getpid() % 100000)
try:
    p = subprocess.run(["softflowd", "-r", capture, "-n", "127.0.0.1:%d" % sock.getsockname()[1], "-v", version, "-d",
                        "-p", pid, "-c", ctl], capture_output=True, text=True, timeout=60)
finally:
    for path in (ctl, pid):
        if os.path.exists(path):
            os.unlink(path)
if p.returncode != 0:
    sys.exit(p.stderr)
with open(out, "wb") as f:
    try:
        while True:
            f.write(sock.recvfrom(65535)[0])
    except socket.timeout:
        pass
"""


def softflowd_export(capture: Path, version: str, out: Path) -> Path:
    """softflowd reads ``capture`` and exports NetFlow ``version`` to a collector writing ``out``."""
    proc = subprocess.run(
        [sys.executable, "-c", COLLECT, str(capture), version, str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0, "softflowd exported nothing"
    return out


def connection_key(src: str, dst: str, proto: str, sport: int | None, dport: int | None) -> tuple:
    a, b = (src, sport), (dst, dport)
    return (proto, *sorted([a, b], key=str))


@pytest.mark.skipif(shutil.which("softflowd") is None, reason="softflowd is not installed (Debian package softflowd)")
@pytest.mark.parametrize("version", ["5", "9", "10"])
def test_softflowd_records_give_the_capture_s_connection_verdicts(tmp_path, version):
    project = load_project([DEMO])
    engine = NativeEngine(project.policy_set, project.inventory)
    capture = write_capture(tmp_path / "made.pcap")
    exported = softflowd_export(capture, version, tmp_path / f"export-v{version}.bin")
    flows = io.StringIO()
    Replay(engine, out=flows, flows=True).run([str(capture)])
    import json

    by_packets = {}
    for line in flows.getvalue().splitlines():
        f = json.loads(line)
        by_packets[connection_key(f["src"], f["dst"], f["proto"], f["sport"], f["dport"])] = f["verdict"]
    lines = io.BytesIO()
    replay = RecordReplay(engine, out=lines)
    replay.run([str(exported)])
    doc = replay.summary_json()
    assert doc["files"][0]["format"] == "netflow" and doc["problems"] == 0, doc["files"]
    by_records: dict[tuple, set[str]] = {}
    for line in lines.getvalue().decode().splitlines():
        r = json.loads(line)
        by_records.setdefault(connection_key(r["src"], r["dst"], r["proto"], r["sport"], r["dport"]), set()).add(
            r["verdict"]
        )
    assert set(by_records) == set(by_packets)
    for key, verdict in by_packets.items():
        assert by_records[key] == {verdict}, key
    # both directions of every TCP connection were exported; the reply's record counts no new flow
    assert doc["flows"] == len(CONNECTIONS)


CONNTRACK_INVENTORY = """apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: apps, labels: {app: client}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: apps, labels: {app: server}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.244.2.2}
---
apiVersion: v1
kind: Pod
metadata: {name: p3, namespace: apps, labels: {app: other}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.244.3.2}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-in, namespace: apps}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 8080}]
"""


def _root_reason() -> str | None:
    from tests.enforce.netns import root_reason

    if shutil.which("conntrack") is None:
        return "conntrack is not installed (Debian package conntrack)"
    return root_reason()


@pytest.mark.skipif(_root_reason() is not None, reason=str(_root_reason()))
def test_conntrack_list_after_real_connections(tmp_path):
    from tests.enforce.netns import Topology, sh

    topo = Topology(3)
    try:
        topo.up()
        # conntrack hooks are registered in a namespace once a rule there needs them
        sh(
            "ip",
            "netns",
            "exec",
            topo.node,
            "iptables",
            "-A",
            "FORWARD",
            "-m",
            "conntrack",
            "--ctstate",
            "NEW,ESTABLISHED,RELATED",
            "-j",
            "ACCEPT",
        )
        probes = {"a-b-tcp": (1, "TCP"), "a-b-udp": (1, "UDP"), "a-c-tcp": (2, "TCP")}
        assert all(topo.probe(0, probes).values())
        assert topo.reach(2, 1, "TCP")
        listing = sh("ip", "netns", "exec", topo.node, "conntrack", "-L").stdout
    finally:
        topo.down()
    (tmp_path / "inv.yaml").write_text(CONNTRACK_INVENTORY)
    path = tmp_path / "conntrack.txt"
    path.write_text(listing)
    project = load_project([tmp_path / "inv.yaml"])
    engine = NativeEngine(project.policy_set, project.inventory)
    import json

    out = io.BytesIO()
    replay = RecordReplay(engine, out=out)
    replay.run([str(path)])
    doc = replay.summary_json()
    assert doc["files"][0]["format"] == "conntrack" and doc["problems"] == 0
    lines = [json.loads(x) for x in out.getvalue().decode().splitlines() if "10.244." in x]
    seen = {(x["src"], x["dst"], x["proto"], x["dport"]) for x in lines}
    assert ("10.244.1.2", "10.244.2.2", "TCP", 8080) in seen and ("10.244.3.2", "10.244.2.2", "TCP", 8080) in seen
    assert ("10.244.1.2", "10.244.2.2", "UDP", 5353) in seen
    for x in lines:
        proto = {"TCP": 6, "UDP": 17, "ICMP": 1}[x["proto"]]
        flow = Flow(
            FlowEnd(ip=ipaddress.ip_address(x["src"])),
            FlowEnd(ip=ipaddress.ip_address(x["dst"])),
            proto,
            x["sport"],
            x["dport"],
        )
        assert x["verdict"] == reference.evaluate(project.policy_set, project.inventory, flow).verdict, x
    verdicts = {(x["src"], x["proto"]): x["verdict"] for x in lines if x["dst"] == "10.244.2.2"}
    assert verdicts == {("10.244.1.2", "TCP"): "allow", ("10.244.1.2", "UDP"): "deny", ("10.244.3.2", "TCP"): "deny"}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
