"""The header batch as numpy sees it.

One decoded packet is one 64-byte ``PacketHeader``; a batch is a contiguous array of them. The
same struct is defined in ``rust/core/src/batch.rs`` (``#[repr(C)]``, read by the engine) and
``native/header_batch.h`` (written by the Cython decoder); ``tests/test_batch_abi.py`` asserts that
the three agree field by field. Changing the layout is an ABI change: change all three together.

Integers are in host byte order; ``src_addr``/``dst_addr`` are 16 raw network-order bytes, IPv4
stored IPv4-mapped (``::ffff:a.b.c.d``).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "ERROR_KINDS",
    "ERROR_NAMES",
    "FLAGS",
    "FLAG_FIRST_FRAGMENT",
    "FLAG_FRAGMENT",
    "FLAG_HAS_PORTS",
    "FLAG_ICMP_ERROR",
    "FLAG_MALFORMED",
    "FLAG_TRUNCATED",
    "HEADER_DTYPE",
    "HEADER_SIZE",
    "new_batch",
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
)

#: Short names of the error kinds, indexed by value (``"truncated_link"``, ...; ``"none"`` at 0).
ERROR_NAMES: Final[tuple[str, ...]] = tuple(name[4:].lower() for name, _ in ERROR_KINDS)

#: Size of one header in bytes (the stride of a batch).
HEADER_SIZE: Final = 64

# (name, numpy type, offset): native byte order, explicit offsets, no implicit padding.
_FIELDS: Final[tuple[tuple[str, str | tuple[str, int], int], ...]] = (
    ("ts_ns", "u8", 0),
    ("src_addr", ("u1", 16), 8),
    ("dst_addr", ("u1", 16), 24),
    ("pkt_len", "u4", 40),
    ("ifindex", "u4", 44),
    ("sport", "u2", 48),
    ("dport", "u2", 50),
    ("ip_version", "u1", 52),
    ("protocol", "u1", 53),
    ("tcp_flags", "u1", 54),
    ("flags", "u1", 55),
    ("icmp_type", "u1", 56),
    ("icmp_code", "u1", 57),
    ("error_kind", "u1", 58),
    ("reserved", "u1", 59),
    ("frag_id", "u4", 60),
)

#: numpy structured dtype of one ``PacketHeader``.
HEADER_DTYPE: Final[np.dtype[np.void]] = np.dtype(
    {
        "names": [name for name, _, _ in _FIELDS],
        "formats": [fmt for _, fmt, _ in _FIELDS],
        "offsets": [offset for _, _, offset in _FIELDS],
        "itemsize": HEADER_SIZE,
    },
    align=False,
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE


def new_batch(n: int) -> npt.NDArray[np.void]:
    """A zeroed batch of ``n`` headers (C-contiguous, ready to hand to the engine)."""
    return np.zeros(n, HEADER_DTYPE)
