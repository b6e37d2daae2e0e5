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
    assert at("error_kind", 2) == b"\x05\x00"  # encap stays 0
    assert np.frombuffer(at("frag_id", 4), np.uint32)[0] == 0xCAFEF00D

    # And back: bytes written at the Rust offsets read as the same fields through the dtype.
    again = np.frombuffer(bytes(raw), HEADER_DTYPE)
    assert again.tobytes() == batch.tobytes()
    assert again[1]["dport"] == 443 and again[1]["frag_id"] == 0xCAFEF00D


# --- every shared record, field by field ----------------------------------------------------------
#
# Each record is defined once, in Rust (rust/core/src/abi/ lists them); the C headers under
# native/ are generated from those definitions and numpy's dtypes are built from the layouts
# `_engine.record_layouts()` exports. Here the three views are held to each other: Rust's
# (offset_of!/size_of), the C compiler's (offsetof/sizeof in the generated headers, through
# `_native.record_layouts()`) and numpy's.

RUST_RECORDS = dict(_engine.record_layouts())
RECORD_NAMES = [
    "PacketHeader",
    "OuterHeader",
    "FlowCounts",
    "QuotedTuple",
    "SideVerdict",
    "PacketVerdict",
    "RevokedFlow",
]
NUMPY_SCALARS = {"u8": ("u", 1), "u16": ("u", 2), "u32": ("u", 4), "u64": ("u", 8), "i32": ("i", 4)}


def test_the_shared_records_are_these() -> None:
    assert list(RUST_RECORDS) == RECORD_NAMES
    assert sorted(_native.record_layouts()) == sorted(c for c, *_ in RUST_RECORDS.values())


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_record_agrees_field_by_field(name: str) -> None:
    c_name, size, align, fields = RUST_RECORDS[name]
    rust = [(f, off, sz) for f, off, sz, _ in fields]

    c_size, c_fields = _native.record_layouts()[c_name]
    assert c_size == size, f"{name}: rust size {size} != C sizeof({c_name}) {c_size}"
    assert [f[0] for f in c_fields] == [f[0] for f in rust], f"{name}: field names or order differ in C"
    for r, c in zip(rust, c_fields):
        assert tuple(c) == r, f"{name}.{r[0]}: rust (name, offset, size) {r} != C {tuple(c)}"

    dtype = pybatch.record_dtype(name)
    assert dtype.itemsize == size
    assert dtype.names == tuple(f[0] for f in rust), f"{name}: field names or order differ in numpy"
    for field, offset, fsize, ty in fields:
        ft, foff = dtype.fields[field][:2]  # type: ignore[index]
        assert (field, foff, ft.itemsize) == (field, offset, fsize), f"{name}.{field}: numpy differs"
        if ty in NUMPY_SCALARS:
            assert (ft.kind, ft.itemsize) == NUMPY_SCALARS[ty], f"{name}.{field}: {ft} is not {ty}"
            assert ft.isnative
        elif ty.startswith("u8["):
            assert ft.subdtype is not None and ft.subdtype[0] == np.dtype("u1")
            assert ft.subdtype[1] == (int(ty[3:-1]),), f"{name}.{field}: {ft} is not {ty}"
        else:
            assert ft == pybatch.record_dtype(ty), f"{name}.{field}: nested record is not {ty}"
    assert align in (1, 2, 4, 8) and size % align == 0


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_record_tiles_without_padding(name: str) -> None:
    _, size, _, fields = RUST_RECORDS[name]
    end = 0
    for field, offset, fsize, _ in fields:
        assert offset == end, f"{name}: gap or overlap before {field}"
        end = offset + fsize
    assert end == size


@pytest.mark.parametrize("name", RECORD_NAMES)
def test_record_bytes_land_at_the_rust_offsets(name: str) -> None:
    """A distinct value written to each field through the dtype lands at the Rust offset, in
    native byte order, and nowhere else."""
    _, size, _, fields = RUST_RECORDS[name]
    order = "little" if np.little_endian else "big"
    dtype = pybatch.record_dtype(name)
    for i, (field, offset, fsize, ty) in enumerate(fields):
        rec = np.zeros(1, dtype)
        if ty in NUMPY_SCALARS:
            value = (0x81 + i) if fsize == 1 else int.from_bytes(bytes(range(0x11 + i, 0x11 + i + fsize)), order)
            if ty == "i32":
                value = -value if value < 2**31 else value - 2**32
            rec[0][field] = value
            expected = value.to_bytes(fsize, order, signed=ty == "i32")
        elif ty.startswith("u8["):
            expected = bytes(range(0x41 + i, 0x41 + i + fsize))
            rec[0][field] = list(expected)
        else:
            nested = np.frombuffer(bytes(range(1, fsize + 1)), pybatch.record_dtype(ty))
            rec[0][field] = nested[0]
            expected = bytes(range(1, fsize + 1))
        raw = rec.tobytes()
        assert len(raw) == size
        assert raw[offset : offset + fsize] == expected, f"{name}.{field}"
        assert not (raw[:offset] + raw[offset + fsize :]).strip(b"\0"), f"{name}.{field} spilled over"


def test_the_modules_use_the_generated_dtypes() -> None:
    from pyclassify import capture, engine

    assert pybatch.HEADER_DTYPE is pybatch.record_dtype("PacketHeader")
    assert capture.QUOTE_DTYPE is pybatch.record_dtype("QuotedTuple")
    assert engine.SIDE_DTYPE is pybatch.record_dtype("SideVerdict")
    assert engine.VERDICT_DTYPE is pybatch.record_dtype("PacketVerdict")
    assert pybatch.REVOKED_DTYPE is pybatch.record_dtype("RevokedFlow")
    assert pybatch.FLOW_COUNTS_DTYPE is pybatch.record_dtype("FlowCounts")
    assert engine.VERDICT_DTYPE.itemsize == _engine.VERDICT_SIZE
    assert capture.QUOTE_DTYPE.itemsize == _native.QUOTE_SIZE
    assert pybatch.OUTER_DTYPE is pybatch.record_dtype("OuterHeader")
    assert pybatch.OUTER_DTYPE.itemsize == _native.OUTER_SIZE == 48


def test_error_kinds_agree() -> None:
    assert [tuple(e) for e in _engine.error_kinds()] == list(pybatch.ERROR_KINDS)
    assert [tuple(e) for e in _native.error_kinds()] == list(pybatch.ERROR_KINDS)


def test_encap_kinds_agree() -> None:
    assert [tuple(e) for e in _engine.encap_kinds()] == list(pybatch.ENCAP_KINDS)
    assert [tuple(e) for e in _native.encap_kinds()] == list(pybatch.ENCAP_KINDS)
    assert [v for _, v in pybatch.ENCAP_KINDS] == list(range(len(pybatch.ENCAP_KINDS)))


# --- the ABI version, checked by EngineClient -----------------------------------------------------


def test_abi_versions_agree() -> None:
    assert _native.ENGINE_ABI_VERSION == _engine.ENGINE_ABI_VERSION
    assert isinstance(_engine.ENGINE_ABI_VERSION, int) and _engine.ENGINE_ABI_VERSION >= 2


def fake_capsule(version: int | None = None, sizes: dict[str, int] | None = None) -> tuple[object, list[object]]:
    """A capsule named like the engine's whose function table claims another ABI version or
    other record sizes (its function pointers are null: it must be refused before any call)."""
    import ctypes

    class Api(ctypes.Structure):
        _fields_ = [
            ("abi_version", ctypes.c_uint32),
            ("header_size", ctypes.c_uint32),
            ("verdict_size", ctypes.c_uint32),
            ("quote_size", ctypes.c_uint32),
            ("revoked_size", ctypes.c_uint32),
            ("functions", ctypes.c_void_p * 8),
        ]

    class Ref(ctypes.Structure):
        _fields_ = [("api", ctypes.POINTER(Api)), ("engine", ctypes.c_void_p)]

    layouts = RUST_RECORDS
    good = {
        "header_size": layouts["PacketHeader"][1],
        "verdict_size": layouts["PacketVerdict"][1],
        "quote_size": layouts["QuotedTuple"][1],
        "revoked_size": layouts["RevokedFlow"][1],
    }
    good.update(sizes or {})
    api = Api(abi_version=_engine.ENGINE_ABI_VERSION if version is None else version, **good)
    ref = Ref(api=ctypes.pointer(api), engine=None)
    name = ctypes.create_string_buffer(b"pyclassify._engine.EngineRef")
    prototype = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    new = prototype(("PyCapsule_New", ctypes.pythonapi))
    capsule = new(ctypes.addressof(ref), ctypes.addressof(name), None)
    return capsule, [api, ref, name]  # keep the memory alive as long as the capsule


def real_capsule() -> object:
    from pyclassify.engine import NativeEngine
    from pyclassify.inventory import Inventory
    from pyclassify.ir import PolicySet

    return NativeEngine(PolicySet.build([]), Inventory())._engine.capsule()


@pytest.mark.parametrize(
    ("version", "sizes", "message"),
    [
        (999, None, r"engine ABI mismatch: pyclassify._engine speaks engine ABI version 999"),
        (None, {"verdict_size": 40}, r"engine ABI mismatch: record sizes"),
        (None, {"quote_size": 38}, r"engine ABI mismatch: record sizes"),
        (None, {"revoked_size": 44}, r"engine ABI mismatch: record sizes"),
        (None, {"header_size": 128}, r"engine ABI mismatch: record sizes"),
    ],
)
def test_engine_client_checks_the_abi_on_creation_and_swap(
    version: int | None, sizes: dict[str, int] | None, message: str
) -> None:
    from pyclassify._native import EngineClient

    capsule, keep = fake_capsule(version, sizes)
    with pytest.raises(RuntimeError, match=message):
        EngineClient(capsule)
    with pytest.raises(RuntimeError, match=message):
        EngineClient(capsule, conntrack=False)

    client = EngineClient(real_capsule())
    with pytest.raises(RuntimeError, match=message):
        client.swap(capsule)
    with pytest.raises(RuntimeError, match=message):
        client.revalidate(capsule)
    # The client kept its engine: it still judges.
    headers = new_batch(1)
    out = np.zeros(1, pybatch.VERDICT_DTYPE)
    client.judge(headers, out)
    client.swap(real_capsule())
    client.judge(headers, out)
    del keep
