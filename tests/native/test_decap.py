"""Overlay tunnels in the decoder: frames built by scapy (VXLAN, Geneve, IP in IP, GRE; nested;
over IPv4 and IPv6) decode as the packet they carry, with the outer header beside it; tunnels
the decoder cannot read are flagged, never described by their outer header; and mutated
tunnel frames neither crash the decoder nor come out of the engine allowed without their inner
packet judged (a property test)."""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scapy.contrib.geneve import GENEVE  # noqa: F401  # binds Geneve to UDP 6081 for the packets built here
from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, GRE, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw
from scapy.utils import RawPcapWriter

from pyclassify import _native
from pyclassify import batch as B
from pyclassify.batch import OUTER_DTYPE, new_batch
from pyclassify.capture import QUOTE_DTYPE, QUOTE_HAS_PORTS, QUOTE_VALID, open_capture
from pyclassify.engine import PACKET_NOT_IP
from pyclassify.tunnels import DEFAULT_TUNNELS, ENCAP_NAMES, TunnelPorts, outer_json
from tests.native.conftest import check, mapped, scapy_expect

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
IETH = Ether(src="02:00:00:00:aa:01", dst="02:00:00:00:aa:02")  # the pods' side of the tunnel
UNDER4 = IP(src="192.168.77.1", dst="192.168.77.2")  # the nodes
UNDER6 = IPv6(src="fd00:77::1", dst="fd00:77::2")
UNDER4_GRE = IP(src="192.168.77.1", dst="192.168.77.2", proto=47)  # for GRE headers built by hand
INNER4 = IP(src="10.244.1.10", dst="10.244.2.20") / TCP(sport=40000, dport=5432, flags="S")
INNER6 = IPv6(src="fd00:244:1::a", dst="fd00:244:2::14") / UDP(sport=5353, dport=53) / b"q"
TUNNEL_PORTS = set(DEFAULT_TUNNELS.vxlan) | set(DEFAULT_TUNNELS.geneve)


def decode(
    frames: list[bytes], decoder: Any = None, linktype: int = 1, wire: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = new_batch(len(frames))
    q = np.zeros(len(frames), QUOTE_DTYPE)
    o = np.zeros(len(frames), OUTER_DTYPE)
    (decoder or _native.Decoder()).decode(frames, h, q, linktype, wire_lengths=wire, outers=o)
    return h, q, o


def geneve(vni: int, proto: int, options: bytes = b"", version: int = 0, critical: bool = False) -> bytes:
    """A Geneve header (RFC 8926) with ``options`` (a multiple of 4 bytes) after it."""
    first = (version << 6) | (len(options) // 4)
    return struct.pack(">BBHI", first, 0x40 if critical else 0, proto, vni << 8) + options


def gre(proto: int, flags: int = 0, fields: bytes = b"") -> bytes:
    return struct.pack(">HH", flags, proto) + fields


def test_encap_names() -> None:
    assert ENCAP_NAMES == ("none", "vxlan", "geneve", "ipip", "ip6ip", "gre")


# (name, frame, encap, outer fields expected beyond addresses and protocol, inner packet)
DECAPSULATED = [
    (
        "vxlan",
        ETH / UNDER4 / UDP(sport=51000, dport=4789) / VXLAN(vni=4096) / IETH / INNER4,
        B.ENCAP_VXLAN,
        {"sport": 51000, "dport": 4789, "vni": 4096, "payload_type": 0x6558},
        INNER4,
    ),
    (
        "vxlan on Linux's port, IPv6 over IPv6",
        ETH / UNDER6 / UDP(sport=3, dport=8472) / VXLAN(vni=1) / IETH / INNER6,
        B.ENCAP_VXLAN,
        {"sport": 3, "dport": 8472, "vni": 1},
        INNER6,
    ),
    (
        "vxlan, a VLAN tag inside",
        ETH / UNDER4 / UDP(dport=4789) / VXLAN(vni=7) / IETH / Dot1Q(vlan=5) / INNER4,
        B.ENCAP_VXLAN,
        {"vni": 7},
        INNER4,
    ),
    (
        "geneve, Ethernet",
        ETH / UNDER4 / UDP(sport=9, dport=6081) / Raw(geneve(2, 0x6558)) / IETH / INNER4,
        B.ENCAP_GENEVE,
        {"sport": 9, "dport": 6081, "vni": 2, "payload_type": 0x6558},
        INNER4,
    ),
    (
        "geneve, options skipped",
        ETH / UNDER4 / UDP(dport=6081) / Raw(geneve(3, 0x6558, bytes(12))) / IETH / INNER6,
        B.ENCAP_GENEVE,
        {"vni": 3},
        INNER6,
    ),
    (
        "geneve, IPv4 inside",
        ETH / UNDER6 / UDP(dport=6081) / Raw(geneve(4, 0x0800)) / INNER4,
        B.ENCAP_GENEVE,
        {"vni": 4, "payload_type": 0x0800},
        INNER4,
    ),
    ("ipip", ETH / UNDER4 / INNER4, B.ENCAP_IPIP, {"payload_type": 0x0800}, INNER4),
    ("ipv4 in ipv6", ETH / UNDER6 / INNER4, B.ENCAP_IPIP, {}, INNER4),
    ("ipv6 in ipv4 (sit)", ETH / UNDER4 / INNER6, B.ENCAP_IP6IP, {"payload_type": 0x86DD}, INNER6),
    ("ipv6 in ipv6", ETH / UNDER6 / INNER6, B.ENCAP_IP6IP, {}, INNER6),
    ("gre, IPv4", ETH / UNDER4 / GRE() / INNER4, B.ENCAP_GRE, {"payload_type": 0x0800, "flags": 0}, INNER4),
    (
        "gre, key, sequence and checksum, IPv6",
        ETH / UNDER4 / GRE(chksum_present=1, key_present=1, key=77, seqnum_present=1, sequence_number=5) / INNER6,
        B.ENCAP_GRE,
        {"vni": 77, "payload_type": 0x86DD},
        INNER6,
    ),
    (
        "gretap (transparent Ethernet bridging)",
        ETH / UNDER4 / GRE(proto=0x6558) / IETH / INNER4,
        B.ENCAP_GRE,
        {"payload_type": 0x6558},
        INNER4,
    ),
    ("ip6gre", ETH / UNDER6 / GRE() / INNER4, B.ENCAP_GRE, {}, INNER4),
    (
        "ipip inside vxlan",
        ETH / UNDER4 / UDP(dport=4789) / VXLAN(vni=9) / IETH / IP(src="10.9.0.1", dst="10.9.0.2") / INNER4,
        B.ENCAP_VXLAN,
        {"vni": 9, "depth": 2},
        INNER4,
    ),
    (
        "three tunnels: the bound",
        ETH / UNDER4 / IP(src="10.9.0.1", dst="10.9.0.2") / GRE() / IP() / INNER4,
        B.ENCAP_IPIP,
        {"depth": 3},
        INNER4,
    ),
]


@pytest.mark.parametrize(
    ("frame", "encap", "outer", "inner"), [c[1:] for c in DECAPSULATED], ids=[c[0] for c in DECAPSULATED]
)
def test_inner_packet_is_decoded_outer_header_kept(
    frame: Packet, encap: int, outer: dict[str, int], inner: Packet
) -> None:
    h, _, o = decode([bytes(frame)])
    row = h[0]
    check(row, scapy_expect(inner))  # the inner packet, field by field, as scapy dissects it
    assert int(row["encap"]) == encap
    assert int(row["pkt_len"]) == len(frame), "the length on the wire is the frame's"
    under = frame.payload  # the outermost IP header
    udp = under.payload if isinstance(under.payload, UDP) else None
    expected = {
        "src_addr": mapped(under.src),
        "dst_addr": mapped(under.dst),
        "ip_version": under.version,
        "protocol": under.proto if under.version == 4 else under.nh,
        "encap": encap,
        "depth": 1,
        "flags": B.OUTER_HAS_KEY if "vni" in outer else 0,
        "sport": udp.sport if udp else 0,
        "dport": udp.dport if udp else 0,
        **outer,
    }
    for k, v in expected.items():
        got = o[0][k].tolist() if k.endswith("_addr") else int(o[0][k])
        assert got == v, f"outer {k}: {got}, expected {v}"


def test_raw_ip_link_and_icmp_error_inside_a_tunnel() -> None:
    quoted = IP(src="10.244.2.20", dst="10.244.1.10") / UDP(sport=53, dport=40000)
    inner = IP(src="10.244.1.1", dst="10.244.2.20") / ICMP(type=3, code=3) / bytes(quoted)[:28]
    h, q, o = decode([bytes(UNDER4 / UDP(dport=4789) / VXLAN(vni=1) / IETH / inner)], linktype=101)
    assert int(h[0]["encap"]) == B.ENCAP_VXLAN and h[0]["flags"] & B.FLAG_ICMP_ERROR and h[0]["icmp_type"] == 3
    assert q[0]["flags"] == QUOTE_VALID | QUOTE_HAS_PORTS and (q[0]["sport"], q[0]["dport"]) == (53, 40000)
    assert o[0]["src_addr"].tolist() == mapped("192.168.77.1")


VXLAN4 = bytes(ETH / UNDER4 / UDP(dport=4789) / VXLAN(vni=1) / IETH / INNER4)
ETH_UDP = 14 + 20 + 8  # where a VXLAN/Geneve header starts in these frames
INNER_IP = ETH_UDP + 8 + 14  # where the inner IP header starts in VXLAN4


def vxlan_cut(n: int) -> bytes:
    return VXLAN4[:n]


def inner_total_length(total: int) -> bytes:
    return VXLAN4[: INNER_IP + 2] + struct.pack(">H", total) + VXLAN4[INNER_IP + 4 :]


# (name, frame, encap, error kind, wire length or None)
NOT_JUDGED = [
    ("vxlan header cut short", vxlan_cut(ETH_UDP + 5), B.ENCAP_VXLAN, B.ERR_TRUNCATED_TUNNEL, len(VXLAN4)),
    (
        "vxlan without its I flag",
        bytes(ETH / UNDER4 / UDP(dport=4789) / VXLAN(flags=0, vni=1) / IETH / INNER4),
        B.ENCAP_VXLAN,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    ("vxlan, inner Ethernet cut", vxlan_cut(ETH_UDP + 8 + 10), B.ENCAP_VXLAN, B.ERR_TRUNCATED_LINK, len(VXLAN4)),
    ("vxlan, inner IP header cut", vxlan_cut(INNER_IP + 12), B.ENCAP_VXLAN, B.ERR_TRUNCATED_IP, len(VXLAN4)),
    (
        "vxlan, inner packet cut by the snap length",
        vxlan_cut(INNER_IP + 20 + 6),
        B.ENCAP_VXLAN,
        B.ERR_TRUNCATED_L4,
        len(VXLAN4),
    ),
    (
        "vxlan, inner IP longer than the tunnel carries",
        inner_total_length(1400),
        B.ENCAP_VXLAN,
        B.ERR_BAD_TOTAL_LENGTH,
        None,
    ),
    (
        "vxlan carrying ARP",
        bytes(ETH / UNDER4 / UDP(dport=4789) / VXLAN(vni=1) / IETH / ARP()),
        B.ENCAP_VXLAN,
        B.ERR_UNKNOWN_ETHERTYPE,
        None,
    ),
    (
        "geneve version 1",
        bytes(ETH / UNDER4 / UDP(dport=6081) / Raw(geneve(1, 0x6558, version=1)) / IETH / INNER4),
        B.ENCAP_GENEVE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "geneve with critical options",
        bytes(ETH / UNDER4 / UDP(dport=6081) / Raw(geneve(1, 0x6558, bytes(8), critical=True)) / IETH / INNER4),
        B.ENCAP_GENEVE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "geneve options past the end",
        bytes(ETH / UNDER4 / UDP(dport=6081) / Raw(geneve(1, 0x6558, bytes(8))[:-4])),
        B.ENCAP_GENEVE,
        B.ERR_TRUNCATED_TUNNEL,
        None,
    ),
    (
        "geneve carrying MPLS",
        bytes(ETH / UNDER4 / UDP(dport=6081) / Raw(geneve(1, 0x8847)) / (b"\0" * 40)),
        B.ENCAP_GENEVE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "gre version 1 (PPTP)",
        bytes(ETH / UNDER4_GRE / Raw(gre(0x880B, 0x2001, bytes(4))) / (b"\0" * 40)),
        B.ENCAP_GRE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "gre with routing",
        bytes(ETH / UNDER4_GRE / Raw(gre(0x0800, 0x4000, bytes(8))) / INNER4),
        B.ENCAP_GRE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "gre carrying ERSPAN",
        bytes(ETH / UNDER4_GRE / Raw(gre(0x88BE, 0x1000, bytes(4))) / (b"\0" * 40)),
        B.ENCAP_GRE,
        B.ERR_TUNNEL_UNSUPPORTED,
        None,
    ),
    (
        "gre key cut short",
        bytes(ETH / UNDER4_GRE / Raw(gre(0x0800, 0x2000, b"\0\0"))),
        B.ENCAP_GRE,
        B.ERR_TRUNCATED_TUNNEL,
        None,
    ),
    ("gre header cut short", bytes(ETH / UNDER4_GRE / Raw(b"\0\0")), B.ENCAP_GRE, B.ERR_TRUNCATED_TUNNEL, None),
    (
        "ipip carrying IPv6",
        bytes(ETH / IP(src="192.168.77.1", dst="192.168.77.2", proto=4) / INNER6),
        B.ENCAP_IPIP,
        B.ERR_BAD_IP_VERSION,
        None,
    ),
    (
        "ipip, nothing inside",
        bytes(ETH / IP(src="192.168.77.1", dst="192.168.77.2", proto=4)),
        B.ENCAP_IPIP,
        B.ERR_TRUNCATED_IP,
        None,
    ),
    (
        "four tunnels: beyond the bound",
        bytes(ETH / UNDER4 / IP() / IP() / IP() / INNER4),
        B.ENCAP_IPIP,
        B.ERR_TUNNEL_TOO_DEEP,
        None,
    ),
    (
        "ipip fragment",
        bytes(ETH / fragment(UNDER4 / IP() / TCP() / (b"x" * 100), fragsize=64)[0]),
        B.ENCAP_IPIP,
        B.ERR_TUNNEL_FRAGMENT,
        None,
    ),
    (
        "vxlan fragment",
        bytes(ETH / fragment(UNDER4 / UDP(dport=4789) / VXLAN() / IETH / INNER4 / (b"x" * 100), fragsize=64)[0]),
        B.ENCAP_VXLAN,
        B.ERR_TUNNEL_FRAGMENT,
        None,
    ),
]


@pytest.mark.parametrize(
    ("frame", "encap", "kind", "wire"), [c[1:] for c in NOT_JUDGED], ids=[c[0] for c in NOT_JUDGED]
)
def test_unreadable_tunnels_are_flagged_never_judged_by_their_outer_header(
    frame: bytes, encap: int, kind: int, wire: int | None
) -> None:
    h, _, o = decode([frame], wire=[wire] if wire else None)
    row = h[0]
    assert int(row["encap"]) == encap
    assert int(row["error_kind"]) == kind, B.ERROR_NAMES[int(row["error_kind"])]
    assert row["flags"] & B.FLAG_MALFORMED, "not judged: the engine denies it"
    assert bool(row["flags"] & B.FLAG_TRUNCATED) == (
        kind in (B.ERR_TRUNCATED_LINK, B.ERR_TRUNCATED_IP, B.ERR_TRUNCATED_L4, B.ERR_TRUNCATED_TUNNEL)
    )
    assert not row["flags"] & B.FLAG_HAS_PORTS
    assert o[0]["src_addr"].tolist() == mapped("192.168.77.1") and int(o[0]["encap"]) == encap


def test_later_fragments_of_a_tunnel_packet_are_not_judged_either() -> None:
    frags = [
        bytes(ETH / f)
        for f in fragment(UNDER4 / UDP(sport=7, dport=4789) / VXLAN() / IETH / INNER4 / (b"x" * 300), fragsize=128)
    ]
    ipip = [bytes(ETH / f) for f in fragment(UNDER4 / IP() / TCP() / (b"x" * 300), fragsize=128)]
    h, _, o = decode(frags + ipip)
    assert (h["error_kind"] == B.ERR_TUNNEL_FRAGMENT).all(), h["error_kind"]
    assert h["encap"].tolist() == [B.ENCAP_VXLAN] * len(frags) + [B.ENCAP_IPIP] * len(ipip)
    assert o["dport"][: len(frags)].tolist() == [4789] * len(frags), "later fragments: ports of their first"


def test_without_decapsulation_tunnels_are_judged_by_their_outer_header() -> None:
    frame = bytes(ETH / UNDER4 / UDP(sport=51000, dport=4789) / VXLAN(vni=1) / IETH / INNER4)
    h, _, _ = decode([frame, bytes(ETH / UNDER4 / INNER4)], _native.Decoder(decapsulate=False))
    assert h["encap"].tolist() == [0, 0] and h["protocol"].tolist() == [17, 4]
    assert h[0]["dport"] == 4789 and h[0]["src_addr"].tolist() == mapped("192.168.77.1")
    assert (h["error_kind"] == 0).all()


def test_vxlan_and_geneve_ports_are_the_ones_given() -> None:
    def on(port: int) -> bytes:
        return bytes(ETH / UNDER4 / UDP(dport=port) / VXLAN(vni=1) / IETH / INNER4)

    dec = _native.Decoder(vxlan_ports=(9999,), geneve_ports=(6082,))
    h, _, _ = decode([on(4789), on(9999), bytes(ETH / UNDER4 / UDP(dport=6082) / Raw(geneve(5, 0x0800)) / INNER4)], dec)
    assert h["encap"].tolist() == [0, B.ENCAP_VXLAN, B.ENCAP_GENEVE]
    assert h[0]["dport"] == 4789 and h[1]["dport"] == 5432 and h[2]["dport"] == 5432
    for bad in ({"vxlan_ports": (0,)}, {"geneve_ports": (70000,)}, {"vxlan_ports": tuple(range(1, 10))}):
        with pytest.raises(ValueError):
            _native.Decoder(**bad)
    with pytest.raises(ValueError, match="both VXLAN and Geneve"):
        TunnelPorts(vxlan=(6081,))
    with pytest.raises(ValueError, match="not a UDP port"):
        TunnelPorts(geneve=(0,))


def test_payloads_are_found_inside_tunnels() -> None:
    """http rules and DNS learning read the inner packet's payload, as the header describes it."""
    dns = IPv6(src="fd00::53", dst="fd00::a") / UDP(sport=53, dport=5353) / b"answer"
    frames = [
        bytes(ETH / UNDER4 / UDP(dport=4789) / VXLAN(vni=1) / IETH / dns),
        bytes(ETH / UNDER4 / GRE(key_present=1, key=3) / IP() / TCP(seq=1000) / b"GET /"),
        bytes(ETH / UNDER4 / UDP(dport=9999) / VXLAN(vni=1) / IETH / dns),
    ]
    data = b"".join(frames)
    offsets = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.uint64)
    caplens = np.array([len(f) for f in frames], np.uint32)
    linktypes = np.ones(3, np.uint32)
    idx = np.arange(3, dtype=np.int64)
    spans = _native.payload_spans(data, offsets, caplens, linktypes, idx)
    assert data[spans[0, 0] : spans[0, 1]] == b"answer" and spans[0, 2] == 0
    assert data[spans[1, 0] : spans[1, 1]] == b"GET /" and spans[1, 2] == 1000
    assert data[spans[2, 0] : spans[2, 1]] != b"answer", "9999 is no tunnel port by default: the outer payload"
    spans = _native.payload_spans(data, offsets, caplens, linktypes, idx, vxlan_ports=(9999,))
    assert data[spans[2, 0] : spans[2, 1]] == b"answer"
    spans = _native.payload_spans(data, offsets, caplens, linktypes, idx, decapsulate=False)
    assert spans[1].tolist() == [0, 0, 0], "GRE has no payload of its own"


def test_capture_batches_carry_outer_headers() -> None:
    unread = [c for c in NOT_JUDGED if c[4] is None]  # a capture's wire length is the frame's here
    frames = [bytes(f) for _, f, *_ in DECAPSULATED] + [frame for _, frame, *_ in unread]
    frames.append(bytes(ETH / INNER4))
    buf = io.BytesIO()
    w = RawPcapWriter(buf, linktype=1)
    for f in frames:
        w.write(f)
    w.flush()
    with open_capture(io.BytesIO(buf.getvalue())) as cap:
        batch = next(iter(cap))
        counts = cap.counts
    h, o = batch.headers, batch.outers
    assert o is not None and len(o) == len(h) == len(frames)
    n = len(DECAPSULATED)
    assert (h["encap"][:n] == [c[2] for c in DECAPSULATED]).all() and (h["error_kind"][:n] == 0).all()
    assert (h["encap"][n:-1] != 0).all() and (h["flags"][n:-1] & B.FLAG_MALFORMED).all()
    assert h["encap"][-1] == 0
    assert counts["tunnel_unsupported"] == sum(1 for c in unread if c[3] == B.ERR_TUNNEL_UNSUPPORTED)
    doc = outer_json(o[0])
    assert doc == {
        "src": "192.168.77.1",
        "dst": "192.168.77.2",
        "proto": "UDP",
        "sport": 51000,
        "dport": 4789,
        "encap": "vxlan",
        "vni": 4096,
    }
    gre_key = next(i for i, c in enumerate(DECAPSULATED) if c[0].startswith("gre, key"))
    assert outer_json(o[gre_key]) == {
        "src": "192.168.77.1",
        "dst": "192.168.77.2",
        "proto": "GRE",
        "sport": None,
        "dport": None,
        "encap": "gre",
        "key": 77,
        "payload_type": "0x86dd",
    }
    nested = next(i for i, c in enumerate(DECAPSULATED) if c[0] == "ipip inside vxlan")
    assert outer_json(o[nested])["depth"] == 2


# --- property: mutated tunnel frames never crash, never pass without their inner packet judged --


def _allow_all_engine() -> Any:
    from pyclassify.engine import NativeEngine
    from pyclassify.inventory import Inventory
    from pyclassify.ir import PolicySet

    return NativeEngine(PolicySet.build([]), Inventory())


ENGINE = None


@st.composite
def tunnel_frames(draw: st.DrawFn) -> tuple[bytes, int]:
    """A tunnel frame, then mutated: bytes overwritten anywhere past the Ethernet header, cut
    short, or a wire length that disagrees; with the wire length to decode it with."""
    inner = draw(
        st.sampled_from(
            [
                INNER4,
                INNER6,
                IP(src="10.1.0.1", dst="10.1.0.2") / UDP(sport=1, dport=2) / b"xy",
                IP(src="10.1.0.1", dst="10.1.0.2") / ICMP(type=8),
            ]
        )
    )
    under = draw(st.sampled_from([UNDER4, UNDER6]))
    kind = draw(st.sampled_from(["vxlan", "geneve", "ipip", "gre", "gretap", "nested"]))
    if kind == "vxlan":
        vni = draw(st.integers(0, 2**24 - 1))
        pkt: Packet = under / UDP(sport=draw(st.integers(1, 65535)), dport=4789) / VXLAN(vni=vni) / IETH / inner
    elif kind == "geneve":
        opts = bytes(4 * draw(st.integers(0, 3)))
        pkt = under / UDP(dport=6081) / Raw(geneve(draw(st.integers(0, 2**24 - 1)), 0x6558, opts)) / IETH / inner
    elif kind == "ipip":
        pkt = under / inner
    elif kind == "gre":
        pkt = under / GRE(key_present=draw(st.integers(0, 1)), key=5) / inner
    elif kind == "gretap":
        pkt = under / GRE(proto=0x6558) / IETH / inner
    else:
        pkt = under / UDP(dport=8472) / VXLAN(vni=1) / IETH / IP(src="10.9.0.1", dst="10.9.0.2") / GRE() / inner
    frame = bytearray(bytes(ETH / pkt))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(14, len(frame) - 1))
        frame[at] = draw(st.integers(0, 255))
    cut = draw(st.integers(14, len(frame)))
    wire = draw(st.sampled_from([len(frame), cut, cut + draw(st.integers(0, 64))]))
    return bytes(frame[:cut]), max(wire, cut)


ETH_GRETAP_V6_NOT_IP = bytes.fromhex(
    "020000000002020000000001"
    "86dd"
    "60000000"
    "003a"
    "2f40"
    "fd000077000000000000000000000001"
    "fd000077000000000000000000000002"
    "10006558"
    "02000000"
    "aa0202000000aa0108004500"
    "0028"
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tunnel_frames(), min_size=1, max_size=16))
@example([(ETH_GRETAP_V6_NOT_IP, 112)])  # GRE-tap over IPv6 carrying a frame of ethertype 0x0028
def test_mutated_tunnel_frames_never_pass_unjudged(frames: list[tuple[bytes, int]]) -> None:
    global ENGINE
    if ENGINE is None:
        ENGINE = _allow_all_engine()
    h, q, _ = decode([f for f, _ in frames], wire=[w for _, w in frames])
    errors = h["error_kind"]
    assert (errors < len(B.ERROR_KINDS)).all() and (h["encap"] < len(B.ENCAP_KINDS)).all()
    verdicts = ENGINE.judge(h, quotes=q)  # no policy: whatever is judged is allowed
    for row, v in zip(h, verdicts):
        malformed = bool(row["flags"] & B.FLAG_MALFORMED)
        if int(row["encap"]) == 0 and not malformed:
            # described by its own header: then that header is no tunnel's
            assert int(row["protocol"]) not in (4, 41, 47)
            assert not (
                int(row["protocol"]) == 17 and row["flags"] & B.FLAG_HAS_PORTS and int(row["dport"]) in TUNNEL_PORTS
            )
        not_ip = int(row["error_kind"]) == B.ERR_UNKNOWN_ETHERTYPE
        if v["allow"] and not_ip:
            # a tunnel carrying ARP or another frame that is not IP passes, as such a frame
            # outside a tunnel does; it is never described as judged
            assert int(v["reason"]) == PACKET_NOT_IP
            continue
        if v["allow"]:
            assert not malformed, "allowed without being decoded"
            assert int(row["error_kind"]) in (B.ERR_NONE, B.ERR_FRAGMENT_UNMATCHED)
        if malformed:
            assert not v["allow"]
