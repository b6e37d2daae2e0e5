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


def write_http_capture(path: Path, connections: int) -> Path:
    """A pcap of ``connections`` TCP connections 10.0.1.10 -> 10.0.2.20:8080 (``examples/demo``'s
    web -> api), each a handshake, one request (``GET /public/item/NNNNNN``) and its answer: 5
    frames each. IP checksums are left 0, as above (the decoder does not check them)."""
    web, api = bytes([10, 0, 1, 10]), bytes([10, 0, 2, 20])
    eth = bytes.fromhex("020000000002" "020000000001" "0800")

    def frame(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes) -> bytes:
        tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 0x50, flags, 65535, 0, 0) + data
        return eth + struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, src, dst) + tcp

    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    t = 0
    for k in range(connections):
        sport, c, s = 10000 + k % 50000, 1000, 5000
        request = f"GET /public/item/{k:06d} HTTP/1.1\r\nHost: api.backend\r\n\r\n".encode()
        for f in (frame(web, api, sport, 8080, c, 0, 0x02, b""),
                  frame(api, web, 8080, sport, s, c + 1, 0x12, b""),
                  frame(web, api, sport, 8080, c + 1, s + 1, 0x18, request),
                  frame(api, web, 8080, sport, s + 1, c + 1 + len(request), 0x18, answer),
                  frame(web, api, sport, 8080, c + 1 + len(request), s + 1 + len(answer), 0x10, b"")):
            t += 10
            out.append(struct.pack("<IIII", 1767225600 + t // 1_000_000, t % 1_000_000, len(f), len(f)) + f)
    path.write_bytes(b"".join(out))
    return path
