"""Large synthetic captures for the benchmarks, written with numpy (no scapy per packet)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

FRAME = 74  # Ethernet + IPv4 + TCP (ACK) + 20 bytes of payload
ETHERNET = bytes.fromhex("0200000000020200000000010800")  # IPv4, between two made-up MACs
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)  # µs timestamps, Ethernet
EPOCH = 1767225600  # the captures' first second


def ipv4_frame(src: bytes, dst: bytes, proto: int, body: bytes) -> bytes:
    """An Ethernet frame of an IPv4 packet carrying ``body`` (header checksum left 0: the decoder
    does not check it)."""
    return ETHERNET + struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 0, 0x4000, 64, proto, 0, src, dst) + body


def tcp_segment(sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes = b"") -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 0x50, flags, 65535, 0, 0) + data


def udp_datagram(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(data), 0) + data


VXLAN_NODES = (bytes([192, 168, 77, 1]), bytes([192, 168, 77, 2]))  # the tunnel's ends


def vxlan_frame(inner: bytes, vni: int = 4096, sport: int = 50000, dport: int = 4789) -> bytes:
    """``inner`` (an Ethernet frame) inside VXLAN (UDP 4789) between the two ``VXLAN_NODES``, as a
    node's uplink carries a pod's frame in Calico's VXLAN mode."""
    return ipv4_frame(*VXLAN_NODES, 17, udp_datagram(sport, dport, struct.pack(">BxxxI", 0x08, vni << 8) + inner))


def pcap_record(t_us: int, frame: bytes) -> bytes:
    """A pcap record of ``frame`` at ``t_us`` µs after ``EPOCH``."""
    return struct.pack("<IIII", EPOCH + t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame)) + frame


def write_tcp_capture(
    path: Path, n: int, sports: np.ndarray, src_low_bytes: np.ndarray | None = None, vxlan: bool = False
) -> Path:
    """A pcap of ``n`` frames 10.0.1.10 -> 10.0.2.20:8080 (``examples/demo``'s web -> api) with the
    given source ports (and, optionally, varying low bytes of the source address), read once so it
    is in the page cache. ``vxlan``: each frame inside VXLAN between two nodes (``vxlan_frame``)."""
    frame = ipv4_frame(bytes([10, 0, 1, 10]), bytes([10, 0, 2, 20]), 6, tcp_segment(0, 8080, 1, 0, 0x10, b"p" * 20))
    assert len(frame) == FRAME
    at = 0  # where the pods' frame starts
    if vxlan:
        wrapped = vxlan_frame(frame)
        at, frame = len(wrapped) - len(frame), wrapped
    template = np.frombuffer(frame, np.uint8)
    rec = np.dtype([("sec", "<u4"), ("usec", "<u4"), ("caplen", "<u4"), ("len", "<u4"), ("frame", "u1", len(frame))])
    recs = np.zeros(n, rec)
    i = np.arange(n, dtype=np.uint32)
    recs["sec"] = EPOCH + i // 100000
    recs["usec"] = (i % 100000) * 10
    recs["caplen"] = recs["len"] = len(frame)
    recs["frame"] = template
    recs["frame"][:, at + 34 : at + 36] = sports.astype(">u2").view(np.uint8).reshape(n, 2)
    if src_low_bytes is not None:
        recs["frame"][:, at + 29] = src_low_bytes.astype(np.uint8)
    with open(path, "wb") as f:
        f.write(PCAP_HEADER)
        f.write(recs.tobytes())
    path.read_bytes()
    return path


def write_http_capture(path: Path, connections: int) -> Path:
    """A pcap of ``connections`` TCP connections 10.0.1.10 -> 10.0.2.20:8080 (``examples/demo``'s
    web -> api), each a handshake, one request (``GET /public/item/NNNNNN``) and its answer: 5
    frames each. IP checksums are left 0, as above (the decoder does not check them)."""
    web, api = bytes([10, 0, 1, 10]), bytes([10, 0, 2, 20])

    def frame(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes) -> bytes:
        return ipv4_frame(src, dst, 6, tcp_segment(sport, dport, seq, ack, flags, data))

    out = [PCAP_HEADER]
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    t = 0
    for k in range(connections):
        sport, c, s = 10000 + k % 50000, 1000, 5000
        request = f"GET /public/item/{k:06d} HTTP/1.1\r\nHost: api.backend\r\n\r\n".encode()
        for f in (
            frame(web, api, sport, 8080, c, 0, 0x02, b""),
            frame(api, web, 8080, sport, s, c + 1, 0x12, b""),
            frame(web, api, sport, 8080, c + 1, s + 1, 0x18, request),
            frame(api, web, 8080, sport, s + 1, c + 1 + len(request), 0x18, answer),
            frame(web, api, sport, 8080, c + 1 + len(request), s + 1 + len(answer), 0x10, b""),
        ):
            t += 10
            out.append(pcap_record(t, f))
    path.write_bytes(b"".join(out))
    return path


# A DNS server behind a Service (kube-dns, two backends outside the cluster), to add to examples/demo.
KUBE_DNS_SERVICE = """apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, port: 53, targetPort: 53, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: [10.0.9.1]}, {addresses: [10.0.9.2]}]
ports: [{name: dns, port: 53, protocol: UDP}]
"""

# examples/domains: web may reach these names' addresses on TCP 443 (api.example.com, *.example.org)
DNS_NAMES_ALLOWED = ("api.example.com", "a.example.org", "b.example.org")
DNS_NAMES_OTHER = ("other.example.com", "example.org.evil.net")


def dns_message(qid: int, name: str, answer: tuple[bytes, int] | None = None) -> bytes:
    """A DNS query for ``name`` (A), or with ``answer`` (address, TTL) its response."""
    qname = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    question = qname + struct.pack(">HH", 1, 1)
    if answer is None:
        return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question
    address, ttl = answer  # the record's name: a pointer to the question's (offset 12)
    return (
        struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0)
        + question
        + struct.pack(">HHHIH", 0xC00C, 1, 1, ttl, len(address))
        + address
    )


def write_dns_capture(
    paths: list[Path], rounds: int, server: str = "10.0.9.53", seed: int = 1
) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, int]]]:
    """Captures (``rounds`` spread over ``paths``, in order) of web (10.0.1.10, ``examples/demo``)
    asking ``server`` for a name every half second and then opening a TCP connection to port 443
    of one of 32 outside addresses (198.18.0.x) a quarter of a second later: a query, its answer
    (a name of ``DNS_NAMES_ALLOWED`` or ``DNS_NAMES_OTHER``, one of the addresses, a TTL of 1, 2 or
    5 s), the SYN and its SYN-ACK. Returns the answers (µs, name, address's last byte, TTL) and
    the SYNs (µs, address's last byte), for ``syns_allowed``."""
    rng = np.random.default_rng(seed)
    web, dns = bytes([10, 0, 1, 10]), bytes(int(x) for x in server.split("."))
    ip, udp, tcp = ipv4_frame, udp_datagram, tcp_segment
    names = DNS_NAMES_ALLOWED + DNS_NAMES_OTHER
    answers: list[tuple[int, str, int, int]] = []
    syns: list[tuple[int, int]] = []
    frames: list[tuple[int, bytes]] = []
    for k in range(rounds):
        t = k * 500_000
        name = names[int(rng.integers(len(names)))]
        taught, ttl, target = int(rng.integers(32)), int(rng.choice([1, 2, 5])), int(rng.integers(32))
        query_port, syn_port, qid = 20000 + k % 20000, 40000 + k % 20000, k & 0xFFFF
        address, dst = bytes([198, 18, 0, taught]), bytes([198, 18, 0, target])
        frames.append((t, ip(web, dns, 17, udp(query_port, 53, dns_message(qid, name)))))
        frames.append((t + 1000, ip(dns, web, 17, udp(53, query_port, dns_message(qid, name, (address, ttl))))))
        answers.append((t + 1000, name, taught, ttl))
        syns.append((t + 250_000, target))
        frames.append((t + 250_000, ip(web, dst, 6, tcp(syn_port, 443, 1000, 0, 0x02))))
        frames.append((t + 251_000, ip(dst, web, 6, tcp(443, syn_port, 5000, 1001, 0x12))))
    per = -(-len(frames) // len(paths))
    for i, path in enumerate(paths):
        path.write_bytes(PCAP_HEADER + b"".join(pcap_record(t, f) for t, f in frames[i * per : (i + 1) * per]))
    return answers, syns


def syns_allowed(
    answers: list[tuple[int, str, int, int]], syns: list[tuple[int, int]], names: tuple[str, ...]
) -> list[bool]:
    """Per SYN of ``write_dns_capture``: whether an earlier answer for one of ``names`` taught its
    address, within the answer's TTL (no SYN falls on an expiry: those are whole half seconds)."""
    windows: dict[int, list[tuple[int, int]]] = {}
    for t, name, address, ttl in answers:
        if name in names:
            windows.setdefault(address, []).append((t, t + ttl * 1_000_000))
    return [any(a <= ts <= b for a, b in windows.get(target, [])) for ts, target in syns]
