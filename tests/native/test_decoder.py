"""The L2-L4 decoder on frames built by scapy: every layer it knows, the fragment table, ICMP
error quotes, each named error kind, and a property test over random layer stacks."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR, fragment
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.ipsec import AH
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.layers.sctp import SCTP
from scapy.packet import Packet

from pyclassify import _native
from pyclassify import batch as B
from pyclassify.batch import HEADER_DTYPE, new_batch
from pyclassify.capture import QUOTE_DTYPE, QUOTE_HAS_PORTS, QUOTE_VALID
from tests.native.conftest import mapped

Expect = Callable[[Packet], dict[str, Any]]
Check = Callable[[np.void, dict[str, Any]], None]
ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def decode(frames: list[bytes], linktype: int = 1, decoder: Any = None) -> tuple[np.ndarray, np.ndarray]:
    h = new_batch(len(frames))
    q = np.zeros(len(frames), QUOTE_DTYPE)
    (decoder or _native.Decoder()).decode(frames, h, q, linktype)
    return h, q


def test_error_kinds_agree_between_c_and_python() -> None:
    assert [tuple(e) for e in _native.error_kinds()] == list(B.ERROR_KINDS)
    assert [v for _, v in B.ERROR_KINDS] == list(range(len(B.ERROR_KINDS)))


LAYERED = [
    ETH
    / IP(src="10.0.1.10", dst="10.0.2.20", options=[IPOption_RR(routers=["1.2.3.4"])])
    / TCP(sport=1, dport=2, flags="FPU"),
    ETH / Dot1Q(vlan=100) / IP(src="10.0.1.10", dst="10.0.2.20") / UDP(sport=3, dport=4),
    ETH / Dot1AD(vlan=10) / Dot1Q(vlan=100) / IPv6(src="fd00::1", dst="fd00::2") / TCP(sport=5, dport=6),
    ETH / IP(src="10.0.1.10", dst="10.0.2.20", proto=136) / UDP(sport=7, dport=8),  # UDP-Lite: same header
    ETH / IPv6(src="fd00::1", dst="fd00::2", nh=136) / UDP(sport=9, dport=10),
    ETH / IP(src="10.0.1.10", dst="10.0.2.20") / SCTP(sport=36412, dport=36413),
    ETH / IPv6(src="fd00::1", dst="fd00::2") / SCTP(sport=1, dport=2),
    ETH / IP(src="10.0.1.10", dst="10.0.2.20") / ICMP(type=8, code=0),
    ETH / IPv6(src="fd00::1", dst="fd00::2") / ICMPv6EchoRequest(),
    ETH
    / IPv6(src="fd00::1", dst="fd00::2")
    / IPv6ExtHdrHopByHop()
    / IPv6ExtHdrRouting(addresses=["fd00::9"])
    / IPv6ExtHdrDestOpt()
    / TCP(sport=11, dport=12),
    ETH / IPv6(src="fd00::1", dst="fd00::2") / AH(nh=17, payloadlen=4, spi=1, icv=b"\0" * 12) / UDP(sport=13, dport=14),
    ETH
    / IP(src="10.0.1.10", dst="10.0.2.20", proto=50)
    / (b"\0" * 8),  # ESP: IP, no ports (GRE is a tunnel: test_decap)
]


@pytest.mark.parametrize("pkt", LAYERED, ids=lambda p: p.summary()[:60])
def test_layers(pkt: Packet, expect: Expect, check_row: Check) -> None:
    exp = expect(pkt)
    if exp["protocol"] == 136 or AH in pkt:  # scapy dissects neither UDP-Lite nor AH in IPv6
        exp.update(
            protocol=136 if exp["protocol"] == 136 else 17,
            sport=pkt[UDP].sport,
            dport=pkt[UDP].dport,
            flags=B.FLAG_HAS_PORTS,
        )
    h, _ = decode([bytes(pkt)])
    check_row(h[0], exp)
    assert int(h[0]["pkt_len"]) == len(pkt)


def test_ipv4_fragments_take_ports_of_their_first_fragment() -> None:
    ip = IP(src="10.0.3.40", dst="10.0.1.10", id=4242) / UDP(sport=47000, dport=8080) / (b"m" * 3000)
    frags = [bytes(ETH / f) for f in fragment(ip, fragsize=1000)]
    assert len(frags) == 4
    h, _ = decode(frags)
    assert (h["frag_id"] == 4242).all() and (h["sport"] == 47000).all() and (h["dport"] == 8080).all()
    assert (
        h["flags"].tolist()
        == [B.FLAG_FRAGMENT | B.FLAG_FIRST_FRAGMENT | B.FLAG_HAS_PORTS] + [B.FLAG_FRAGMENT | B.FLAG_HAS_PORTS] * 3
    )
    # Without their first fragment, later fragments have no ports, and say why.
    h, _ = decode(frags[1:])
    assert not (h["flags"] & B.FLAG_HAS_PORTS).any() and (h["error_kind"] == B.ERR_FRAGMENT_UNMATCHED).all()
    assert not (h["flags"] & B.FLAG_MALFORMED).any() and (h["protocol"] == 17).all()


def test_ipv6_fragments() -> None:
    from scapy.layers.inet6 import fragment6

    big = IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrFragment(id=0xBEEF) / TCP(sport=1, dport=443) / (b"z" * 3000)
    frags = [bytes(ETH / f) for f in fragment6(big, 1280)]
    h, _ = decode(frags)
    assert (h["frag_id"] == 0xBEEF).all() and (h["dport"] == 443).all() and (h["protocol"] == 6).all()
    assert h["flags"][0] & B.FLAG_FIRST_FRAGMENT and not (h["flags"][1:] & B.FLAG_FIRST_FRAGMENT).any()


def test_fragment_table_is_bounded_and_evicts() -> None:
    dec = _native.Decoder()
    firsts, lasts = [], []
    # 6000 fragmented datagrams: raw IPv4 built with struct (scapy is too slow for this many);
    # the first fragment carries the UDP header, the second is at offset 24 bytes.
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    for i in range(6000):
        udp = struct.pack(">HHHH", 1000 + i % 50000, 53, 48, 0) + b"a" * 16
        firsts.append(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 44, i, 0x2000, 64, 17, 0, src, dst) + udp)
        lasts.append(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 44, i, 3, 64, 17, 0, src, dst) + b"a" * 24)
    decode(firsts, 101, dec)
    stats = dec.fragment_stats
    assert stats["inserted"] == 6000 and stats["evicted"] >= 6000 - 4096
    h, _ = decode(lasts, 101, dec)
    matched = h["flags"] & B.FLAG_HAS_PORTS != 0
    assert matched[-50:].all(), "recent first fragments are still in the table"
    assert not matched.all(), "the table is bounded: the oldest were evicted"
    assert (h["sport"][matched] == 1000 + np.flatnonzero(matched) % 50000).all()
    assert (h["error_kind"][~matched] == B.ERR_FRAGMENT_UNMATCHED).all()


def test_icmp_errors_quote_their_flow() -> None:
    inner = IP(src="10.0.2.20", dst="10.0.2.30") / UDP(sport=45000, dport=9999)
    v4 = ETH / IP(src="10.0.2.30", dst="10.0.2.20") / ICMP(type=3, code=3) / bytes(inner)[:28]
    inner6 = IPv6(src="fd00::1", dst="fd00::2") / TCP(sport=40000, dport=443)
    v6 = ETH / IPv6(src="fd00::2", dst="fd00::1") / ICMPv6DestUnreach(code=4) / bytes(inner6)
    te = ETH / IPv6(src="fd00::9", dst="fd00::1") / ICMPv6TimeExceeded() / bytes(inner6)[:44]
    cut = ETH / IP(src="10.0.2.30", dst="10.0.2.20") / ICMP(type=11) / bytes(inner)[:12]  # quote too short
    h, q = decode([bytes(v4), bytes(v6), bytes(te), bytes(cut)])
    assert (h["flags"] & B.FLAG_ICMP_ERROR).all() and not (h["flags"] & B.FLAG_HAS_PORTS).any()
    assert h["icmp_type"].tolist() == [3, 1, 3, 11]
    assert q["flags"].tolist() == [QUOTE_VALID | QUOTE_HAS_PORTS] * 3 + [0]
    assert q[0]["src_addr"].tolist() == mapped("10.0.2.20") and (q[0]["sport"], q[0]["dport"]) == (45000, 9999)
    assert q[1]["dst_addr"].tolist() == mapped("fd00::2") and (q[1]["protocol"], q[1]["dport"]) == (6, 443)
    assert q[2]["sport"] == 40000


def err(frame: bytes, linktype: int = 1) -> tuple[int, int]:
    h = new_batch(1)
    # as a capture with a snap length would: the wire length is the untruncated frame's
    wire = max(len(frame), len(TCP4))
    _native.Decoder().decode([frame], h, np.zeros(1, QUOTE_DTYPE), linktype, wire_lengths=[wire])
    return int(h[0]["error_kind"]), int(h[0]["flags"])


TCP4 = bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2))


@pytest.mark.parametrize(
    ("frame", "linktype", "kind"),
    [
        (TCP4[:10], 1, B.ERR_TRUNCATED_LINK),
        (TCP4[: 14 + 12], 1, B.ERR_TRUNCATED_IP),
        (TCP4[: 14 + 20 + 10], 1, B.ERR_TRUNCATED_L4),
        (TCP4[:14] + b"\x55" + TCP4[15:], 1, B.ERR_BAD_IP_VERSION),
        (TCP4[:14] + b"\x44" + TCP4[15:], 1, B.ERR_BAD_IHL),
        (TCP4[:16] + b"\x00\x05" + TCP4[18:], 1, B.ERR_BAD_TOTAL_LENGTH),
        (TCP4[:16] + b"\x05\xdc" + TCP4[18:], 1, B.ERR_BAD_TOTAL_LENGTH),  # 1500 > frame
        (bytes(ETH / ARP()), 1, B.ERR_UNKNOWN_ETHERTYPE),
        (TCP4, 147, B.ERR_UNKNOWN_LINKTYPE),
        (bytes(ETH / Dot1Q() / Dot1Q() / Dot1Q() / Dot1Q() / IP() / TCP()), 1, B.ERR_TOO_MANY_VLAN_TAGS),
        (
            bytes(
                ETH
                / IPv6(src="::1", dst="::2")
                / (IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt())
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / IPv6ExtHdrDestOpt()
                / UDP()
            ),
            1,
            B.ERR_TOO_MANY_EXT_HEADERS,
        ),
        (bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(dataofs=2)), 1, B.ERR_BAD_L4_HEADER),
        (bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(len=3)), 1, B.ERR_BAD_L4_HEADER),
        (bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2", frag=1, proto=6) / (b"\0" * 16)), 1, B.ERR_FRAGMENT_OVERLAP),
    ],
    ids=lambda v: str(v)[:20] if not isinstance(v, bytes) else None,
)
def test_error_kinds(frame: bytes, linktype: int, kind: int) -> None:
    got, flags = err(frame, linktype)
    assert got == kind
    assert flags & B.FLAG_MALFORMED
    assert bool(flags & B.FLAG_TRUNCATED) == (kind in (B.ERR_TRUNCATED_LINK, B.ERR_TRUNCATED_IP, B.ERR_TRUNCATED_L4))
    assert not flags & B.FLAG_HAS_PORTS, "a packet not fully decoded never gets ports"


def test_snaplen_cut_payload_is_not_an_error() -> None:
    full = bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2) / (b"p" * 1000))
    h = new_batch(1)
    _native.Decoder().decode([full[:96]], h, np.zeros(1, QUOTE_DTYPE), 1, wire_lengths=[len(full)])
    assert h[0]["error_kind"] == 0 and h[0]["dport"] == 2 and h[0]["pkt_len"] == len(full)


# --- property: random layer stacks survive build -> pcap -> read -> decode --------------------

addr4 = st.ip_addresses(v=4).map(str)
addr6 = st.ip_addresses(v=6).map(str)
port = st.integers(0, 65535)


@st.composite
def packets(draw: st.DrawFn) -> Packet:
    v6 = draw(st.booleans())
    if v6:
        ip: Packet = IPv6(src=draw(addr6), dst=draw(addr6), hlim=draw(st.integers(0, 255)))
        for ext in draw(st.lists(st.sampled_from(["hbh", "dst", "rt"]), max_size=3)):
            ip = ip / {"hbh": IPv6ExtHdrHopByHop, "dst": IPv6ExtHdrDestOpt, "rt": IPv6ExtHdrRouting}[ext]()
    else:
        ip = IP(
            src=draw(addr4),
            dst=draw(addr4),
            ttl=draw(st.integers(0, 255)),
            id=draw(st.integers(0, 65535)),
            tos=draw(st.integers(0, 255)),
        )
    kind = draw(st.sampled_from(["tcp", "udp", "sctp", "icmp", "none"]))
    if kind == "tcp":
        l4: Packet = TCP(sport=draw(port), dport=draw(port), flags=draw(st.integers(0, 255)))
    elif kind == "udp":
        # a VXLAN or Geneve port would be a tunnel's (tests/native/test_decap.py)
        l4 = UDP(sport=draw(port), dport=draw(port.filter(lambda p: p not in (4789, 8472, 6081))))
    elif kind == "sctp":
        l4 = SCTP(sport=draw(port), dport=draw(port))
    elif kind == "icmp":
        t, c = draw(st.sampled_from([(0, 0), (8, 0), (13, 0)])), 0
        l4 = ICMP(type=t[0], code=c) if not v6 else ICMPv6EchoRequest()
    else:
        l4 = None
    pkt = ip / l4 if l4 is not None else ip
    pkt = pkt / draw(st.binary(max_size=64))
    link = draw(st.sampled_from(["eth", "vlan", "raw"]))
    if link == "eth":
        return ETH / pkt
    if link == "vlan":
        return ETH / Dot1Q(vlan=draw(st.integers(0, 4095))) / pkt
    return pkt


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(packets(), min_size=1, max_size=8))
def test_random_packets_round_trip(pkts: list[Packet]) -> None:
    import io

    from scapy.utils import RawPcapWriter

    from pyclassify.capture import read_all
    from tests.native.conftest import check, scapy_expect

    # Raw IP packets and Ethernet frames cannot share a pcap: give each link its own file.
    for linktype, group in (
        (1, [p for p in pkts if isinstance(p, Ether)]),
        (101, [p for p in pkts if not isinstance(p, Ether)]),
    ):
        if not group:
            continue
        buf = io.BytesIO()
        w = RawPcapWriter(buf, linktype=linktype)
        for p in group:
            w.write(bytes(p))
        w.flush()
        headers, _, cap = read_all(io.BytesIO(buf.getvalue()))
        assert len(headers) == len(group) and headers.dtype == HEADER_DTYPE
        for row, p in zip(headers, group):
            check(row, scapy_expect(p))
