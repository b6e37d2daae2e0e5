"""Two pods on two nodes whose traffic crosses an overlay tunnel, as Calico's and Cilium's do:

    web (10.244.1.10) ── nodeA ══ tunnel over ul0 (192.168.77.1 ── 192.168.77.2) ══ nodeB ── db (10.244.2.20)

Each pod is a network namespace with a veth to its node's namespace; the nodes route the pods'
subnets into the tunnel. The tunnel is the kernel's own device (``ip link add ... type vxlan``,
``geneve``, ``ipip``, ``gre``, ``gretap``) where the kernel has it; where it does not (a kernel
built without the module), a tunnel endpoint in user space does the same job over a TUN/TAP
device and a socket, writing the same headers (RFC 7348, 8926, 2003, 2784) — either way the
pods' packets are real, and so is the capture on the underlay. Neighbours are static (as Calico
and Flannel program them), so the underlay carries the tunnel and nothing else.

Every name is unique per run; ``overlay()`` removes what it made, also when the body fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

WEB_IP, DB_IP = "10.244.1.10", "10.244.2.20"
NODE_A, NODE_B = "192.168.77.1", "192.168.77.2"
TUN_A, TUN_B = "10.250.0.1", "10.250.0.2"
MAC_A, MAC_B = "02:77:00:00:00:01", "02:77:00:00:00:02"  # the nodes' tunnel devices (L2 kinds)
VNI = 4096  # Calico's default vxlanVNI
L2_KINDS = ("vxlan", "geneve", "gretap")

MANIFESTS = f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: shop, labels: {{kubernetes.io/metadata.name: shop}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: data, labels: {{kubernetes.io/metadata.name: data}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: shop, labels: {{app: web}}}}
spec: {{nodeName: node-a, containers: [{{name: web, image: nginx}}]}}
status: {{phase: Running, podIP: {WEB_IP}, podIPs: [{{ip: {WEB_IP}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: db, namespace: data, labels: {{app: db}}}}
spec: {{nodeName: node-b, containers: [{{name: db, image: postgres}}]}}
status: {{phase: Running, podIP: {DB_IP}, podIPs: [{{ip: {DB_IP}}}]}}
---
# db takes connections from web on 8080 only: web -> db:5432 is denied.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: db-ingress, namespace: data}}
spec:
  podSelector: {{matchLabels: {{app: db}}}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: shop}}}}
      podSelector: {{matchLabels: {{app: web}}}}
    ports:
    - {{protocol: TCP, port: 8080}}
"""

# TCP servers answering each line they read with the same line (the db pod).
SERVER = r"""
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(8)
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
def echo(c):
    with c:
        while True:
            d = c.recv(4096)
            if not d: return
            c.sendall(d)
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

# One TCP conversation: connect, send a line, read it back, close; prints "ok" or the error.
CLIENT = r"""
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    s.sendall(b"hello\n"); ok = s.recv(16) == b"hello\n"; s.close()
    print("ok" if ok else "bad echo")
except OSError as e:
    print(f"error: {e}")
"""

# A tunnel endpoint in user space: frames (TAP) or packets (TUN) read from the device go out
# encapsulated through a socket to the peer node, and what the socket receives goes into the
# device, decapsulated. argv: kind, device, local, remote, port.
ENDPOINT = r"""
import fcntl, os, select, socket, struct, sys
kind, dev, local, remote, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
IFF_TUN, IFF_TAP, IFF_NO_PI, TUNSETIFF = 0x1, 0x2, 0x1000, 0x400454CA
l2 = kind in ("vxlan", "geneve", "gretap")
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", dev.encode(), (IFF_TAP if l2 else IFF_TUN) | IFF_NO_PI))
if kind in ("vxlan", "geneve"):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); sock.bind((local, port))
else:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, 4 if kind == "ipip" else 47)
    sock.bind((local, 0))
print("ready", flush=True)
def wrap(data):
    if kind == "vxlan": return struct.pack(">BxxxI", 0x08, 4096 << 8) + data
    if kind == "geneve": return struct.pack(">BBHI", 0, 0, 0x6558, 4096 << 8) + data
    if kind == "gretap": return struct.pack(">HH", 0x2000, 0x6558) + struct.pack(">I", 4096) + data
    if kind == "gre": return struct.pack(">HH", 0, 0x0800) + data
    return data
def unwrap(data):
    if kind in ("ipip", "gre", "gretap"):
        data = data[(data[0] & 0x0F) * 4:]  # a raw socket hands the IP header too
    if kind in ("vxlan", "geneve"): return data[8:]
    if kind == "gretap": return data[8:]
    if kind == "gre": return data[4:]
    return data
while True:
    ready, _, _ = select.select([fd, sock], [], [])
    if fd in ready:
        sock.sendto(wrap(os.read(fd, 65535)), (remote, port if kind in ("vxlan", "geneve") else 0))
    if sock in ready:
        data, src = sock.recvfrom(65535)
        if src[0] == remote:
            os.write(fd, unwrap(data))
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def sysctl(ns: str, key: str, value: str) -> None:
    ip("netns", "exec", ns, "sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}")


def kernel_has(kind: str) -> bool:
    """Whether this kernel can make a tunnel device of ``kind`` (tried in a throwaway namespace)."""
    ns = f"pcovk{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    ip("netns", "add", ns)
    try:
        args = {
            "vxlan": ["id", "1", "dstport", "4789", "remote", NODE_B, "local", NODE_A],
            "geneve": ["id", "1", "remote", NODE_B],
        }.get(kind, ["local", NODE_A, "remote", NODE_B])
        r = subprocess.run(["ip", "-n", ns, "link", "add", "t0", "type", kind, *args], capture_output=True)
        return r.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@dataclass
class Overlay:
    web: str
    node_a: str
    node_b: str
    db: str
    kind: str
    port: int
    kernel: bool  # the kernel's tunnel device, or the user-space endpoint
    processes: list[subprocess.Popen] = field(default_factory=list)

    def run(self, ns: str, script: str, *args: str) -> subprocess.Popen:
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes.append(p)
        line = p.stdout.readline() if p.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(
                f"{script.splitlines()[1]}... in {ns} did not start: {line!r} "
                f"{p.stderr.read() if p.stderr and p.poll() is not None else ''}"
            )
        return p

    def connect(self, port: int) -> str:
        """One conversation from web to db:``port`` ("ok" or the client's error)."""
        r = subprocess.run(
            ["ip", "netns", "exec", self.web, sys.executable, "-c", CLIENT, DB_IP, str(port)],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return r.stdout.strip() or r.stderr.strip()

    @contextmanager
    def capture(self, path: Path) -> Iterator[None]:
        """tcpdump on nodeA's underlay interface, whole frames, into ``path``."""
        p = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.node_a,
                "tcpdump",
                "-i",
                "ul0",
                "-n",
                "-U",
                "--immediate-mode",
                "-s",
                "0",
                "-w",
                str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert p.stderr is not None
            line = p.stderr.readline()
            if "listening on" not in line:
                raise RuntimeError(f"tcpdump did not start: {line}")
            yield
            time.sleep(0.3)  # the last frames through the ring
        finally:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _tunnel(
    ns: str,
    kind: str,
    port: int,
    local: str,
    remote: str,
    addr: str,
    peer: str,
    mac: str,
    peer_mac: str,
    subnet: str,
    o: Overlay,
) -> None:
    """The node's tunnel device ``tun0`` to ``remote`` and the route of the far pod's ``subnet``."""
    if o.kernel:
        extra = {
            "vxlan": ["id", str(VNI), "dstport", str(port), "local", local, "remote", remote, "dev", "ul0"],
            "geneve": ["id", str(VNI), "remote", remote, "dstport", str(port)],
            "gretap": ["local", local, "remote", remote, "key", str(VNI)],
        }
        ip("-n", ns, "link", "add", "tun0", "type", kind, *extra.get(kind, ["local", local, "remote", remote]))
    else:
        # the device appears when the endpoint opens it
        o.run(ns, ENDPOINT, kind, "tun0", local, remote, str(port))
    sysctl(ns, "net.ipv6.conf.tun0.disable_ipv6", "1")
    if kind in L2_KINDS:
        ip("-n", ns, "link", "set", "tun0", "address", mac)
    ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "tun0")
    ip("-n", ns, "link", "set", "tun0", "mtu", "1400", "up")
    if kind in L2_KINDS:
        ip("-n", ns, "neigh", "replace", peer, "lladdr", peer_mac, "dev", "tun0", "nud", "permanent")
    ip("-n", ns, "route", "add", subnet, "via", peer, "dev", "tun0", "onlink")


@contextmanager
def overlay(kind: str, port: int = 0) -> Iterator[Overlay]:
    """The web — nodeA ═ ``kind`` tunnel ═ nodeB — db topology (``port``: VXLAN's or Geneve's)."""
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    names = {k: f"pco{k}{tag}" for k in ("w", "a", "b", "d")}
    o = Overlay(names["w"], names["a"], names["b"], names["d"], kind, port, kernel_has(kind))
    made: list[str] = []
    try:
        for ns in names.values():
            ip("netns", "add", ns)
            made.append(ns)
        for ns in made:
            ip("-n", ns, "link", "set", "lo", "up")
        # the underlay: the nodes' uplinks, static neighbours (no ARP on the capture)
        ip("-n", o.node_a, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", o.node_b)
        for ns, addr, peer, mac, peer_mac in (
            (o.node_a, NODE_A, NODE_B, "02:77:00:00:01:01", "02:77:00:00:01:02"),
            (o.node_b, NODE_B, NODE_A, "02:77:00:00:01:02", "02:77:00:00:01:01"),
        ):
            sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
            sysctl(ns, "net.ipv4.ip_forward", "1")
            ip("-n", ns, "link", "set", "ul0", "address", mac)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "ul0")
            ip("-n", ns, "link", "set", "ul0", "up")
            ip("-n", ns, "neigh", "replace", peer, "lladdr", peer_mac, "dev", "ul0", "nud", "permanent")
        # the pods, each on a veth to its node
        for pod, node, pod_ip, gw in ((o.web, o.node_a, WEB_IP, "10.244.1.1"), (o.db, o.node_b, DB_IP, "10.244.2.1")):
            sysctl(pod, "net.ipv6.conf.all.disable_ipv6", "1")
            ip("-n", pod, "link", "add", "eth0", "type", "veth", "peer", "name", "cali0", "netns", node)
            ip("-n", pod, "addr", "add", f"{pod_ip}/24", "dev", "eth0")
            ip("-n", pod, "link", "set", "eth0", "up")
            ip("-n", pod, "route", "add", "default", "via", gw)
            ip("-n", node, "addr", "add", f"{gw}/24", "dev", "cali0")
            ip("-n", node, "link", "set", "cali0", "up")
        _tunnel(o.node_a, kind, port, NODE_A, NODE_B, TUN_A, TUN_B, MAC_A, MAC_B, "10.244.2.0/24", o)
        _tunnel(o.node_b, kind, port, NODE_B, NODE_A, TUN_B, TUN_A, MAC_B, MAC_A, "10.244.1.0/24", o)
        yield o
    finally:
        for p in o.processes:
            p.kill()
            p.wait()
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
