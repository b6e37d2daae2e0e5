"""Shared helpers of the packet-path tests: an independent oracle built on scapy's dissection.

``scapy_expect(frame)`` says what the decoder should report for a scapy packet, from scapy's own
view of its layers (never from our decoder), as a dict of PacketHeader fields.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.inet import ICMP, IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, _ICMPv6  # noqa: E402
from scapy.layers.sctp import SCTP  # noqa: E402
from scapy.packet import Packet  # noqa: E402

from pyclassify.batch import FLAG_FIRST_FRAGMENT, FLAG_FRAGMENT, FLAG_HAS_PORTS, FLAG_ICMP_ERROR  # noqa: E402


def mapped(addr: str) -> list[int]:
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        return list(bytes(10) + b"\xff\xff" + ip.packed)
    return list(ip.packed)


def scapy_expect(pkt: Packet) -> dict[str, Any]:
    """Expected header fields of a well-formed, unfragmented-or-first-fragment scapy packet."""
    pkt = pkt.__class__(bytes(pkt))  # dissect what is on the wire
    ip = pkt.getlayer(IP) or pkt.getlayer(IPv6)
    assert ip is not None
    out: dict[str, Any] = {
        "ip_version": ip.version,
        "src_addr": mapped(ip.src),
        "dst_addr": mapped(ip.dst),
        "flags": 0,
    }
    l4: Packet | None = None
    if isinstance(ip, IP):
        out["protocol"] = ip.proto
        if ip.flags.MF or ip.frag:
            out["flags"] |= FLAG_FRAGMENT | (FLAG_FIRST_FRAGMENT if ip.frag == 0 else 0)
            out["frag_id"] = ip.id
        l4 = ip.payload
    else:
        frag = pkt.getlayer(IPv6ExtHdrFragment)
        layer: Packet = ip
        while layer.payload and layer.payload.__class__.__name__.startswith(("IPv6ExtHdr", "AH")):
            layer = layer.payload
        out["protocol"] = layer.nh
        if frag is not None:
            out["flags"] |= FLAG_FRAGMENT | (FLAG_FIRST_FRAGMENT if frag.offset == 0 else 0)
            out["frag_id"] = frag.id
        l4 = layer.payload
    if isinstance(l4, (TCP, UDP, SCTP)) or (l4 is not None and l4.__class__.__name__ == "UDPLite"):
        out["sport"], out["dport"] = l4.sport, l4.dport
        out["flags"] |= FLAG_HAS_PORTS
        if isinstance(l4, TCP):
            out["tcp_flags"] = int(l4.flags)
    elif isinstance(l4, ICMP) or isinstance(l4, _ICMPv6):
        out["icmp_type"], out["icmp_code"] = l4.type, l4.code
        if (out["ip_version"] == 4 and l4.type in (3, 4, 5, 11, 12)) or (out["ip_version"] == 6 and 1 <= l4.type <= 4):
            out["flags"] |= FLAG_ICMP_ERROR
    return out


def check(row: np.void, expected: dict[str, Any]) -> None:
    for k, v in expected.items():
        got = row[k].tolist() if k.endswith("_addr") else int(row[k])
        assert got == v, f"{k}: decoded {got}, expected {v}"
    if "sport" not in expected:
        assert not int(row["flags"]) & FLAG_HAS_PORTS
    assert int(row["error_kind"]) == 0


@pytest.fixture
def expect() -> Callable[[Packet], dict[str, Any]]:
    return scapy_expect


@pytest.fixture
def check_row() -> Callable[[np.void, dict[str, Any]], None]:
    return check
