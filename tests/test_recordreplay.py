"""``replay --traffic --out``: the lines written natively (``_engine.RecordLines``) are byte for
byte those the control plane wrote with ``json.dumps`` per record (the formatter below, kept as
the oracle), for every format and field; and ``--out`` is written as replay writes it for
captures (``pyclassify.output``): refused through a link or over an input, an earlier file kept
when the run fails."""

from __future__ import annotations

import io
import ipaddress
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify.engine import NativeEngine
from pyclassify.ir import Direction
from pyclassify.kinds.common import ICMP_PROTOCOLS, protocol_name
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay, new_judge
from pyclassify.records import ORIENTATION, REPORTED, REPORTED_AT, RecordReader, address_text
from pyclassify.services import ServiceMap
from tests.test_records import SERVICES, conntrack_line, hubble_line, vpc_line

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
TRAFFIC = ROOT / "examples" / "traffic"

CONNTRACK = [
    "icmp     1 29 src=10.0.1.10 dst=10.0.2.20 type=8 code=0 id=1 src=10.0.2.20 dst=10.0.1.10 type=0 code=0 id=1 mark=0 use=1",
    conntrack_line("10.0.1.10", "10.0.2.20", 40000, 8080),
    "tcp      6 100 ESTABLISHED src=2001:db8::1 dst=2001:db8:0:1::20 sport=40000 dport=443 packets=2 bytes=120 "
    "src=2001:db8:0:1::20 dst=2001:db8::1 sport=443 dport=40000 packets=1 bytes=60 [ASSURED] mark=0 use=1",
    conntrack_line("10.0.2.20", "8.8.8.8", 5353, 53, "UDP"),
    "icmpv6   58 29 src=fe80::1 dst=ff02::1 type=128 code=0 id=1 src=ff02::1 dst=fe80::1 type=129 code=0 id=1 mark=0 use=1",
]
GOLDMANE = [
    {
        "Key": {
            "source_name": name,
            "source_namespace": "frontend",
            "source_type": "WorkloadEndpoint",
            "dest_name": "api",
            "dest_namespace": "backend",
            "dest_type": "WorkloadEndpoint",
            "dest_port": "8080",
            "proto": "TCP",
            "action": "Deny",
        },
        "start_time": "1700000000",
        "end_time": "1700000015",
        "packets_in": "2",
        "bytes_out": "70",
        "num_connections_started": "3",
    }
    for name in ("web", "nobody")  # the second is placed by no pod: an unplaced record
]


def python_lines(engine: NativeEngine, paths: list[str]) -> bytes:
    """The lines as the control plane formatted them per record, before they were written
    natively: the oracle the native lines must equal byte for byte."""
    services = ServiceMap(engine.inventory)
    reader = RecordReader(paths, engine.inventory)
    out, index = io.StringIO(), 0

    def side_json(side: Any, direction: Direction) -> Any:
        decision = engine.side_decision(side, direction)
        if decision is None:
            return None
        doc = decision.to_json()
        doc.pop("logs", None)
        return doc

    def owner(address: str) -> Any:
        found = engine.inventory.owner_of(ipaddress.ip_address(address))
        return None if found is None else found.ref

    for chunk in reader.judged(new_judge([engine], None, services), keep=True):
        assert chunk is not None
        report = reader.files[chunk.file]
        for i, (h, c, v) in enumerate(zip(chunk.headers, chunk.counts, chunk.verdicts)):
            proto = int(h["protocol"])
            has_ports = bool(h["flags"] & 32)
            ok = bool(c["has_src"] and c["has_dst"])
            line: dict[str, Any] = {
                "index": index,
                "file": report.name,
                report.unit: int(c["position"]),
                "first": int(c["first_ns"]) / 1e9 if c["first_ns"] else None,
                "last": int(c["last_ns"]) / 1e9 if c["last_ns"] else None,
                "src": address_text(h["src_addr"]) if c["has_src"] else None,
                "dst": address_text(h["dst_addr"]) if c["has_dst"] else None,
                "proto": protocol_name(proto),
                "sport": int(h["sport"]) if has_ports else None,
                "dport": int(h["dport"]) if has_ports else None,
                "flows": int(c["flows"]),
                "packets": int(c["packets"]),
                "bytes": int(c["bytes"]),
                "direction": ORIENTATION[int(c["orientation"])],
                "verdict": ("allow" if v["allow"] else "deny") if ok else None,
                "reason": "policy" if ok else "unplaced",
                "reported": REPORTED[int(c["reported"])],
                "reported_at": REPORTED_AT[int(c["reported_at"])],
                "egress": side_json(v["egress"], Direction.EGRESS) if ok else None,
                "ingress": side_json(v["ingress"], Direction.INGRESS) if ok else None,
            }
            line["src_endpoint"] = owner(line["src"]) if line["src"] else None
            line["dst_endpoint"] = owner(line["dst"]) if line["dst"] else None
            if proto in ICMP_PROTOCOLS:
                line["icmp_type"], line["icmp_code"] = int(h["icmp_type"]), int(h["icmp_code"])
            if chunk.services[i] >= 0:
                line["service"] = services.entries[int(chunk.services[i])].to_json()
            out.write(json.dumps(line) + "\n")
            index += 1
    return out.getvalue().encode()


def native_lines(engine: NativeEngine, paths: list[str]) -> bytes:
    buf = io.BytesIO()
    RecordReplay(engine, out=buf).run(paths)
    return buf.getvalue()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Any]:
    """Inputs covering every field of a line: each format, IPv6, ICMP, an unplaced record, a
    Service, times with and without fractions."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "ct.txt").write_text("\n".join(CONNTRACK) + "\n")
    (d / "goldmane.jsonl").write_text("\n".join(json.dumps(g) for g in GOLDMANE) + "\n")
    demo = d / "demo"
    shutil.copytree(DEMO, demo)
    (demo / "95-services.yaml").write_text(SERVICES)
    rows = [
        ("10.0.1.10", "10.96.0.41", 41000, 80),
        ("10.0.1.10", "10.96.0.40", 41001, 80),
        ("10.0.1.10", "10.0.2.20", 41002, 8080),
        ("10.0.1.10", "10.0.2.30", 41003, 8080),
    ]
    (d / "svc.jsonl").write_text("\n".join(hubble_line(*r) for r in rows) + "\n")
    paths = {
        "hubble": [TRAFFIC / "hubble.jsonl"],
        "vpc": [TRAFFIC / "vpc-flow-logs.txt"],
        "conntrack": [d / "ct.txt"],
        "goldmane": [d / "goldmane.jsonl"],
        "several": [TRAFFIC / "hubble.jsonl", d / "ct.txt", d / "goldmane.jsonl"],
    }
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        text = (TRAFFIC / "vpc-flow-logs.txt").read_text().splitlines()
        header, cols = text[0].split(), [r.split() for r in text[1:]]
        ints = {"version", "srcport", "dstport", "protocol", "packets", "bytes", "start", "end", "tcp-flags"}
        pq.write_table(
            pa.table(
                {h.replace("-", "_"): [int(r[i]) if h in ints else r[i] for r in cols] for i, h in enumerate(header)}
            ),
            str(d / "flows.parquet"),
        )
        paths["parquet"] = [d / "flows.parquet"]
    except ImportError:
        pass
    return {"dir": d, "demo": demo, "paths": paths}


@pytest.fixture(scope="module")
def engine():
    project = load_project([DEMO])
    return NativeEngine(project.policy_set, project.inventory)


@pytest.mark.parametrize("name", ["hubble", "vpc", "conntrack", "goldmane", "parquet", "several"])
def test_native_lines_are_the_python_formatted_ones(engine, inputs, name):
    if name not in inputs["paths"]:
        pytest.skip("pyarrow not installed")
    paths = [str(p) for p in inputs["paths"][name]]
    native = native_lines(engine, paths)
    assert native and native == python_lines(engine, paths)


def test_native_lines_name_the_service_a_record_went_through(inputs):
    project = load_project([inputs["demo"]])
    engine = NativeEngine(project.policy_set, project.inventory)
    paths = [str(inputs["dir"] / "svc.jsonl")]
    native = native_lines(engine, paths)
    assert b'"service": {' in native and native == python_lines(engine, paths)


ADDRESSES = [
    "10.0.1.10",
    "10.0.2.20",
    "10.0.2.30",
    "203.0.113.7",
    "2001:db8::1",
    "2001:db8:0:1::20",
    "fe80::1:0:0:1",
    "::1",
    "1:0:0:1::",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(ADDRESSES),
            st.sampled_from(ADDRESSES),
            st.integers(1, 65535),
            st.integers(1, 65535),
            st.sampled_from(["TCP", "UDP", "ICMP"]),
        ),
        min_size=1,
        max_size=30,
    ),
    fmt=st.sampled_from(["hubble", "vpc", "conntrack"]),
)
def test_native_lines_are_the_python_formatted_ones_for_any_record(tmp_path_factory, engine, rows, fmt):
    make = {"hubble": hubble_line, "vpc": vpc_line, "conntrack": conntrack_line}[fmt]
    rows = [
        r
        for r in rows
        if r[0] != r[1]
        and ipaddress.ip_address(r[0]).version == ipaddress.ip_address(r[1]).version
        and not (fmt == "hubble" and r[4] == "ICMP")
    ]
    if not rows:
        return
    path = tmp_path_factory.mktemp("r") / f"records.{fmt}"
    path.write_text("\n".join(make(*r) for r in rows) + "\n")
    assert native_lines(engine, [str(path)]) == python_lines(engine, [str(path)])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, cwd=ROOT)


def test_out_through_a_link_is_refused(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("kept\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--out", str(link))
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr
    assert target.read_text() == "kept\n"
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--out", str(link), "--follow-symlinks")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and len(target.read_text().splitlines()) == 8


def test_out_over_an_input_is_refused(tmp_path):
    records = tmp_path / "hubble.jsonl"
    shutil.copy(TRAFFIC / "hubble.jsonl", records)
    before = records.read_bytes()
    r = _cli("replay", str(DEMO), "--traffic", str(records), "--out", str(records))
    assert r.returncode == 2 and "is the input --traffic" in r.stderr
    assert records.read_bytes() == before


def test_a_failed_run_leaves_an_earlier_out_as_it_was(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    out.write_text("earlier\n")
    # the first file is judged (lines written), the second cannot be read: the run fails
    r = _cli(
        "replay",
        str(DEMO),
        "--traffic",
        str(TRAFFIC / "hubble.jsonl"),
        "--traffic",
        str(tmp_path / "absent.jsonl"),
        "--out",
        str(out),
    )
    assert r.returncode == 1 and "absent.jsonl" in r.stderr
    assert out.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["verdicts.jsonl"]  # no temporary file left
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == 8


def test_out_that_cannot_be_written_is_named(tmp_path):
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--out", "/dev/full")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--out /dev/full: cannot write" in r.stderr


# -- merging summaries: files judged apart give one run's answer --------------------------------

#: Where the summaries of one run and of merged parts may differ: how long each took, and the
#: decisions made (each part decides the keys it meets once; a measure of work, not an answer).
NOT_ANSWERS = ("seconds", "records_per_second", "decisions", "cluster")

ARCHIVE_ADDRESSES = ["10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40", "203.0.113.7", "198.51.100.1"]
archive_row = st.tuples(
    st.sampled_from(ARCHIVE_ADDRESSES),
    st.sampled_from(ARCHIVE_ADDRESSES),
    st.integers(32768, 65535),
    st.sampled_from([22, 53, 80, 5432, 8080, 6432]),
    st.sampled_from(["TCP", "UDP", "ICMP"]),
    st.sampled_from(["ACCEPT", "REJECT"]),
    st.integers(0, 3600),
)
# a file's first line is a record: its format is found from it
archive_file = st.tuples(
    st.sampled_from(["hubble", "vpc", "conntrack", "goldmane"]),
    st.builds(
        lambda first, rest: [first, *rest], archive_row, st.lists(st.one_of(archive_row, st.just("junk")), max_size=25)
    ),
)
#: Files of flow records: every format, records the inventory places and some it cannot,
#: outside addresses, records whose own verdict policy contradicts, lines that are no record.
archives = st.lists(archive_file, min_size=1, max_size=7)


def archive_line(fmt: str, row: Any) -> str:
    if row == "junk":
        return {
            "hubble": '{"flow": {"IP": 7}}',
            "vpc": "2 123 eni-1 not-an-address",
            "conntrack": "tcp 6 garbage",
            "goldmane": '{"Key": 3}',
        }[fmt]
    src, dst, sport, dport, proto, action, t = row
    if fmt == "vpc":
        number = {"TCP": 6, "UDP": 17, "ICMP": 1}[proto]
        return f"2 123456789012 eni-1 {src} {dst} {sport} {dport} {number} 3 180 {1714557600 + t} {1714557660 + t} {action} OK"
    if fmt == "hubble":
        return hubble_line(src, dst, sport, dport, "TCP" if proto == "ICMP" else proto)
    if fmt == "conntrack":
        return conntrack_line(src, dst, sport, dport, proto)
    name = {"10.0.1.10": "web", "10.0.2.20": "api", "10.0.2.30": "api*"}.get(src, "nobody")
    return json.dumps(
        {
            "Key": {
                "source_name": name,
                "source_namespace": "frontend",
                "source_type": "WorkloadEndpoint",
                "dest_name": "api",
                "dest_namespace": "backend",
                "dest_type": "WorkloadEndpoint",
                "dest_port": str(dport),
                "proto": "TCP" if proto == "ICMP" else proto,
                "action": "Allow" if action == "ACCEPT" else "Deny",
            },
            "start_time": str(1700000000 + t),
            "end_time": str(1700000015 + t),
            "packets_in": "2",
            "bytes_out": "70",
            "num_connections_started": "1",
        }
    )


def write_archive(directory: Path, files: list[tuple[str, list[Any]]]) -> list[str]:
    """The files of ``files`` (format, rows) written under ``directory``; their paths."""
    paths = []
    for i, (fmt, rows) in enumerate(files):
        path = directory / f"part-{i:03d}.{fmt}"
        path.write_text("".join(archive_line(fmt, r) + "\n" for r in rows))
        paths.append(str(path))
    return paths


def answer(doc: dict[str, Any]) -> dict[str, Any]:
    """A summary without what may differ between equal answers (``NOT_ANSWERS``)."""
    return {k: v for k, v in doc.items() if k not in NOT_ANSWERS}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=archives, cuts=st.lists(st.integers(0, 7), max_size=3))
def test_summaries_of_parts_merge_into_the_whole_runs(tmp_path_factory, engine, files, cuts):
    from pyclassify.recordreplay import merge_summaries, summary_json

    paths = write_archive(tmp_path_factory.mktemp("archive"), files)
    whole = RecordReplay(engine)
    whole.run(paths)
    parts = [RecordReplay(engine).run([p]) for p in paths]
    # one judge keeping its keys from file to file (as each worker of a cluster keeps one)
    kept = new_judge([engine], None, ServiceMap(engine.inventory), keep_keys=True)
    kept_parts = [RecordReplay(engine, judge=kept).run([p]) for p in paths]
    # merged one file at a time, and in groups (the tree a cluster merges in)
    merged = merge_summaries(*parts)
    bounds = sorted({0, len(parts), *(c for c in cuts if c <= len(parts))})
    grouped = merge_summaries(*(merge_summaries(*parts[a:b]) for a, b in zip(bounds, bounds[1:])))
    expected = answer(whole.summary_json())
    assert answer(summary_json(merged, False)) == expected
    assert answer(summary_json(grouped, False)) == expected
    assert answer(summary_json(merge_summaries(*kept_parts), False)) == expected
    # the parts of a merged summary are left as they were
    assert answer(summary_json(merge_summaries(*parts), False)) == expected


def test_merged_examples_are_the_first_in_file_order(tmp_path, engine):
    from pyclassify.recordreplay import EXAMPLES, merge_summaries

    outside = ("203.0.113.7", "198.51.100.1", 40000, 80, "TCP", "ACCEPT", 0)
    paths = write_archive(tmp_path, [("vpc", [outside] * 4), ("vpc", [outside] * 4)])
    whole = RecordReplay(engine).run(paths)
    merged = merge_summaries(*(RecordReplay(engine).run([p]) for p in paths))
    assert len(whole.outside_examples) == EXAMPLES
    assert merged.outside_examples == whole.outside_examples
    assert [e.split(":")[0] for e in merged.outside_examples] == [paths[0]] * 4 + [paths[1]]


def write_parquet(path: Path, rows: list[Any], row_group_size: int) -> list[tuple[int, int, int]]:
    """VPC Flow Logs rows (``archive_row``s, ``"junk"``: a record whose log status is not OK)
    as Parquet in row groups of ``row_group_size``; each row group as a part (first, end, first row)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
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
        )
    }
    for r in rows:
        src, dst, sport, dport, proto, action, t = (
            ("10.0.1.10", "10.0.2.20", 1, 2, "TCP", "ACCEPT", 0) if r == "junk" else r
        )
        for c, v in zip(
            cols,
            (
                2,
                src,
                dst,
                sport,
                dport,
                {"TCP": 6, "UDP": 17, "ICMP": 1}[proto],
                3,
                180,
                1714557600 + t,
                1714557660 + t,
                action,
                "NODATA" if r == "junk" else "OK",
            ),
        ):
            cols[c].append(v)
    pq.write_table(pa.table(cols), str(path), row_group_size=row_group_size)
    n = pq.ParquetFile(str(path)).metadata.num_row_groups
    return [(g, g + 1, g * row_group_size) for g in range(n)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.one_of(archive_row, st.just("junk")), min_size=1, max_size=60),
    size=st.integers(1, 9),
    cuts=st.lists(st.integers(0, 60), max_size=3),
)
def test_a_parquet_file_read_by_row_groups_merges_into_the_whole_runs(tmp_path_factory, engine, rows, size, cuts):
    from pyclassify.recordreplay import merge_summaries, summary_json

    path = tmp_path_factory.mktemp("pq") / "flows.parquet"
    groups = write_parquet(path, rows, size)
    whole = RecordReplay(engine)
    whole.run([str(path)])
    bounds = sorted({0, len(groups), *(c for c in cuts if c <= len(groups))})
    parts = [(groups[a][0], groups[b - 1][1], groups[a][2]) for a, b in zip(bounds, bounds[1:])]
    merged = merge_summaries(*(RecordReplay(engine).run([str(path)], parts=[p]) for p in parts))
    assert answer(summary_json(merged, False)) == answer(whole.summary_json())
