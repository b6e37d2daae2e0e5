"""The header batch is one ABI in three languages: Rust, C (Cython) and numpy must agree.

Rust's layout comes from ``offset_of!``/``size_of`` in rust/core/src/batch.rs, C's from
``offsetof``/``sizeof`` in native/header_batch.h, numpy's from pyclassify/batch.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyclassify import _engine, _native
from pyclassify import batch as pybatch
from pyclassify.batch import HEADER_DTYPE, HEADER_SIZE, new_batch


def numpy_layout() -> list[tuple[str, int, int]]:
    fields = HEADER_DTYPE.fields
    assert fields is not None
    layout = [(name, offset, dt.itemsize) for name, (dt, offset, *_) in fields.items()]
    return sorted(layout, key=lambda f: f[1])


LAYOUTS = {
    "rust": _engine.header_layout,
    "cython": _native.header_layout,
    "numpy": numpy_layout,
}


@pytest.mark.parametrize("other", ["cython", "numpy"])
def test_layouts_agree_field_by_field(other: str) -> None:
    rust = LAYOUTS["rust"]()
    theirs = LAYOUTS[other]()
    assert [f[0] for f in rust] == [f[0] for f in theirs], "field names or order differ"
    for r, t in zip(rust, theirs):
        assert tuple(r) == tuple(t), f"{r[0]}: rust (name, offset, size) {r} != {other} {t}"


@pytest.mark.parametrize("which", sorted(LAYOUTS))
def test_layout_tiles_64_bytes_without_padding(which: str) -> None:
    layout = LAYOUTS[which]()
    end = 0
    for name, offset, size in layout:
        assert offset == end, f"{which}: gap or overlap before {name}"
        end = offset + size
    assert end == 64


def test_sizes_agree() -> None:
    assert _engine.HEADER_SIZE == _native.HEADER_SIZE == HEADER_DTYPE.itemsize == HEADER_SIZE == 64


def test_flags_agree() -> None:
    expected = [(name, getattr(pybatch, name)) for name, _ in pybatch.FLAGS]
    assert list(pybatch.FLAGS) == expected
    assert [tuple(f) for f in _engine.header_flags()] == expected
    assert [tuple(f) for f in _native.header_flags()] == expected
    values = [v for _, v in expected]
    assert all(v & (v - 1) == 0 and v for v in values), "each flag is one bit"
    assert len(set(values)) == len(values)


def test_round_trip_bytes_land_at_offsets() -> None:
    batch = new_batch(3)
    assert batch.dtype == HEADER_DTYPE and batch.nbytes == 3 * 64
    assert batch.flags.c_contiguous and not batch.tobytes().strip(b"\0")

    h = batch[1]
    h["ts_ns"] = 0x0102030405060708
    h["src_addr"] = list(bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1]))  # ::ffff:10.0.0.1
    h["dst_addr"] = list(range(16))
    h["pkt_len"] = 1514
    h["ifindex"] = 7
    h["sport"] = 40000
    h["dport"] = 443
    h["ip_version"] = 4
    h["protocol"] = 6
    h["tcp_flags"] = 0x12
    h["flags"] = pybatch.FLAG_HAS_PORTS | pybatch.FLAG_TRUNCATED
    h["icmp_type"] = 3
    h["icmp_code"] = 4
    h["error_kind"] = 5
    h["frag_id"] = 0xCAFEF00D

    raw = batch.view(np.uint8).reshape(3, 64)
    assert not raw[0].any() and not raw[2].any(), "writing one header touched its neighbours"
    row = raw[1].tobytes()
    offsets = {name: offset for name, offset, _ in _engine.header_layout()}

    def at(name: str, n: int) -> bytes:
        return row[offsets[name] : offsets[name] + n]

    assert at("ts_ns", 8) == (0x0102030405060708).to_bytes(8, "little" if np.little_endian else "big")
    assert at("src_addr", 16) == bytes(10) + b"\xff\xff\x0a\x00\x00\x01"
    assert at("dst_addr", 16) == bytes(range(16))
    assert np.frombuffer(at("pkt_len", 4), np.uint32)[0] == 1514
    assert np.frombuffer(at("ifindex", 4), np.uint32)[0] == 7
    assert np.frombuffer(at("sport", 2), np.uint16)[0] == 40000
    assert np.frombuffer(at("dport", 2), np.uint16)[0] == 443
    assert at("ip_version", 1) == b"\x04"
    assert at("protocol", 1) == b"\x06"
    assert at("tcp_flags", 1) == b"\x12"
    assert at("flags", 1)[0] == pybatch.FLAG_HAS_PORTS | pybatch.FLAG_TRUNCATED
    assert at("icmp_type", 2) == b"\x03\x04"
    assert at("error_kind", 2) == b"\x05\x00"  # reserved stays 0
    assert np.frombuffer(at("frag_id", 4), np.uint32)[0] == 0xCAFEF00D

    # And back: bytes written at the Rust offsets read as the same fields through the dtype.
    again = np.frombuffer(bytes(raw), HEADER_DTYPE)
    assert again.tobytes() == batch.tobytes()
    assert again[1]["dport"] == 443 and again[1]["frag_id"] == 0xCAFEF00D
