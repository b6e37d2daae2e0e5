"""Flow records in (``pyclassify.records``, ``replay --traffic``): every format read to the
verdicts the reference evaluator gives each record alone, whatever the chunking or compression;
the fields read are the ones the published schemas name; bad input counted, never a traceback."""

from __future__ import annotations

import gzip
import ipaddress
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify import reference
from pyclassify.engine import NativeEngine
from pyclassify.flow import Flow, FlowEnd
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay
from pyclassify.records import RecordError, RecordReader

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
TRAFFIC = ROOT / "examples" / "traffic"
ADDRESSES = ["10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40", "203.0.113.7", "198.51.100.9", "8.8.8.8"]


@pytest.fixture(scope="module")
def project():
    return load_project([DEMO])


@pytest.fixture(scope="module")
def engine(project):
    return NativeEngine(project.policy_set, project.inventory)


def replay_lines(engine, path: Path, fmt: str | None = None) -> tuple[list[dict], dict]:
    import io

    buf = io.BytesIO()
    r = RecordReplay(engine, out=buf, format=fmt)
    r.run([str(path)])
    return [json.loads(line) for line in buf.getvalue().decode().splitlines()], r.summary_json()


def oracle(project, line: dict) -> str:
    proto = {"TCP": 6, "UDP": 17, "ICMP": 1, "SCTP": 132}[line["proto"]]
    flow = Flow(
        FlowEnd(ip=ipaddress.ip_address(line["src"])),
        FlowEnd(ip=ipaddress.ip_address(line["dst"])),
        proto,
        line["sport"],
        line["dport"],
        line.get("icmp_type"),
        line.get("icmp_code"),
    )
    return reference.evaluate(project.policy_set, project.inventory, flow).verdict


@pytest.mark.parametrize("name", ["hubble.jsonl", "vpc-flow-logs.txt"])
def test_bundled_samples_judged_as_the_reference_judges_each_record(project, engine, name):
    lines, summary = replay_lines(engine, TRAFFIC / name)
    assert lines and summary["problems"] == 0
    for line in lines:
        assert line["verdict"] == oracle(project, line), line


def test_hubble_reply_judged_as_its_opening_direction(engine):
    lines, _ = replay_lines(engine, TRAFFIC / "hubble.jsonl")
    reply = lines[1]
    assert (reply["src"], reply["dst"], reply["dport"], reply["direction"], reply["flows"]) == (
        "10.0.1.10",
        "10.0.2.20",
        8080,
        "turned around",
        0,
    )


def test_own_verdicts_beside_the_policy_s(engine):
    _, summary = replay_lines(engine, TRAFFIC / "hubble.jsonl")
    rep = summary["reported"]
    assert rep["agree"] + rep["disagree"] == summary["records"]
    # 198.51.100.9 is forwarded by the datapath the sample records, denied by the policy
    assert any("198.51.100.9" in e for e in rep["examples"])


def _hubble(direction: str | None, verdict: str = "FORWARDED") -> str:
    """frontend/web opening TCP/5432 to backend/db: the web's egress allows it, the protect-db
    AdminNetworkPolicy denies it at the db's ingress."""
    flow = {
        "time": "2024-05-01T10:00:00Z",
        "verdict": verdict,
        "IP": {"source": "10.0.1.10", "destination": "10.0.2.30"},
        "l4": {"TCP": {"source_port": 40000, "destination_port": 5432, "flags": {"SYN": True}}},
        "is_reply": False,
    }
    if direction is not None:
        flow["traffic_direction"] = direction
    return json.dumps({"flow": flow}) + "\n"


@pytest.mark.parametrize(
    "direction,agrees,said",
    [
        ("EGRESS", True, None),
        ("INGRESS", False, "the record says allow at the destination's ingress, policy says deny there"),
        (None, False, "the record says allow, policy says deny"),
    ],
)
def test_own_verdict_held_to_the_policy_at_the_end_that_gave_it(engine, tmp_path, direction, agrees, said):
    """Hubble reports each end's decision where it observes the flow (`traffic_direction`, of
    the connection as that endpoint sees it): the client's node forwards what its egress
    allows, whatever the server's ingress then does. That is no disagreement; the same
    verdict at the server's ingress, or for the connection as a whole, is."""
    path = tmp_path / "one.jsonl"
    path.write_text(_hubble(direction))
    lines, summary = replay_lines(engine, path)
    assert lines[0]["verdict"] == "deny"
    assert lines[0]["reported_at"] == (direction.lower() if direction else None)
    rep = summary["reported"]
    assert (rep["agree"], rep["disagree"]) == ((1, 0) if agrees else (0, 1)), rep
    if said is not None:
        assert any(said in e for e in rep["examples"]), rep["examples"]


def test_calico_reporter_says_which_end_gave_the_action(engine, tmp_path):
    """Calico's flow log: `reporter` src is the source's egress decision, dst the
    destination's ingress one."""
    base = {"start_time": 1, "end_time": 2, "source_ip": "10.0.1.10", "dest_ip": "10.0.2.30"}
    base |= {"dest_port": 5432, "proto": "tcp", "action": "allow", "num_flows_started": 1}
    path = tmp_path / "calico.jsonl"
    path.write_text("".join(json.dumps(base | {"reporter": r}) + "\n" for r in ("src", "dst")))
    _, summary = replay_lines(engine, path, "calico")
    rep = summary["reported"]
    assert (rep["agree"], rep["disagree"]) == (1, 1), rep
    assert any("at the destination's ingress, policy says deny there" in e for e in rep["examples"])


def test_goldmane_reporter_and_action_by_number(engine, tmp_path):
    """Goldmane's enums written as numbers (Reporter Src = 1, Dst = 2; Action Allow = 1) mean
    what their names do."""
    key = {"source_ip": "10.0.1.10", "dest_ip": "10.0.2.30", "dest_port": 5432, "proto": "tcp", "action": 1}
    path = tmp_path / "goldmane.jsonl"
    lines = [
        {"Key": key | {"reporter": r}, "start_time": 1, "end_time": 2, "num_connections_started": 1} for r in (1, 2)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, summary = replay_lines(engine, path, "calico")
    rep = summary["reported"]
    assert (rep["agree"], rep["disagree"]) == (1, 1), rep
    assert any("at the destination's ingress, policy says deny there" in e for e in rep["examples"])


def _write(path: Path, text: str, compress: str | None = None) -> Path:
    data = text.encode()
    if compress == "gzip":
        path = path.with_suffix(path.suffix + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def hubble_line(src, dst, sport, dport, proto="TCP", reply=False) -> str:
    l4 = (
        {proto: {"source_port": sport, "destination_port": dport}}
        if proto in ("TCP", "UDP")
        else {"ICMPv4": {"type": 8}}
    )
    return json.dumps(
        {
            "flow": {
                "time": "2024-05-01T10:00:00Z",
                "verdict": "FORWARDED",
                "IP": {"source": src, "destination": dst, "ipVersion": "IPv4"},
                "l4": l4,
                "is_reply": reply,
            }
        }
    )


def vpc_line(src, dst, sport, dport, proto="TCP", reply=False) -> str:
    number = {"TCP": 6, "UDP": 17, "ICMP": 1}[proto]
    return f"2 123456789012 eni-1 {src} {dst} {sport} {dport} {number} 3 180 1714557600 1714557660 ACCEPT OK"


def conntrack_line(src, dst, sport, dport, proto="TCP", reply=False) -> str:
    if proto == "ICMP":
        return (
            f"icmp     1 29 src={src} dst={dst} type=8 code=0 id=1 src={dst} dst={src} type=0 code=0 id=1 mark=0 use=1"
        )
    name, number = ("tcp", 6) if proto == "TCP" else ("udp", 17)
    state = " ESTABLISHED" if proto == "TCP" else ""
    return (
        f"{name}      {number} 100{state} src={src} dst={dst} sport={sport} dport={dport} packets=2 bytes=120 "
        f"src={dst} dst={src} sport={dport} dport={sport} packets=1 bytes=60 [ASSURED] mark=0 use=1"
    )


record = st.tuples(
    st.sampled_from(ADDRESSES),
    st.sampled_from(ADDRESSES),
    st.integers(32768, 65535),
    st.sampled_from([22, 53, 80, 5432, 8080, 9090, 6432]),
    st.sampled_from(["TCP", "UDP", "ICMP"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(record, min_size=1, max_size=40),
    fmt=st.sampled_from(["hubble", "vpc", "conntrack"]),
    compress=st.sampled_from([None, "gzip"]),
)
def test_every_record_judged_as_the_reference_judges_it(tmp_path_factory, project, engine, records, fmt, compress):
    make = {"hubble": hubble_line, "vpc": vpc_line, "conntrack": conntrack_line}[fmt]
    rows = [(s, d, sp, dp, p) for s, d, sp, dp, p in records if s != d and not (fmt == "hubble" and p == "ICMP")]
    if not rows:
        return
    path = _write(tmp_path_factory.mktemp("r") / f"records.{fmt}", "\n".join(make(*r) for r in rows) + "\n", compress)
    lines, summary = replay_lines(engine, path)
    assert summary["records"] == len(rows) == len(lines)
    assert summary["files"][0]["format"] == fmt and summary["files"][0]["compression"] == compress
    for line in lines:
        assert line["verdict"] == oracle(project, line), line


# The fields each reader uses, as the published schemas name them: Cilium's flow.proto (JSON
# names of Flow, IP, Layer4/TCP, Endpoint), Calico's flow log, Goldmane's Flow/FlowKey, AWS
# VPC Flow Logs' field names. Renaming any one must change what is read: proof the reader
# reads that name and no other.
HUBBLE_FIELDS = {
    ("flow", "time"): "2024-05-01T10:00:00Z",
    ("flow", "verdict"): "DROPPED",
    ("flow", "IP", "source"): "10.0.1.10",
    ("flow", "IP", "destination"): "10.0.2.20",
    ("flow", "l4", "TCP", "source_port"): 40000,
    ("flow", "l4", "TCP", "destination_port"): 8080,
    ("flow", "is_reply"): True,
    ("flow", "source", "namespace"): "frontend",
    ("flow", "source", "pod_name"): "web",
    ("flow", "traffic_direction"): "INGRESS",
}
CALICO_FIELDS = {
    ("start_time",): 1700000000,
    ("end_time",): 1700000300,
    ("action",): "deny",
    ("source_ip",): "10.0.1.10",
    ("dest_ip",): "10.0.2.20",
    ("dest_port",): 8080,
    ("proto",): "tcp",
    ("packets_in",): 3,
    ("packets_out",): 4,
    ("bytes_in",): 100,
    ("bytes_out",): 200,
    ("num_flows_started",): 5,
    ("source_port",): 40000,
    ("reporter",): "dst",
}
GOLDMANE_FIELDS = {
    ("Key", "source_name"): "web",
    ("Key", "source_namespace"): "frontend",
    ("Key", "source_type"): "WorkloadEndpoint",
    ("Key", "dest_name"): "api",
    ("Key", "dest_namespace"): "backend",
    ("Key", "dest_type"): "WorkloadEndpoint",
    ("Key", "dest_port"): "8080",
    ("Key", "proto"): "TCP",
    ("Key", "action"): "Deny",
    ("Key", "reporter"): "Src",
    ("start_time",): "1700000000",
    ("end_time",): "1700000015",
    ("packets_in",): "2",
    ("bytes_out",): "70",
    ("num_connections_started",): "3",
}


def _nest(fields: dict, renamed: tuple | None = None) -> dict:
    doc: dict = {}
    for path, value in fields.items():
        if path == renamed:
            path = (*path[:-1], "renamed_" + path[-1])
        d = doc
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = value
    return doc


def _read_one(project, fmt: str, text: str, tmp_path: Path) -> tuple:
    path = tmp_path / f"one.{fmt}"
    path.write_text(text)
    reader = RecordReader([str(path)], project.inventory, fmt)
    chunks = list(reader)
    if not chunks:
        return ()
    h, c = chunks[0].headers[0], chunks[0].counts[0]
    return (
        bytes(h["src_addr"]),
        bytes(h["dst_addr"]),
        int(h["sport"]),
        int(h["dport"]),
        int(h["protocol"]),
        int(c["first_ns"]),
        int(c["last_ns"]),
        int(c["packets"]),
        int(c["bytes"]),
        int(c["flows"]),
        int(c["reported"]),
        int(c["reported_at"]),
        int(c["orientation"]),
        int(c["has_src"]),
        int(c["has_dst"]),
        tuple(reader.placer.names),
    )


@pytest.mark.parametrize(
    "fmt,fields", [("hubble", HUBBLE_FIELDS), ("calico", CALICO_FIELDS), ("calico", GOLDMANE_FIELDS)]
)
def test_each_field_read_is_the_one_the_schema_names(project, tmp_path, fmt, fields):
    whole = _read_one(project, fmt, json.dumps(_nest(fields)) + "\n", tmp_path)
    assert whole
    for path in fields:
        renamed = _read_one(project, fmt, json.dumps(_nest(fields, path)) + "\n", tmp_path)
        assert renamed != whole, f"{'.'.join(path)} is not read"


VPC_HEADER = "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status tcp-flags pkt-srcaddr pkt-dstaddr"
VPC_VALUES = (
    "5 123456789012 eni-1 10.0.9.1 10.0.9.2 40000 8080 6 3 180 1700000000 1700000060 REJECT OK 2 10.0.1.10 10.0.2.20"
)


def test_each_vpc_field_read_is_the_one_aws_names(project, tmp_path):
    whole = _read_one(project, "vpc", f"{VPC_HEADER}\n{VPC_VALUES}\n", tmp_path)
    used = [
        "srcport",
        "dstport",
        "protocol",
        "packets",
        "bytes",
        "start",
        "end",
        "action",
        "tcp-flags",
        "pkt-srcaddr",
        "pkt-dstaddr",
    ]
    for name in used:
        # a header naming a field no version has is an unknown field order: nothing read
        header = VPC_HEADER.replace(f" {name}", " version") if name != "version" else VPC_HEADER
        assert _read_one(project, "vpc", f"{header}\n{VPC_VALUES}\n", tmp_path) != whole, name


def test_format_asked_and_found_differ_names_both(project, tmp_path):
    path = tmp_path / "flows.jsonl"
    path.write_text(hubble_line("10.0.1.10", "10.0.2.20", 40000, 8080) + "\n")
    with pytest.raises(RecordError, match=r"flows\.jsonl: --format vpc asked, but the file is Cilium Hubble"):
        list(RecordReader([str(path)], project.inventory, "vpc"))
    path.write_text("no format at all\n")
    with pytest.raises(RecordError, match="not a format --traffic reads"):
        list(RecordReader([str(path)], project.inventory))


def test_a_file_of_no_format_fails_the_run_before_any_is_judged(project, tmp_path):
    good = tmp_path / "flows.jsonl"
    good.write_text(hubble_line("10.0.1.10", "10.0.2.20", 40000, 8080) + "\n")
    bad = tmp_path / "notes.txt"
    bad.write_text("no format at all\n")
    reader = RecordReader([str(good), str(bad)], project.inventory)
    with pytest.raises(RecordError, match=r"notes\.txt: not a format --traffic reads"):
        reader.prepare()
    assert reader.files == []  # nothing was read
    with pytest.raises(RecordError, match=r"flows\.jsonl: --format vpc asked, but the file is Cilium Hubble"):
        RecordReader([str(good)], project.inventory, "vpc").prepare()
    with pytest.raises(RecordError, match=r"missing\.jsonl: cannot open"):
        RecordReader([str(good), str(tmp_path / "missing.jsonl")], project.inventory).prepare()


def test_a_pipe_is_read_once_whole(project, tmp_path):
    """A FIFO (``<(zcat ...)``, a named pipe) cannot be read twice: checking inputs before
    judging leaves it alone, and every record in it is judged."""
    fifo = tmp_path / "flows.pipe"
    os.mkfifo(fifo)
    lines = "".join(hubble_line("10.0.1.10", "10.0.2.20", 40000 + i, 8080) + "\n" for i in range(3))

    def feed() -> None:
        with open(fifo, "w") as f:
            f.write(lines)

    writer = threading.Thread(target=feed)
    writer.start()
    reader = RecordReader([str(fifo)], project.inventory)
    reader.prepare()
    records = sum(len(chunk.headers) for chunk in reader)
    writer.join(timeout=10)
    assert records == 3


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_replay_traffic_cli(tmp_path):
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["records"] == 8 and doc["allowed"]["records"] + doc["denied"]["records"] == 8
    assert {"records", "flows", "packets", "bytes"} <= set(doc["by_rule"][0])
    r = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "vpc-flow-logs.txt"))
    assert r.returncode == 0, r.stderr
    assert "flow records" in r.stdout and "Traceback" not in r.stderr


def test_nothing_readable_is_exit_1_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"flow": {"IP": {"source": "10.0.1.10"\n{not json\n')
    r = _cli("replay", str(DEMO), "--traffic", str(bad), "--format", "hubble")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "no record could be read" in r.stderr
    assert f"{bad}:1" in r.stdout and f"{bad}:2" in r.stdout


def test_parquet_vpc_flow_logs_judged_as_their_text(project, engine, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    text = (TRAFFIC / "vpc-flow-logs.txt").read_text().splitlines()
    header, rows = text[0].split(), [r.split() for r in text[1:]]
    ints = {"version", "srcport", "dstport", "protocol", "packets", "bytes", "start", "end", "tcp-flags"}
    table = pa.table(
        {h.replace("-", "_"): [int(r[i]) if h in ints else r[i] for r in rows] for i, h in enumerate(header)}
    )
    path = tmp_path / "flows.parquet"
    pq.write_table(table, str(path))
    from_text, s_text = replay_lines(engine, TRAFFIC / "vpc-flow-logs.txt")
    from_parquet, s_parquet = replay_lines(engine, path)
    assert s_parquet["files"][0]["format"] == "parquet"
    keep = ("src", "dst", "sport", "dport", "proto", "verdict", "flows", "packets", "bytes", "reported", "direction")
    assert [{k: x[k] for k in keep} for x in from_parquet] == [{k: x[k] for k in keep} for x in from_text]


def test_zstd_records_read_as_they_are(engine, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    raw = (TRAFFIC / "hubble.jsonl").read_bytes()
    path = tmp_path / "hubble.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    lines, summary = replay_lines(engine, path)
    plain, _ = replay_lines(engine, TRAFFIC / "hubble.jsonl")
    assert summary["files"][0]["compression"] == "zstd"
    assert [x["verdict"] for x in lines] == [x["verdict"] for x in plain]


SERVICES = """apiVersion: v1
kind: Service
metadata: {name: api-only, namespace: backend}
spec:
  clusterIP: 10.96.0.41
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-only-1, namespace: backend, labels: {kubernetes.io/service-name: api-only}}
addressType: IPv4
endpoints: [{addresses: [10.0.2.20]}]
ports: [{port: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: mixed, namespace: backend}
spec:
  clusterIP: 10.96.0.40
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: mixed-1, namespace: backend, labels: {kubernetes.io/service-name: mixed}}
addressType: IPv4
endpoints: [{addresses: [10.0.2.20]}, {addresses: [10.0.2.30]}]
ports: [{port: 8080, protocol: TCP}]
"""


def test_records_to_a_cluster_ip_judged_as_delivered_to_its_backends(tmp_path):
    """A record to a Service's ClusterIP is judged as kube-proxy delivers it, as replay judges
    packets: its one backend's verdict; with several, allowed only if every backend allows."""
    import shutil

    shutil.copytree(DEMO, tmp_path / "demo")
    (tmp_path / "demo" / "95-services.yaml").write_text(SERVICES)
    project = load_project([tmp_path / "demo"])
    engine = NativeEngine(project.policy_set, project.inventory)
    rows = [
        ("10.0.1.10", "10.96.0.41", 41000, 80),
        ("10.0.1.10", "10.96.0.40", 41001, 80),
        ("10.0.1.10", "10.0.2.20", 41002, 8080),
        ("10.0.1.10", "10.0.2.30", 41003, 8080),
    ]
    path = _write(tmp_path / "svc.jsonl", "\n".join(hubble_line(*r) for r in rows) + "\n")
    lines, summary = replay_lines(engine, path)
    to_api, to_mixed, api, db = lines
    assert (api["verdict"], db["verdict"]) == ("allow", "deny")
    assert to_api["verdict"] == "allow" and to_api["service"]["name"] == "backend/api-only"
    assert to_api["ingress"] == api["ingress"]
    assert to_mixed["verdict"] == "deny" and to_mixed["ingress"] == db["ingress"]
    assert summary["allowed"]["records"] == 2 and summary["denied"]["records"] == 2


@pytest.mark.parametrize("compress", [None, "gzip", "zstd"])
def test_records_across_chunk_boundaries_read_as_one_whole_input(engine, tmp_path, compress):
    """A file of several read chunks (the reader refills two buffers in turn): every record,
    those whose line spans two chunks included, is the record the whole input fed at once
    gives, judged and unjudged."""
    import random

    from pyclassify import _engine, records

    rng = random.Random(7)
    lines = [
        vpc_line(rng.choice(ADDRESSES), rng.choice(ADDRESSES), rng.randrange(1, 65536), rng.randrange(1, 65536))
        + " " * rng.randrange(0, 40)  # lengths that move the boundaries around
        for _ in range(3 * records.CHUNK // 90)
    ]
    text = "\n".join(lines) + "\n"
    assert len(text) > 2 * records.CHUNK
    if compress == "zstd":
        zstandard = pytest.importorskip("zstandard")
        path = tmp_path / "flows.vpc.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    else:
        path = _write(tmp_path / "flows.vpc", text, compress)

    whole = _engine.RecordStream("vpc")
    headers, counts = whole.feed(text.encode(), True)
    chunks = list(RecordReader([str(path)], engine.inventory))
    assert b"".join(c.headers.tobytes() for c in chunks) == headers
    assert b"".join(c.counts.tobytes() for c in chunks) == counts

    judged, summary = replay_lines(engine, path)
    assert len(judged) == len(lines) == summary["records"]
    one = _engine.RecordStream("vpc")
    assert one.read(bytearray(text.encode()), True) == len(lines)  # any byte buffer is read
