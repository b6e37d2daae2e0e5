"""VPC Flow Logs in Parquet (``pyclassify.parquet``): text columns stored dictionary-encoded and
stored plain read to the same records and problems, across row groups and slices, with nulls in
text and integer columns; both as the text reader reads the same fields; bad columns named."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from pyclassify import parquet
from pyclassify.project import load_project
from pyclassify.records import RecordReader

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
FIELDS = (
    "version",
    "srcaddr",
    "dstaddr",
    "srcport",
    "dstport",
    "protocol",
    "packets",
    "bytes",
    "start",
    "end",
    "action",
    "log_status",
    "tcp_flags",
    "pkt_srcaddr",
    "pkt_dstaddr",
)
SCHEMA = pa.schema(
    [
        ("version", pa.int32()),
        ("srcaddr", pa.string()),
        ("dstaddr", pa.string()),
        ("srcport", pa.int32()),
        ("dstport", pa.int32()),
        ("protocol", pa.int32()),
        ("packets", pa.int64()),
        ("bytes", pa.int64()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("action", pa.string()),
        ("log_status", pa.string()),
        ("tcp_flags", pa.int32()),
        ("pkt_srcaddr", pa.string()),
        ("pkt_dstaddr", pa.string()),
    ]
)
ADDRESSES = ["10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40", "203.0.113.7", "fd00::5"]
ROW_GROUP = 1000


def _rows(n: int, seed: int = 7) -> list[dict]:
    g = random.Random(seed)

    def address() -> str | None:
        return g.choice(ADDRESSES) if g.random() < 0.9 else g.choice([None, "-", "", "not-an-address"])

    return [
        {
            "version": 5,
            "srcaddr": address(),
            "dstaddr": address(),
            "srcport": g.choice([443, 53, 40000, 65535, None]),
            "dstport": g.choice([80, 53, 33000, None]),
            "protocol": g.choice([6, 6, 17, 1, 58, 300, None]),
            "packets": g.choice([1, 7, 10**10, None]),
            "bytes": g.choice([60, 1500, None]),
            "start": g.choice([100, 200, None]),
            "end": g.choice([150, 260, None]),
            "action": g.choice(["ACCEPT", "REJECT", "-", None]),
            "log_status": g.choice(["OK"] * 8 + ["NODATA", "SKIPDATA", None]),
            "tcp_flags": g.choice([2, 18, 0, None]),
            "pkt_srcaddr": g.choice([None, None, None, "10.0.2.30", "-"]),
            "pkt_dstaddr": g.choice([None, None, "10.0.1.10"]),
        }
        for _ in range(n)
    ]


def _write(rows: list[dict], path: Path, dictionary: bool) -> Path:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    with pq.ParquetWriter(str(path), SCHEMA, use_dictionary=dictionary) as w:
        w.write_table(table, row_group_size=ROW_GROUP)
    return path


def _read(path: Path, whole: bool = False) -> tuple[bytes, bytes, dict, list]:
    problems: dict[str, int] = {}
    first: list = []
    headers, counts = [], []
    with open(path, "rb") as f:
        for columns in parquet.read(f, b"", str(path), problems, None if whole else str(path), first):
            h, c = parquet.arrays(columns)
            headers.append(h)
            counts.append(c)
    return np.concatenate(headers).tobytes(), np.concatenate(counts).tobytes(), problems, first


def test_dictionary_encoded_and_plain_columns_read_alike(tmp_path, monkeypatch):
    # slices of 700 rows: a slice ends inside a row group and at its end
    monkeypatch.setattr(parquet, "BATCH", 700)
    rows = _rows(2600)
    encoded, plain = _write(rows, tmp_path / "dict.parquet", True), _write(rows, tmp_path / "plain.parquet", False)
    names = {f: f for f in FIELDS}
    text = ["srcaddr", "dstaddr", "pkt_srcaddr", "pkt_dstaddr", "action", "log_status"]
    assert parquet._dictionary_columns(pq.ParquetFile(str(encoded)), names) == text
    assert parquet._dictionary_columns(pq.ParquetFile(str(plain)), names) == []
    from_dict, from_plain = _read(encoded), _read(plain)
    assert from_dict == from_plain
    assert _read(encoded, whole=True) == from_dict
    headers, counts, problems, first = from_dict
    assert len(headers) // 64 + sum(problems.values()) - problems.get("end_before_start", 0) == len(rows)
    assert {"bad_address", "bad_field", "nodata", "skipdata"} <= problems.keys()
    assert all(p <= len(rows) for _, p, _ in first)


def test_parquet_read_as_the_text_reader_reads_the_same_fields(tmp_path):
    rows = _rows(1500, seed=11)
    text = tmp_path / "flows.txt"
    cell = lambda v: "-" if v is None or v == "" else str(v)  # noqa: E731 - the text's own spelling of nothing
    text.write_text(
        " ".join(f.replace("_", "-") for f in FIELDS)
        + "\n"
        + "".join(" ".join(cell(r[f]) for f in FIELDS) + "\n" for r in rows)
    )
    inventory = load_project([ROOT / "examples" / "demo"]).inventory
    text_reader = RecordReader([str(text)], inventory)
    chunks = list(text_reader)
    th, tc = np.concatenate([c.headers for c in chunks]), np.concatenate([c.counts for c in chunks])
    tc["position"] -= 1  # the text's line 1 is its header
    for dictionary in (True, False):
        path = _write(rows, tmp_path / f"flows-{dictionary}.parquet", dictionary)
        headers, counts, problems, _ = _read(path)
        assert headers == th.tobytes() and counts == tc.tobytes(), dictionary
        assert problems == text_reader.files[0].problems


def test_integer_columns_of_other_types_cast_and_text_not_a_number_is_missing(tmp_path):
    table = pa.table(
        {
            "srcaddr": pa.array(["10.0.1.10"] * 3).dictionary_encode(),
            "dstaddr": pa.array(["10.0.2.20"] * 3, pa.large_string()),
            "srcport": pa.array([40000, 40001, 40002], pa.uint16()),
            "dstport": pa.array([80, 80, None], pa.int16()),
            "protocol": pa.array(["6", "tcp", "17"]),
            "packets": pa.array([1.0, 2.0, 3.0]),
        }
    )
    path = tmp_path / "types.parquet"
    pq.write_table(table, str(path))
    headers, _, problems, first = _read(path)
    assert len(headers) // 64 == 2 and problems == {"bad_field": 1} and first[0][:2] == ("bad_field", 2)


def test_a_value_no_integer_holds_is_an_error_naming_file_row_and_field(tmp_path):
    table = pa.table(
        {
            "srcaddr": ["10.0.1.10"] * 3,
            "dstaddr": ["10.0.2.20"] * 3,
            "protocol": [6, 6, 6],
            "srcport": pa.array([40000.0, 1.5, 2.0]),
        }
    )
    path = tmp_path / "bad.parquet"
    pq.write_table(table, str(path))
    with pytest.raises(parquet.ParquetError, match=rf"{path}: row 2: srcport: 1\.5 is not an integer"):
        _read(path)


def test_row_groups_come_from_the_system_allocator_and_the_default_pool_is_left_as_it_was(tmp_path):
    path = _write(_rows(2600), tmp_path / "dict.parquet", True)
    before = pa.default_memory_pool()
    system = pa.system_memory_pool()
    used = system.bytes_allocated()
    seen = []
    with open(path, "rb") as f:
        for columns in parquet.read(f, b"", str(path), path=str(path)):
            seen.append(system.bytes_allocated() - used)
            assert pa.default_memory_pool().backend_name == before.backend_name
            parquet.arrays(columns)
    assert seen and max(seen) > 0  # the row group being judged is held in the system pool
    assert pa.default_memory_pool().backend_name == before.backend_name
