"""The a — br — b topology of the bridge tests and benchmark: two endpoint namespaces whose
veths meet in a third namespace, where only the AF_PACKET bridge connects them (no kernel bridge,
no address on brA/brB). Every name is unique per run; ``topology()`` removes everything it made,
also when the body fails."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyclassify.bridge import in_netns

A_IP, B_IP = "10.245.0.1", "10.245.0.2"
A_IP6, B_IP6 = "fd00:245::1", "fd00:245::2"

NAMESPACES = """\
apiVersion: v1
kind: Namespace
metadata: {name: alpha}
---
apiVersion: v1
kind: Namespace
metadata: {name: beta}
"""

PODS = f"""\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {{name: client, namespace: alpha, labels: {{app: client}}}}
  spec: {{nodeName: node1, containers: [{{name: c, image: busybox}}]}}
  status: {{podIP: {A_IP}, podIPs: [{{ip: {A_IP}}}]}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: server, namespace: beta, labels: {{app: server}}}}
  spec: {{nodeName: node1, containers: [{{name: s, image: busybox}}]}}
  status: {{podIP: {B_IP}, podIPs: [{{ip: {B_IP}}}]}}
"""

# The server is isolated for ingress: TCP 8080 and UDP 5000 from the client pod only; nothing
# else (so 9090 and ICMP towards it are denied). The client is not isolated: the server may ping
# it, and replies to the client's connections come back through conntrack.
POLICY_ALLOW_8080 = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-ingress, namespace: beta}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: alpha}}
      podSelector: {matchLabels: {app: client}}
    ports:
    - {protocol: TCP, port: 8080}
    - {protocol: UDP, port: 5000}
"""

# The same server with no ingress allowed at all.
POLICY_DENY_ALL = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-ingress, namespace: beta}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
"""


def write_manifests(root: Path, policy: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "00-namespaces.yaml").write_text(NAMESPACES)
    (root / "10-pods.yaml").write_text(PODS)
    (root / "20-policy.yaml").write_text(policy)
    return root


def engine_for(root: Path):  # -> NativeEngine
    from pyclassify.engine import NativeEngine
    from pyclassify.project import load_project

    project = load_project([str(root)])
    assert not project.problems, project.problems
    return NativeEngine(project.policy_set, project.inventory)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def sysctl(ns: str, key: str, value: str) -> None:
    ip("netns", "exec", ns, "sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}")


@dataclass
class Topology:
    a: str
    br: str
    b: str
    a_mac: str
    b_mac: str


def _mac(ns: str, dev: str) -> str:
    out = subprocess.run(["ip", "-n", ns, "-o", "link", "show", dev], check=True, capture_output=True, text=True)
    return out.stdout.split("link/ether ")[1].split()[0]


@contextmanager
def topology(ipv6: bool = False) -> Iterator[Topology]:
    """Namespaces a, br, b: a0 (10.245.0.1) — brA | bridge | brB — b0 (10.245.0.2)."""
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    a, br, b = f"pcba{tag}", f"pcbr{tag}", f"pcbb{tag}"
    made: list[str] = []
    try:
        for ns in (a, br, b):
            ip("netns", "add", ns)
            made.append(ns)
        ip("-n", a, "link", "add", "a0", "type", "veth", "peer", "name", "brA", "netns", br)
        ip("-n", b, "link", "add", "b0", "type", "veth", "peer", "name", "brB", "netns", br)
        for dev in ("brA", "brB"):
            sysctl(br, f"net.ipv6.conf.{dev}.disable_ipv6", "1")  # brA/brB send nothing themselves
            ip("-n", br, "link", "set", dev, "up")
        for ns, dev, addr, addr6 in ((a, "a0", A_IP, A_IP6), (b, "b0", B_IP, B_IP6)):
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            if ipv6:
                ip("-n", ns, "addr", "add", f"{addr6}/64", "dev", dev, "nodad")
            else:
                sysctl(ns, f"net.ipv6.conf.{dev}.disable_ipv6", "1")
            ip("-n", ns, "link", "set", dev, "up")
        yield Topology(a, br, b, _mac(a, "a0"), _mac(b, "b0"))
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def tcp_server(ns: str, port: int, family: int = socket.AF_INET) -> socket.socket:
    """A listening socket in ``ns`` (any address)."""
    with in_netns(ns):
        s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    s.listen(16)
    return s


def tcp_connect(ns: str, addr: str, port: int, timeout: float = 2.0) -> socket.socket | None:
    """A connected socket from ``ns``, or None if the connection did not come up in time."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with in_netns(ns):
        s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
    except OSError:
        s.close()
        return None
    return s


def icmp_echo(ns: str, addr: str, timeout: float = 2.0, ident: int = 0x4242) -> bool:
    """One ICMP echo from ``ns`` to ``addr`` (raw socket); True if the reply came back."""
    import struct

    def csum(b: bytes) -> int:
        if len(b) % 2:
            b += b"\0"
        s = sum(struct.unpack(f"!{len(b) // 2}H", b))
        s = (s >> 16) + (s & 0xFFFF)
        s += s >> 16
        return ~s & 0xFFFF

    with in_netns(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        s.settimeout(timeout)
        body = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"pyclassify-bridge"
        body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
        s.sendto(body, (addr, 0))
        while True:
            data, src = s.recvfrom(2048)
            ihl = (data[0] & 0x0F) * 4
            if src[0] == addr and data[ihl] == 0 and struct.unpack("!H", data[ihl + 4 : ihl + 6])[0] == ident:
                return True
    except TimeoutError:
        return False
    finally:
        s.close()
