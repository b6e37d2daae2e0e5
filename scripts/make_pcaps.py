#!/usr/bin/env python3
"""Write the bundled captures in pcaps/ (scapy; tests and capture generation only, never at runtime).

The traffic is that of the pods of examples/demo/ (read the manifests for who is who):

    frontend/web 10.0.1.10 (http 8080)      backend/api 10.0.2.20 (http 8080, metrics 9090)
    backend/db 10.0.2.30 (postgres 5432)    monitoring/prometheus 10.0.3.40 (web 9090)
    node1 192.168.1.10 (ssh 22)             kube-dns 10.96.0.10    blocked 198.51.100.7

Output is deterministic (fixed timestamps, MACs, sequence numbers), so re-running the script
reproduces the committed files byte for byte. pcaps/README.md lists what each capture holds.

    python scripts/make_pcaps.py [OUTDIR]     # default: pcaps/ at the repo root
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from scapy.layers.dns import DNS, DNSQR, DNSRR
from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrFragment,
)
from scapy.layers.l2 import CookedLinuxV2, Dot1Q, Ether
from scapy.layers.sctp import SCTP, SCTPChunkInit, SCTPChunkInitAck
from scapy.packet import Packet, Raw
from scapy.utils import PcapNgWriter, PcapWriter

# PcapNgWriter warns when interfaces have different link types, which is the point here.
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

BASE_TS = 1767225600.0  # 2026-01-01T00:00:00Z

WEB, API, DB, PROM = "10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40"
NODE, DNS_IP, BLOCKED = "192.168.1.10", "10.96.0.10", "198.51.100.7"
MAC = {
    WEB: "0a:58:0a:00:01:0a",
    API: "0a:58:0a:00:02:14",
    DB: "0a:58:0a:00:02:1e",
    PROM: "0a:58:0a:00:03:28",
    NODE: "52:54:00:12:34:56",
    DNS_IP: "0a:58:0a:60:00:0a",
    BLOCKED: "52:54:00:ff:00:01",
}


class Clock:
    def __init__(self) -> None:
        self.t = BASE_TS

    def __call__(self, pkt: Packet, step: float = 0.000150) -> Packet:
        self.t += step
        pkt.time = round(self.t, 6)
        return pkt


def eth(src: str, dst: str) -> Packet:
    return Ether(src=MAC.get(src, "02:00:00:00:00:01"), dst=MAC.get(dst, "02:00:00:00:00:02"))


def tcp_conversation(clock: Clock, c: str, s: str, sport: int, dport: int, request: bytes,
                     response: bytes, ip_id: int) -> list[Packet]:
    """Handshake, one request and response, FIN teardown: 8 packets, half each way."""
    cseq, sseq = 1000 + sport, 5000 + dport
    up = lambda **kw: eth(c, s) / IP(src=c, dst=s, id=ip_id + len(out), **kw)  # noqa: E731
    down = lambda **kw: eth(s, c) / IP(src=s, dst=c, id=ip_id + 100 + len(out), **kw)  # noqa: E731
    out: list[Packet] = []
    out.append(clock(up() / TCP(sport=sport, dport=dport, flags="S", seq=cseq, window=64240)))
    out.append(clock(down() / TCP(sport=dport, dport=sport, flags="SA", seq=sseq, ack=cseq + 1)))
    out.append(clock(up() / TCP(sport=sport, dport=dport, flags="A", seq=cseq + 1, ack=sseq + 1)))
    out.append(clock(up() / TCP(sport=sport, dport=dport, flags="PA", seq=cseq + 1, ack=sseq + 1) / request))
    cseq += 1 + len(request)
    out.append(clock(down() / TCP(sport=dport, dport=sport, flags="PA", seq=sseq + 1, ack=cseq) / response))
    sseq += 1 + len(response)
    out.append(clock(up() / TCP(sport=sport, dport=dport, flags="FA", seq=cseq, ack=sseq)))
    out.append(clock(down() / TCP(sport=dport, dport=sport, flags="FA", seq=sseq, ack=cseq + 1)))
    out.append(clock(up() / TCP(sport=sport, dport=dport, flags="A", seq=cseq + 1, ack=sseq + 1)))
    return out


def http(path: str, host: str) -> tuple[bytes, bytes]:
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: curl/8.11\r\nAccept: */*\r\n\r\n"
    body = '{"status":"ok"}\n'
    resp = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    return req.encode(), resp.encode()


def demo_ipv4(clock: Clock) -> list[Packet]:
    """pcaps/demo.pcap: the demo shop's IPv4 traffic on node1 (Ethernet)."""
    pkts: list[Packet] = []
    # web resolves the api Service, then talks HTTP to the api pod (allowed).
    q = DNS(id=0x1A2B, rd=1, qd=DNSQR(qname="api.backend.svc.cluster.local", qtype="A"))
    pkts.append(clock(eth(WEB, DNS_IP) / IP(src=WEB, dst=DNS_IP, id=1) / UDP(sport=41000, dport=53) / q))
    a = DNS(id=0x1A2B, qr=1, aa=1, rd=1, ra=1, qd=q.qd,
            an=DNSRR(rrname="api.backend.svc.cluster.local", type="A", ttl=30, rdata="10.96.0.20"))
    pkts.append(clock(eth(DNS_IP, WEB) / IP(src=DNS_IP, dst=WEB, id=2) / UDP(sport=53, dport=41000) / a))
    pkts += tcp_conversation(clock, WEB, API, 43210, 8080, *http("/v1/orders", "api.backend"), 100)
    # api queries db (allowed by allow-api-to-db).
    pkts += tcp_conversation(clock, API, DB, 52000, 5432, b"Q\x00\x00\x00\x0eSELECT 1;\x00",
                             b"T\x00\x00\x00\x21\x00\x01?column?\x00", 200)
    # prometheus scrapes api metrics (allowed by AdminNetworkPolicy allow-monitoring).
    pkts += tcp_conversation(clock, PROM, API, 39000, 9090, *http("/metrics", "10.0.2.20:9090"), 300)
    # web tries db directly: denied (AdminNetworkPolicy protect-db); SYN retransmitted once.
    for i in range(2):
        pkts.append(clock(eth(WEB, DB) / IP(src=WEB, dst=DB, id=400 + i)
                          / TCP(sport=43300, dport=5432, flags="S", seq=777), step=1.0 if i else 0.0002))
    # web to prometheus: denied (BaselineAdminNetworkPolicy default denies ingress to monitoring).
    pkts.append(clock(eth(WEB, PROM) / IP(src=WEB, dst=PROM, id=410) / TCP(sport=43400, dport=9090, flags="S")))
    # a known-bad address probes web: denied by the security tier.
    pkts.append(clock(eth(BLOCKED, WEB) / IP(src=BLOCKED, dst=WEB, id=420, ttl=52)
                      / TCP(sport=61000, dport=8080, flags="S")))
    # ssh from the pod network to the node (allowed by allow-ssh-to-hosts).
    pkts += tcp_conversation(clock, API, NODE, 50022, 22, b"SSH-2.0-OpenSSH_9.9\r\n",
                             b"SSH-2.0-OpenSSH_9.6\r\n", 500)
    # ICMP echo: prometheus pings web (frontend has no ingress policy), web pings api (denied).
    pkts.append(clock(eth(PROM, WEB) / IP(src=PROM, dst=WEB, id=600) / ICMP(type=8, id=0x77, seq=1) / (b"p" * 56)))
    pkts.append(clock(eth(WEB, PROM) / IP(src=WEB, dst=PROM, id=601) / ICMP(type=0, id=0x77, seq=1) / (b"p" * 56)))
    pkts.append(clock(eth(WEB, API) / IP(src=WEB, dst=API, id=602) / ICMP(type=8, id=0x78, seq=1) / (b"q" * 56)))
    # api sends a UDP datagram to a closed port of db; db answers port unreachable, quoting it.
    probe = IP(src=API, dst=DB, id=610) / UDP(sport=45000, dport=9999) / b"hello"
    pkts.append(clock(eth(API, DB) / probe))
    pkts.append(clock(eth(DB, API) / IP(src=DB, dst=API, id=611) / ICMP(type=3, code=3) / bytes(probe)[:28]))
    # SCTP association setup from api to db (not allowed: only TCP 5432 is).
    pkts.append(clock(eth(API, DB) / IP(src=API, dst=DB, id=620) / SCTP(sport=36412, dport=36412, tag=0)
                      / SCTPChunkInit(init_tag=0x1234, a_rwnd=106496, n_out_streams=10, n_in_streams=10, init_tsn=1)))
    pkts.append(clock(eth(DB, API) / IP(src=DB, dst=API, id=621) / SCTP(sport=36412, dport=36412, tag=0x1234)
                      / SCTPChunkInitAck(init_tag=0x4321, a_rwnd=106496, n_out_streams=10, n_in_streams=10, init_tsn=1)))
    # prometheus pushes a large UDP datagram to web, fragmented in three.
    big = IP(src=PROM, dst=WEB, id=630) / UDP(sport=47000, dport=8080) / (b"m" * 3000)
    for frag in fragment(big, fragsize=1400):
        pkts.append(clock(eth(PROM, WEB) / frag))
    return pkts


EXAMPLE_COM, EDGE = "93.184.216.34", "192.0.2.80"


def dns_answer(clock: Clock, client: str, sport: int, qid: int, name: str, records: list[Packet],
               ip_id: int) -> list[Packet]:
    """A UDP query from ``client`` to kube-dns and its answer."""
    q = DNS(id=qid, rd=1, qd=DNSQR(qname=name, qtype="A"))
    a = DNS(id=qid, qr=1, rd=1, ra=1, qd=q.qd, an=records)
    return [clock(eth(client, DNS_IP) / IP(src=client, dst=DNS_IP, id=ip_id) / UDP(sport=sport, dport=53) / q),
            clock(eth(DNS_IP, client) / IP(src=DNS_IP, dst=client, id=ip_id + 1) / UDP(sport=53, dport=sport) / a)]


def syn_and_answer(clock: Clock, c: str, s: str, sport: int, dport: int, ip_id: int, step: float) -> list[Packet]:
    """A SYN and its SYN-ACK (the answer only passes if the SYN was allowed)."""
    return [clock(eth(c, s) / IP(src=c, dst=s, id=ip_id) / TCP(sport=sport, dport=dport, flags="S", seq=9000),
                  step=step),
            clock(eth(s, c) / IP(src=s, dst=c, id=ip_id + 1) / TCP(sport=dport, dport=sport, flags="SA", seq=7000,
                                                                 ack=9001))]


def domains_ipv4(clock: Clock) -> list[Packet]:
    """pcaps/domains.pcap: web reaching names that examples/domains/ allows, as DNS teaches their
    addresses (Ethernet)."""
    pkts: list[Packet] = []
    # Before any answer: 93.184.216.34 is no name's address yet (denied).
    pkts += syn_and_answer(clock, WEB, EXAMPLE_COM, 44000, 443, 700, 1.0)
    # DNS teaches api.example.com -> 93.184.216.34 for 30 s; the same connection is allowed now.
    pkts += dns_answer(clock, WEB, 41100, 0x2001, "api.example.com",
                       [DNSRR(rrname="api.example.com", type="A", ttl=30, rdata=EXAMPLE_COM)], 702)
    pkts += syn_and_answer(clock, WEB, EXAMPLE_COM, 44001, 443, 704, 1.0)
    # A CNAME chain: www.example.org -> edge.cdn.example.net -> 192.0.2.80 (allowed through
    # *.example.org; the chain's names all learn the address).
    pkts += dns_answer(clock, WEB, 41101, 0x2002, "www.example.org",
                       [DNSRR(rrname="www.example.org", type="CNAME", ttl=300, rdata="edge.cdn.example.net"),
                        DNSRR(rrname="edge.cdn.example.net", type="A", ttl=20, rdata=EDGE)], 706)
    pkts += syn_and_answer(clock, WEB, EDGE, 44002, 443, 708, 1.0)
    # 40 s later both TTLs ran out: denied again.
    pkts += syn_and_answer(clock, WEB, EXAMPLE_COM, 44003, 443, 710, 40.0)
    pkts += syn_and_answer(clock, WEB, EDGE, 44004, 443, 712, 0.5)
    # Asked again over TCP (handshake, the length-prefixed answer): allowed again.
    q = DNS(id=0x2003, rd=1, qd=DNSQR(qname="api.example.com", qtype="A"))
    a = DNS(id=0x2003, qr=1, rd=1, ra=1, qd=q.qd, an=DNSRR(rrname="api.example.com", type="A", ttl=30, rdata=EXAMPLE_COM))
    qb, ab = bytes(q), bytes(a)
    pkts += tcp_conversation(clock, WEB, DNS_IP, 41200, 53, len(qb).to_bytes(2, "big") + qb,
                             len(ab).to_bytes(2, "big") + ab, 720)
    pkts += syn_and_answer(clock, WEB, EXAMPLE_COM, 44005, 443, 740, 1.0)
    # A malformed answer (cut short inside its record) teaches nothing, and is counted.
    bad = bytes(DNS(id=0x2004, qr=1, qd=DNSQR(qname="evil.example.com"),
                    an=DNSRR(rrname="evil.example.com", type="A", ttl=30, rdata="203.0.113.66")))[:-3]
    pkts.append(clock(eth(DNS_IP, WEB) / IP(src=DNS_IP, dst=WEB, id=750) / UDP(sport=53, dport=41102) / Raw(bad)))
    pkts += syn_and_answer(clock, WEB, "203.0.113.66", 44006, 443, 752, 1.0)
    return pkts


class TcpConnection:
    """One TCP connection, packet by packet, with the sequence and acknowledgment numbers right:
    initial sequence numbers 1000 + sport (client) and 5000 + dport (server), as in
    ``tcp_conversation``; IP ids ``ip_id + n`` up and ``ip_id + 100 + n`` down, n the packet's
    index in the connection."""

    def __init__(self, clock: Clock, c: str, s: str, sport: int, dport: int, ip_id: int) -> None:
        self.clock, self.c, self.s, self.sport, self.dport, self.ip_id = clock, c, s, sport, dport, ip_id
        self.cseq, self.sseq = 1000 + sport, 5000 + dport
        self.pkts: list[Packet] = []

    def _up(self, flags: str, payload: bytes = b"", step: float = 0.000150) -> None:
        p = (eth(self.c, self.s) / IP(src=self.c, dst=self.s, id=self.ip_id + len(self.pkts))
             / TCP(sport=self.sport, dport=self.dport, flags=flags, seq=self.cseq,
                   ack=self.sseq if "A" in flags else 0, window=64240))
        self.pkts.append(self.clock(p / payload if payload else p, step))
        self.cseq += len(payload) + (1 if "S" in flags or "F" in flags else 0)

    def _down(self, flags: str, payload: bytes = b"", step: float = 0.000150) -> None:
        p = (eth(self.s, self.c) / IP(src=self.s, dst=self.c, id=self.ip_id + 100 + len(self.pkts))
             / TCP(sport=self.dport, dport=self.sport, flags=flags, seq=self.sseq, ack=self.cseq, window=65160))
        self.pkts.append(self.clock(p / payload if payload else p, step))
        self.sseq += len(payload) + (1 if "S" in flags or "F" in flags else 0)

    def handshake(self, step: float = 0.000150) -> "TcpConnection":
        self._up("S", step=step)
        self._down("SA")
        self._up("A")
        return self

    def send(self, data: bytes, step: float = 0.000150) -> int:
        """A client segment carrying ``data``; returns its index in the connection."""
        self._up("PA", data, step)
        return len(self.pkts) - 1

    def ack(self) -> None:
        """The server acknowledges everything the client sent so far."""
        self._down("A")

    def reply(self, data: bytes) -> None:
        self._down("PA", data, step=0.000400)

    def close(self) -> "TcpConnection":
        """The client closes: FIN (acknowledging the server's data), the server's FIN, last ACK."""
        self._up("FA")
        self._down("FA")
        self._up("A")
        return self


def http_request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: api.backend\r\nUser-Agent: curl/8.11\r\nAccept: */*\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def http_response(status: str, body: str) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            f"{body}").encode()


def http_ipv4(clock: Clock) -> list[Packet]:
    """pcaps/http.pcap: web's HTTP requests to the api (10.0.1.10 -> 10.0.2.20:8080), for
    examples/http/ with examples/demo/ (Ethernet; 95 packets).

    Each connection starts with a full handshake; the allowed ones end with the client's FIN, the
    server's FIN and the last ACK; a denied one ends at the packet denied (a firewall cut it: no
    retransmission, no answer). The request packet (0-based index in the capture) is the one
    whose payload completes a request head: the request's verdict applies to it. Before that,
    web -> api:8080 is admitted only provisionally (no rule but an ``http`` one could allow it, so
    ingress awaits the request): the SYN, the handshake's ACK, and the segments of a head in
    progress (g) or of a body (h); the server's packets belong to the connection.

        conn  client port  requests (request packet: expected verdict)              packets
        a     45001        GET /public/index.html (3: allow, rule 0) -> 200         0-7
        b     45002        GET /healthz (11: allow, rule 0) -> 200                  8-15
        c     45003        POST /api/orders with its 13-byte body in the same       16-23
                           segment (19: allow, rule 1) -> 201
        d     45004        DELETE /api/orders (27: deny, rule 2); nothing after     24-27
        e     45005        GET /private (31: deny, rule 2); nothing after           28-31
        f     45006        GET /public/a (35: allow, rule 0), right behind it       32-36
                           GET /admin in the next segment (36: deny, rule 2)
        g     45007        GET /public/split, 3 bytes a segment (40, 42, ..., 72;   37-77
                           the last holds 1 byte), each acked by the server; the
                           head completes at 72 (allow, rule 0) -> 200
        h     45008        POST /api/orders, Content-Length 20 (81: allow, rule 1),  78-90
                           its body in two segments of 10 (82, 84) -> 201; then
                           GET /healthz on the same connection (86: allow, rule 0)
                           -> 200
        i     45009        16 bytes that begin a TLS ClientHello (94: deny,          91-94
                           malformed HTTP: not HTTP)

    Rules are those of NetworkPolicy backend/api-http (examples/http/api-http.yaml): 0 allows
    GET /public* and /healthz, 1 POST /api/orders, 2 denies the rest of web -> api:8080.
    """
    ok = http_response("200 OK", '{"status":"ok"}\n')
    pkts: list[Packet] = []

    def conn(sport: int, ip_id: int) -> TcpConnection:
        # 10 ms between connections.
        return TcpConnection(clock, WEB, API, sport, 8080, ip_id).handshake(step=0.010)

    # a. allowed: GET under the /public prefix.
    a = conn(45001, 1000)
    a.send(http_request("GET", "/public/index.html"))
    a.reply(ok)
    pkts += a.close().pkts
    # b. allowed: GET of the exact path /healthz.
    b = conn(45002, 1200)
    b.send(http_request("GET", "/healthz"))
    b.reply(ok)
    pkts += b.close().pkts
    # c. allowed: POST /api/orders, head and body in one segment.
    order = b'{"item": "a"}'
    assert len(order) == 13
    c = conn(45003, 1400)
    c.send(http_request("POST", "/api/orders", order))
    c.reply(http_response("201 Created", '{"id":1}\n'))
    pkts += c.close().pkts
    # d. denied: no rule allows DELETE; the request is the last packet.
    d = conn(45004, 1600)
    d.send(http_request("DELETE", "/api/orders"))
    pkts += d.pkts
    # e. denied: /private is under no allowed path.
    e = conn(45005, 1800)
    e.send(http_request("GET", "/private"))
    pkts += e.pkts
    # f. pipelined: an allowed request, then at once a denied one in the next segment.
    f = conn(45006, 2000)
    f.send(http_request("GET", "/public/a"))
    f.send(http_request("GET", "/admin"), step=0.000010)
    pkts += f.pkts
    # g. one request 3 bytes a segment, each acked: the head completes in the last segment.
    split = b"GET /public/split HTTP/1.1\r\nHost: api.backend\r\n\r\n"
    g = conn(45007, 2200)
    for i in range(0, len(split), 3):
        g.send(split[i:i + 3])
        g.ack()
    g.reply(ok)
    pkts += g.close().pkts
    # h. a POST whose 20-byte body comes in two segments, then a second request.
    body = b'{"item": "abcdefgh"}'
    assert len(body) == 20
    h = conn(45008, 2400)
    h.send(b"POST /api/orders HTTP/1.1\r\nHost: api.backend\r\nContent-Length: 20\r\n\r\n")
    h.send(body[:10])
    h.ack()
    h.send(body[10:])
    h.reply(http_response("201 Created", '{"id":2}\n'))
    h.send(b"GET /healthz HTTP/1.1\r\nHost: api.backend\r\nUser-Agent: curl/8.11\r\nAccept: */*\r\n\r\n")
    h.reply(ok)
    pkts += h.close().pkts
    # i. not HTTP: the first bytes of a TLS ClientHello (record header, handshake header).
    hello = bytes.fromhex("1603010200" "010001fc" "0303") + bytes(range(5))
    assert len(hello) == 16
    i_ = conn(45009, 2600)
    i_.send(hello)
    pkts += i_.pkts
    return pkts


def demo_pcapng(clock: Clock) -> list[Packet]:
    """pcaps/demo.pcapng: two interfaces: a VLAN trunk (Ethernet, 802.1Q) and `any` (SLL2),
    carrying IPv4 pod traffic and IPv6 node traffic with extension headers and fragments."""
    pkts: list[Packet] = []

    def on(ifname: str, p: Packet) -> Packet:
        p.sniffed_on = ifname
        return p

    def vlan(src: str, dst: str, vid: int = 100) -> Packet:
        return eth(src, dst) / Dot1Q(vlan=vid)

    # The web -> api conversation again, VLAN-tagged on the trunk.
    for p in tcp_conversation(clock, WEB, API, 43500, 8080, *http("/v1/cart", "api.backend"), 700):
        ip = p[IP]
        pkts.append(on("trunk0", clock(vlan(ip.src, ip.dst) / ip.copy(), step=0.0)))
    # QinQ-tagged DNS over the trunk.
    q = DNS(id=0x2C3D, rd=1, qd=DNSQR(qname="db.backend.svc.cluster.local", qtype="A"))
    pkts.append(on("trunk0", clock(eth(API, DNS_IP) / Dot1Q(vlan=10, type=0x8100) / Dot1Q(vlan=100)
                                   / IP(src=API, dst=DNS_IP, id=800) / UDP(sport=42000, dport=53) / q)))
    a = DNS(id=0x2C3D, qr=1, aa=1, rd=1, ra=1, qd=q.qd,
            an=DNSRR(rrname="db.backend.svc.cluster.local", type="A", ttl=30, rdata="10.0.2.30"))
    pkts.append(on("trunk0", clock(eth(DNS_IP, API) / Dot1Q(vlan=10, type=0x8100) / Dot1Q(vlan=100)
                                   / IP(src=DNS_IP, dst=API, id=801) / UDP(sport=53, dport=42000) / a)))
    # IPv6 on the node's `any` interface (Linux cooked v2).
    n6, r6 = "fd00:10::1", "fd00:10::100"

    def sll(proto: int = 0x86DD) -> Packet:
        return CookedLinuxV2(proto=proto, ifindex=2, lladdrtype=1, pkttype=0, lladdrlen=6, src=b"RT\x00\x124V\x00\x00")

    pkts.append(on("any", clock(sll() / IPv6(src=r6, dst=n6) / TCP(sport=51000, dport=22, flags="S"))))
    pkts.append(on("any", clock(sll() / IPv6(src=n6, dst=r6) / TCP(sport=22, dport=51000, flags="SA"))))
    pkts.append(on("any", clock(sll() / IPv6(src=r6, dst=n6) / ICMPv6EchoRequest(id=9, seq=1, data=b"x" * 32))))
    pkts.append(on("any", clock(sll() / IPv6(src=n6, dst=r6) / ICMPv6EchoReply(id=9, seq=1, data=b"x" * 32))))
    probe6 = IPv6(src=r6, dst=n6) / UDP(sport=46000, dport=7777) / b"probe"
    pkts.append(on("any", clock(sll() / probe6)))
    pkts.append(on("any", clock(sll() / IPv6(src=n6, dst=r6) / ICMPv6DestUnreach(code=4) / bytes(probe6))))
    big6 = IPv6(src=r6, dst=n6) / IPv6ExtHdrFragment(id=0xBEEF) / UDP(sport=46001, dport=8080) / (b"z" * 2400)
    from scapy.layers.inet6 import fragment6

    for frag in fragment6(big6, 1280):
        pkts.append(on("any", clock(sll() / frag)))
    return pkts


def write(outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    clock = Clock()  # demo.pcapng's packets go on from demo.pcap's times
    captures = [("demo.pcap", lambda: demo_ipv4(clock)), ("demo.pcapng", lambda: demo_pcapng(clock)),
                ("domains.pcap", lambda: domains_ipv4(Clock())), ("http.pcap", lambda: http_ipv4(Clock()))]
    written = []
    for name, packets in captures:
        path = outdir / name
        w = PcapNgWriter(str(path)) if name.endswith(".pcapng") else PcapWriter(str(path), linktype=1, sync=False)
        for p in packets():
            w.write(p)
        w.close()
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    outdir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "pcaps"
    for path in write(outdir):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
