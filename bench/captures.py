"""Large synthetic captures for the benchmarks, written with numpy (no scapy per packet)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

FRAME = 74  # Ethernet + IPv4 + TCP (ACK) + 20 bytes of payload


def write_tcp_capture(path: Path, n: int, sports: np.ndarray, src_low_bytes: np.ndarray | None = None) -> Path:
    """A pcap of ``n`` frames 10.0.1.10 -> 10.0.2.20:8080 (``examples/demo``'s web -> api) with the
    given source ports (and, optionally, varying low bytes of the source address), read once so it
    is in the page cache."""
    rec = np.dtype([("sec", "<u4"), ("usec", "<u4"), ("caplen", "<u4"), ("len", "<u4"), ("frame", "u1", FRAME)])
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 60, 0, 0x4000, 64, 6, 0, bytes([10, 0, 1, 10]), bytes([10, 0, 2, 20]))
    tcp = struct.pack(">HHIIBBHHH", 0, 8080, 1, 0, 0x50, 0x10, 65535, 0, 0) + b"p" * 20
    template = np.frombuffer(eth + ip + tcp, np.uint8)
    assert len(template) == FRAME
    recs = np.zeros(n, rec)
    i = np.arange(n, dtype=np.uint32)
    recs["sec"] = 1767225600 + i // 100000
    recs["usec"] = (i % 100000) * 10
    recs["caplen"] = recs["len"] = FRAME
    recs["frame"] = template
    recs["frame"][:, 34:36] = sports.astype(">u2").view(np.uint8).reshape(n, 2)
    if src_low_bytes is not None:
        recs["frame"][:, 29] = src_low_bytes.astype(np.uint8)
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        f.write(recs.tobytes())
    path.read_bytes()
    return path
