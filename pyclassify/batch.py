"""The records shared with the engine and the decoder, as numpy sees them.

One decoded packet is one 64-byte ``PacketHeader``; a batch is a contiguous array of them. Every
shared record (the header, the quoted flow of an ICMP error, the verdict and its side verdicts,
the revoked flow) is defined once, in Rust (``rust/core/src/abi/`` lists them); the C headers
under ``native/`` are generated from those definitions, and the numpy dtypes here are built at
import from the layouts ``pyclassify._engine.record_layouts()`` exports (names, offsets, sizes,
types). ``tests/test_batch_abi.py`` holds the Rust, C and numpy views to each other field by field.

Integers are in host byte order; ``src_addr``/``dst_addr`` are 16 raw network-order bytes, IPv4
stored IPv4-mapped (``::ffff:a.b.c.d``).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from pyclassify import _engine

__all__ = [
    "ENCAP_KINDS",
    "ERROR_KINDS",
    "ERROR_NAMES",
    "FLAGS",
    "FLAG_FIRST_FRAGMENT",
    "FLAG_FRAGMENT",
    "FLAG_HAS_PORTS",
    "FLAG_ICMP_ERROR",
    "FLAG_MALFORMED",
    "FLAG_TRUNCATED",
    "FLOW_COUNTS_DTYPE",
    "HEADER_DTYPE",
    "HEADER_SIZE",
    "OUTER_DTYPE",
    "QUOTE_DTYPE",
    "REVOKED_DTYPE",
    "SIDE_DTYPE",
    "VERDICT_DTYPE",
    "address_text",
    "new_batch",
    "record_dtype",
]

#: Bits of the ``flags`` field.
FLAG_FRAGMENT: Final = 1  # a fragment (IPv4 MF/offset or IPv6 Fragment header)
FLAG_FIRST_FRAGMENT: Final = 2  # the first fragment: the only one with L4 ports
FLAG_TRUNCATED: Final = 4  # ended before a header it announced (snaplen, short read)
FLAG_MALFORMED: Final = 8  # could not be decoded; ``error_kind`` says why
FLAG_ICMP_ERROR: Final = 16  # ICMP error quoting another flow
FLAG_HAS_PORTS: Final = 32  # ``sport``/``dport`` are meaningful

#: Every flag as ``(name, value)``, in bit order.
FLAGS: Final[tuple[tuple[str, int], ...]] = (
    ("FLAG_FRAGMENT", FLAG_FRAGMENT),
    ("FLAG_FIRST_FRAGMENT", FLAG_FIRST_FRAGMENT),
    ("FLAG_TRUNCATED", FLAG_TRUNCATED),
    ("FLAG_MALFORMED", FLAG_MALFORMED),
    ("FLAG_ICMP_ERROR", FLAG_ICMP_ERROR),
    ("FLAG_HAS_PORTS", FLAG_HAS_PORTS),
)

#: Values of the ``error_kind`` field (``enum pc_error_kind`` in native/header_batch.h): why a
#: packet was not (fully) decoded. Every kind but ``ERR_FRAGMENT_UNMATCHED`` also sets
#: ``FLAG_MALFORMED``; the ``ERR_TRUNCATED_*`` kinds also set ``FLAG_TRUNCATED``.
ERR_NONE: Final = 0
ERR_TRUNCATED_LINK: Final = 1  # shorter than its link-layer header
ERR_TRUNCATED_IP: Final = 2  # shorter than its IP header or an IPv6 extension header
ERR_TRUNCATED_L4: Final = 3  # shorter than its TCP/UDP/UDP-Lite/SCTP/ICMP header
ERR_BAD_IP_VERSION: Final = 4  # version nibble not 4/6, or not the link type's
ERR_BAD_IHL: Final = 5  # IPv4 header length below 20 bytes
ERR_BAD_TOTAL_LENGTH: Final = 6  # IP length shorter than its header or longer than the frame
ERR_UNKNOWN_ETHERTYPE: Final = 7  # not IP (ARP, LLDP, unknown SLL protocol or null family)
ERR_UNKNOWN_LINKTYPE: Final = 8  # a link type the decoder does not know
ERR_TOO_MANY_EXT_HEADERS: Final = 9  # IPv6 extension header chain longer than the bound
ERR_TOO_MANY_VLAN_TAGS: Final = 10  # more 802.1Q/802.1ad tags than the bound
ERR_BAD_L4_HEADER: Final = 11  # TCP data offset below 5, UDP length below 8
ERR_FRAGMENT_OVERLAP: Final = 12  # later fragment overlapping the L4 header (RFC 1858)
ERR_FRAGMENT_UNMATCHED: Final = 13  # later fragment whose first fragment is unknown: no ports
ERR_TRUNCATED_TUNNEL: Final = 14  # shorter than its tunnel header (VXLAN, Geneve, GRE)
ERR_TUNNEL_UNSUPPORTED: Final = 15  # a tunnel header it cannot read (GRE/Geneve version, payload, ...)
ERR_TUNNEL_TOO_DEEP: Final = 16  # tunnels nested deeper than the bound
ERR_TUNNEL_FRAGMENT: Final = 17  # a fragment of a tunnel packet: its inner packet is not whole

#: Every error kind as ``(name, value)`` in value order (``error_kind`` indexes it).
ERROR_KINDS: Final[tuple[tuple[str, int], ...]] = (
    ("ERR_NONE", ERR_NONE),
    ("ERR_TRUNCATED_LINK", ERR_TRUNCATED_LINK),
    ("ERR_TRUNCATED_IP", ERR_TRUNCATED_IP),
    ("ERR_TRUNCATED_L4", ERR_TRUNCATED_L4),
    ("ERR_BAD_IP_VERSION", ERR_BAD_IP_VERSION),
    ("ERR_BAD_IHL", ERR_BAD_IHL),
    ("ERR_BAD_TOTAL_LENGTH", ERR_BAD_TOTAL_LENGTH),
    ("ERR_UNKNOWN_ETHERTYPE", ERR_UNKNOWN_ETHERTYPE),
    ("ERR_UNKNOWN_LINKTYPE", ERR_UNKNOWN_LINKTYPE),
    ("ERR_TOO_MANY_EXT_HEADERS", ERR_TOO_MANY_EXT_HEADERS),
    ("ERR_TOO_MANY_VLAN_TAGS", ERR_TOO_MANY_VLAN_TAGS),
    ("ERR_BAD_L4_HEADER", ERR_BAD_L4_HEADER),
    ("ERR_FRAGMENT_OVERLAP", ERR_FRAGMENT_OVERLAP),
    ("ERR_FRAGMENT_UNMATCHED", ERR_FRAGMENT_UNMATCHED),
    ("ERR_TRUNCATED_TUNNEL", ERR_TRUNCATED_TUNNEL),
    ("ERR_TUNNEL_UNSUPPORTED", ERR_TUNNEL_UNSUPPORTED),
    ("ERR_TUNNEL_TOO_DEEP", ERR_TUNNEL_TOO_DEEP),
    ("ERR_TUNNEL_FRAGMENT", ERR_TUNNEL_FRAGMENT),
)

#: Short names of the error kinds, indexed by value (``"truncated_link"``, ...; ``"none"`` at 0).
ERROR_NAMES: Final[tuple[str, ...]] = tuple(name[4:].lower() for name, _ in ERROR_KINDS)

#: Values of the ``encap`` field: the tunnel a packet was found in (``pyclassify.tunnels``).
ENCAP_NONE: Final = 0
ENCAP_VXLAN: Final = 1  # Ethernet in UDP (RFC 7348)
ENCAP_GENEVE: Final = 2  # Ethernet or IP in UDP (RFC 8926)
ENCAP_IPIP: Final = 3  # IPv4 in IP (protocol 4)
ENCAP_IP6IP: Final = 4  # IPv6 in IP (protocol 41)
ENCAP_GRE: Final = 5  # GRE (protocol 47): Ethernet, IPv4 or IPv6
#: Every tunnel kind as ``(name, value)`` in value order (``encap`` indexes it).
ENCAP_KINDS: Final[tuple[tuple[str, int], ...]] = (
    ("ENCAP_NONE", ENCAP_NONE),
    ("ENCAP_VXLAN", ENCAP_VXLAN),
    ("ENCAP_GENEVE", ENCAP_GENEVE),
    ("ENCAP_IPIP", ENCAP_IPIP),
    ("ENCAP_IP6IP", ENCAP_IP6IP),
    ("ENCAP_GRE", ENCAP_GRE),
)
#: ``OUTER_DTYPE``'s ``flags``: ``vni`` holds the VXLAN/Geneve VNI or the GRE key.
OUTER_HAS_KEY: Final = 1

_SCALARS: Final[dict[str, str]] = {"u8": "u1", "u16": "u2", "u32": "u4", "u64": "u8", "i32": "i4"}
_LAYOUTS: Final = dict(_engine.record_layouts())
_DTYPES: dict[str, np.dtype[np.void]] = {}


def record_dtype(name: str) -> np.dtype[np.void]:
    """The numpy structured dtype of the shared record ``name`` (its Rust name, e.g.
    ``"PacketVerdict"``), built from the layout the engine exports: native byte order, the
    engine's offsets, no implicit padding."""
    dtype = _DTYPES.get(name)
    if dtype is not None:
        return dtype
    _c_name, size, _align, fields = _LAYOUTS[name]
    formats: list[Any] = []
    for _field, _offset, _size, ty in fields:
        if ty in _SCALARS:
            formats.append(_SCALARS[ty])
        elif ty.startswith("u8[") and ty.endswith("]"):
            formats.append(("u1", int(ty[3:-1])))
        else:
            formats.append(record_dtype(ty))
    dtype = np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": formats,
            "offsets": [f[1] for f in fields],
            "itemsize": size,
        },
        align=False,
    )
    for field, offset, fsize, _ in fields:
        got = dtype.fields[field]  # type: ignore[index]
        assert (got[1], got[0].itemsize) == (offset, fsize), f"{name}.{field}"
    _DTYPES[name] = dtype
    return dtype


#: numpy structured dtype of one ``PacketHeader``.
HEADER_DTYPE: Final[np.dtype[np.void]] = record_dtype("PacketHeader")
#: Size of one header in bytes (the stride of a batch).
HEADER_SIZE: Final[int] = HEADER_DTYPE.itemsize
assert HEADER_SIZE == _engine.HEADER_SIZE == 64
#: The outer header of a packet found inside a tunnel, one per header in a parallel array
#: (``OuterHeader``), meaningful where the header's ``encap`` is set.
OUTER_DTYPE: Final[np.dtype[np.void]] = record_dtype("OuterHeader")
#: What a flow record counted, parallel to the header it is judged as (``FlowCounts``).
FLOW_COUNTS_DTYPE: Final[np.dtype[np.void]] = record_dtype("FlowCounts")
#: The flow an ICMP error quotes, one per header in a parallel array (``QuotedTuple``).
QUOTE_DTYPE: Final[np.dtype[np.void]] = record_dtype("QuotedTuple")
#: One direction's decision in a verdict record (``SideVerdict``): source_kind 0 none, 1 policy,
#: 2 profile; tier/source/rule -1 when absent; reason indexes ``pyclassify.engine.REASONS``.
SIDE_DTYPE: Final[np.dtype[np.void]] = record_dtype("SideVerdict")
#: The engine's per-packet output record (``PacketVerdict``).
VERDICT_DTYPE: Final[np.dtype[np.void]] = record_dtype("PacketVerdict")
#: A connection revoked by revalidation (``RevokedFlow``).
REVOKED_DTYPE: Final[np.dtype[np.void]] = record_dtype("RevokedFlow")


def address_text(raw: Any, version: int) -> str:
    """A record's 16-byte address field (network order, IPv4 mapped) as text."""
    b = bytes(raw)
    return str(ipaddress.IPv4Address(b[12:]) if version == 4 else ipaddress.IPv6Address(b))


def new_batch(n: int) -> npt.NDArray[np.void]:
    """A zeroed batch of ``n`` headers (C-contiguous, ready to hand to the engine)."""
    return np.zeros(n, HEADER_DTYPE)
