# cython: language_level=3
"""Packet I/O of pyclassify (Cython): the L2-L4 decoder, the pcap/pcapng reader and writer, the
client of the Rust engine's C ABI, and the live loops of ``pyclassify enforce`` (NFQUEUE with
inotify and ctnetlink, and the AF_PACKET inline bridge), all running without the GIL per packet.

It also exposes the shared records as the C compiler lays them out (``record_layouts``,
``header_layout``), so that tests/test_batch_abi.py can hold them against the Rust engine, whose
definitions the C headers are generated from, and against the numpy dtypes.
"""

from engine_api cimport pc_engine_api_layouts
from header_batch cimport (
    PacketHeader,
    pc_header_batch_layouts,
    pc_record_layout,
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


def record_layouts():
    """Every record of the generated C headers as the C compiler lays it out:
    ``{c_name: (size, [(name, offset, size), ...])}``, fields in declaration order."""
    cdef size_t n = 0, i, j
    cdef const pc_record_layout *records
    out = {}
    for k in range(2):
        records = pc_header_batch_layouts(&n) if k == 0 else pc_engine_api_layouts(&n)
        for i in range(n):
            out[records[i].name.decode("ascii")] = (
                records[i].size,
                [(records[i].fields[j].name.decode("ascii"), records[i].fields[j].offset,
                  records[i].fields[j].size) for j in range(records[i].nfields)],
            )
    return out


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
# Cutting a denied TCP connection both ways with two crafted RSTs: the HTTP loop's (raw
# sockets) and the bridge's (frames).
include "tcpreset.pxi"
# The AF_PACKET inline bridge (issue 6, --bridge IF1,IF2).
include "afpacket.pxi"
# The NFQUEUE live loop, inotify and ctnetlink of `pyclassify enforce` (issue 6).
include "nfqueue.pxi"
include "inotify.pxi"
include "ctnetlink.pxi"
