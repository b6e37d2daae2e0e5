"""The ICMP error that answers a packet a ``reject`` denies (native/tcpreset.pxi,
``icmp_unreachable``; the bridge sends it): read back with scapy — addresses swapped, port
unreachable, the packet quoted (link padding apart, within the minimum MTU), checksums scapy
agrees with — and none where a REJECT rule sends none."""

from __future__ import annotations

import logging
import random

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.inet import ICMP, IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6EchoRequest, IPv6  # noqa: E402

from pyclassify._native import icmp_unreachable  # noqa: E402


def rebuilt(out: bytes, v6: bool) -> bytes:
    """``out`` with every checksum scapy computes recomputed."""
    if v6:
        p = IPv6(out)
        p[ICMPv6DestUnreach].cksum = None
        return bytes(p)
    p = IP(out)
    p[IP].chksum = None
    p[ICMP].chksum = None
    return bytes(p)


def test_udp_over_ipv4_is_answered_port_unreachable() -> None:
    pkt = bytes(IP(src="10.0.0.1", dst="10.0.0.2", id=7) / UDP(sport=40000, dport=53) / (b"q" * 30))
    out = icmp_unreachable(pkt + b"\0" * 6)  # Ethernet padding: not the packet's
    r = IP(out)
    assert (r.src, r.dst, r.proto, r.ttl) == ("10.0.0.2", "10.0.0.1", 1, 64)
    assert (r[ICMP].type, r[ICMP].code) == (3, 3)
    assert out[28:] == pkt and r.len == len(out) == 28 + len(pkt)
    assert rebuilt(out, False) == out


def test_ipv6_is_answered_port_unreachable() -> None:
    pkt = bytes(IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=40000, dport=5353) / (b"q" * 30))
    out = icmp_unreachable(pkt)
    r = IPv6(out)
    assert (r.src, r.dst, r.nh, r.hlim) == ("fd00::2", "fd00::1", 58, 64)
    assert (r[ICMPv6DestUnreach].type, r[ICMPv6DestUnreach].code) == (1, 4)
    assert out[48:] == pkt and r.plen == 8 + len(pkt)
    assert rebuilt(out, True) == out
    # an echo request is a query: answered too
    assert icmp_unreachable(bytes(IPv6(src="fd00::1", dst="fd00::2") / ICMPv6EchoRequest()))


def test_the_quote_stays_within_the_minimum_mtu() -> None:
    big4 = bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / (b"x" * 3000))
    assert len(icmp_unreachable(big4)) == 576 and rebuilt(icmp_unreachable(big4), False) == icmp_unreachable(big4)
    big6 = bytes(IPv6(src="fd00::1", dst="fd00::2") / UDP() / (b"x" * 3000))
    assert len(icmp_unreachable(big6)) == 1280 and rebuilt(icmp_unreachable(big6), True) == icmp_unreachable(big6)


def test_none_where_a_reject_rule_sends_none() -> None:
    none = [
        IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=3, code=1),  # an error: never about an error
        IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=11),
        IP(src="10.0.0.1", dst="255.255.255.255") / UDP(),  # broadcast
        IP(src="10.0.0.1", dst="224.0.0.251") / UDP(),  # multicast
        IP(src="0.0.0.0", dst="10.0.0.2") / UDP(),  # no source to answer
        IP(src="10.0.0.1", dst="10.0.0.2", frag=10) / (b"x" * 16),  # a later fragment
        IPv6(src="fd00::1", dst="ff02::1") / UDP(),
        IPv6(src="::", dst="fd00::2") / UDP(),
        IPv6(src="fd00::1", dst="fd00::2") / ICMPv6DestUnreach(),
    ]
    for p in none:
        assert icmp_unreachable(bytes(p)) == b"", p.summary()
    assert icmp_unreachable(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=8)))  # echo: a query
    for cut in (b"", b"\x45", bytes(IP() / TCP())[:19], bytes(IPv6() / UDP())[:39], b"\x70" * 60):
        assert icmp_unreachable(cut) == b""


def test_garbage_never_crashes() -> None:
    rng = random.Random(11)
    base = [
        bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / b"abc"),
        bytes(IPv6(src="fd00::1", dst="fd00::2") / UDP() / b"abc"),
    ]
    for _ in range(20000):
        b = bytearray(rng.choice(base))
        for _ in range(rng.randrange(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        b = bytes(b[: rng.randrange(len(b) + 1)])
        out = icmp_unreachable(b)
        assert out == b"" or len(out) <= 1280
