"""Fuzzing the reader and the decoder with hypothesis (bounded for the suite): random and mutated
captures and frames never crash, every packet read is counted by error kind, and the flags stay
consistent (no ports unless decoded, MALFORMED exactly when an error kind says so)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify import _native
from pyclassify import batch as B
from pyclassify.batch import new_batch
from pyclassify.capture import QUOTE_DTYPE, CaptureError, read_all

REPO = Path(__file__).resolve().parents[2]
DEMO = {name: (REPO / "pcaps" / name).read_bytes() for name in ("demo.pcap", "demo.pcapng")}
PORT_PROTOS = {6, 17, 132, 136}


def invariants(h: np.ndarray) -> None:
    kinds = h["error_kind"].astype(int)
    flags = h["flags"].astype(int)
    assert (kinds < len(B.ERROR_KINDS)).all()
    malformed = (flags & B.FLAG_MALFORMED) != 0
    assert (malformed == ((kinds != 0) & (kinds != B.ERR_FRAGMENT_UNMATCHED))).all()
    truncated = (flags & B.FLAG_TRUNCATED) != 0
    assert (
        truncated
        == np.isin(kinds, [B.ERR_TRUNCATED_LINK, B.ERR_TRUNCATED_IP, B.ERR_TRUNCATED_L4, B.ERR_TRUNCATED_TUNNEL])
    ).all()
    ports = (flags & B.FLAG_HAS_PORTS) != 0
    assert not (ports & malformed).any(), "a malformed packet got ports"
    assert np.isin(h["protocol"][ports], list(PORT_PROTOS)).all()
    assert (h["ip_version"][ports] > 0).all()
    assert np.isin(h["ip_version"], [0, 4, 6]).all()
    assert (h["encap"] < len(B.ENCAP_KINDS)).all()


def read_bytes(data: bytes) -> None:
    try:
        headers, _, cap = read_all(io.BytesIO(data), batch_size=7)
    except CaptureError:
        return
    assert sum(cap.counts.values()) == len(headers) == cap.packets
    invariants(headers)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"M<\xb2\xa1", b"\n\r\r\n", b""]),
    st.binary(max_size=600),
)
def test_random_files(magic: bytes, rest: bytes) -> None:
    read_bytes(magic + rest)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(DEMO)), st.data())
def test_mutated_bundled_captures(name: str, data: st.DataObject) -> None:
    buf = bytearray(DEMO[name])
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    read_bytes(bytes(buf[:cut]))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 9999]),
    st.lists(st.binary(max_size=120), min_size=1, max_size=10),
)
def test_random_frames(linktype: int, frames: list[bytes]) -> None:
    h = new_batch(len(frames))
    q = np.zeros(len(frames), QUOTE_DTYPE)
    _native.Decoder().decode(frames, h, q, linktype)
    invariants(h)


@st.composite
def ip_like(draw: st.DrawFn) -> bytes:
    """Frames that get past the link layer: Ethernet + a plausible IPv4/IPv6 start + noise."""
    if draw(st.booleans()):
        ihl = draw(st.integers(0, 15))
        hdr = struct.pack(
            ">BBHHHBB",
            0x40 | ihl,
            0,
            draw(st.integers(0, 200)),
            1,
            draw(st.integers(0, 0xFFFF)),
            64,
            draw(st.sampled_from([1, 6, 17, 132, 136, 58])),
        )
        return b"\0" * 12 + b"\x08\x00" + hdr + draw(st.binary(max_size=120))
    hdr = struct.pack(
        ">IHBB", 0x60000000, draw(st.integers(0, 200)), draw(st.sampled_from([0, 6, 17, 43, 44, 51, 58, 60, 132])), 64
    )
    return b"\0" * 12 + b"\x86\xdd" + hdr + draw(st.binary(min_size=32, max_size=160))


@settings(max_examples=400, deadline=None)
@given(st.lists(ip_like(), min_size=1, max_size=10))
def test_plausible_ip_frames(frames: list[bytes]) -> None:
    h = new_batch(len(frames))
    q = np.zeros(len(frames), QUOTE_DTYPE)
    _native.Decoder().decode(frames, h, q, 1)
    invariants(h)
    quoted = (q["flags"] & 1) != 0
    assert not (quoted & ((h["flags"] & B.FLAG_ICMP_ERROR) == 0)).any(), "a quote without an ICMP error"
