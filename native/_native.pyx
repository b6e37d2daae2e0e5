# cython: language_level=3
"""Packet I/O shim of pyclassify (Cython): pcap reading, decoding, live loops.

For now it exposes the header batch layout as the C compiler lays it out, so that
tests/test_batch_abi.py can hold it against the Rust engine and the numpy dtype.
"""

from header_batch cimport (
    PacketHeader,
    PC_FLAG_FIRST_FRAGMENT,
    PC_FLAG_FRAGMENT,
    PC_FLAG_HAS_PORTS,
    PC_FLAG_ICMP_ERROR,
    PC_FLAG_MALFORMED,
    PC_FLAG_TRUNCATED,
    pc_field,
    pc_header_fields,
)

HEADER_SIZE = sizeof(PacketHeader)


def header_layout():
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""
    cdef size_t n = 0
    cdef const pc_field *fields = pc_header_fields(&n)
    cdef size_t i
    return [
        (fields[i].name.decode("ascii"), fields[i].offset, fields[i].size) for i in range(n)
    ]


def header_flags():
    """The flags bits of PacketHeader as [(name, value), ...]."""
    return [
        ("FLAG_FRAGMENT", PC_FLAG_FRAGMENT),
        ("FLAG_FIRST_FRAGMENT", PC_FLAG_FIRST_FRAGMENT),
        ("FLAG_TRUNCATED", PC_FLAG_TRUNCATED),
        ("FLAG_MALFORMED", PC_FLAG_MALFORMED),
        ("FLAG_ICMP_ERROR", PC_FLAG_ICMP_ERROR),
        ("FLAG_HAS_PORTS", PC_FLAG_HAS_PORTS),
    ]


# The packet path: L2-L4 decoder and pcap/pcapng reader (issue 5).
include "decode.pxi"
include "pcap.pxi"
# The Rust engine's C ABI, for the live loops (issue 4/6).
include "engine_client.pxi"
# The AF_PACKET inline bridge (issue 6, --bridge IF1,IF2).
include "afpacket.pxi"
# The NFQUEUE live loop, inotify and ctnetlink of `pyclassify enforce` (issue 6).
include "nfqueue.pxi"
include "ctnetlink.pxi"
