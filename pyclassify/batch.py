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
