"""Flow records judged per second, per format, beside the same format's plain parse rate
measured in the same run; peak memory at two input sizes (flat: streamed); the traffic-aware
``diff`` over many records at cluster size beside judging every record twice.

Per format (records of the 10k-pod cluster's traffic, ``bench.flowrecords``):

- judged: ``pyclassify replay cluster.json --traffic FILE --json`` as a process, its own
  ``records_per_second`` (reading, decoding, judging, accounting; loading the cluster apart)
  and the process's peak RSS, at N and 4N records;
- plain parse, the baseline: Hubble ``json.loads`` per line (and orjson), VPC and conntrack
  ``str.split`` per line, IPFIX the decoder alone (``_engine.RecordStream``, no judging),
  Parquet ``pyarrow.parquet.read_table``.

``diff --traffic``: ``traffic_diff`` over M IPFIX records with a NetworkPolicy changed, beside
reading the same records and judging each batch under both engines without aggregating.

    .venv/bin/python -m pytest bench/test_bench_records.py -s
    PYCLASSIFY_RECORDS=200000 PYCLASSIFY_DIFF_RECORDS=1000000 PYCLASSIFY_RECORD_PODS=1000 \\
        .venv/bin/python -m pytest bench/test_bench_records.py -s     # smaller
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cluster import generate, random_change, write_json_compact
from bench.flowrecords import write

PODS = int(os.environ.get("PYCLASSIFY_RECORD_PODS", "10000"))
RECORDS = int(os.environ.get("PYCLASSIFY_RECORDS", "1000000"))
DIFF_RECORDS = int(os.environ.get("PYCLASSIFY_DIFF_RECORDS", "10000000"))
FORMATS = ("hubble", "vpc", "conntrack", "ipfix", "parquet")
RSS = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(p.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


@pytest.fixture(scope="module")
def cluster_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("records")
    cluster = generate(PODS, seed=1)
    return cluster, write_json_compact(cluster, out / "cluster.json"), out


def _judged(cluster_json: Path, path: Path) -> tuple[float, int, dict]:
    cmd = [
        sys.executable,
        "-c",
        RSS,
        sys.executable,
        "-m",
        "pyclassify.cli",
        "replay",
        str(cluster_json),
        "--traffic",
        str(path),
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    *doc, rss = proc.stdout.strip().rsplit("\n", 1)
    summary = json.loads(doc[0])
    return summary["records_per_second"], int(rss) // 1024, summary


def _plain(fmt: str, path: Path) -> float:
    t = time.perf_counter()
    n = 0
    if fmt == "hubble":
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
                n += 1
    elif fmt in ("vpc", "conntrack"):
        with open(path, "rb") as f:
            for line in f:
                line.split()
                n += 1
    elif fmt == "ipfix":
        from pyclassify import _engine

        s = _engine.RecordStream("netflow")
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                h, _ = s.feed(chunk, not chunk)
                n += len(h) // 64
                if not chunk:
                    break
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        n = pq.read_table(str(path)).num_rows
    return n / (time.perf_counter() - t)


def _orjson(path: Path) -> float:
    import orjson

    t = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
    return n / (time.perf_counter() - t)


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_judged_per_second_beside_plain_parse(cluster_files, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    cluster, cluster_json, out = cluster_files
    small = write(cluster, out / f"records-{fmt}-1x", fmt, RECORDS)
    large = write(cluster, out / f"records-{fmt}-4x", fmt, 4 * RECORDS)
    plain = _plain(fmt, small)
    rate, rss, summary = _judged(cluster_json, small)
    rate4, rss4, summary4 = _judged(cluster_json, large)
    assert summary["records"] == RECORDS and summary4["records"] == 4 * RECORDS
    extra = f"; orjson {_orjson(small):,.0f}/s" if fmt == "hubble" else ""
    print(
        f"\n{fmt}: judged {rate:,.0f} records/s ({summary['decisions']:,} distinct decisions), "
        f"{rate4:,.0f}/s at {4 * RECORDS:,} ({summary4['decisions']:,}); plain parse {plain:,.0f}/s{extra}; "
        f"ratio {rate / plain:.2f}, {rate4 / plain:.2f}; peak RSS {rss} MB at {RECORDS:,} records, "
        f"{rss4} MB at {4 * RECORDS:,}; file {small.stat().st_size / 1e6:.0f} MB"
    )


def test_traffic_diff_beside_judging_every_record_twice(cluster_files):
    from pyclassify.engine import EngineState
    from pyclassify.project import load_project
    from pyclassify.records import RecordReader
    from pyclassify.trafficdiff import traffic_diff

    cluster, cluster_json, out = cluster_files
    path = write(cluster, out / "diff.ipfix", "ipfix", DIFF_RECORDS)
    change = random_change(cluster, random.Random(16), "networkpolicy-changed")
    (out / "change.json").write_text(json.dumps(change.after))
    t = time.perf_counter()
    old = load_project([cluster_json])
    new = old.applied(load_project([out / "change.json"]))
    loaded = time.perf_counter() - t
    t = time.perf_counter()
    result = traffic_diff(old.policy_set, new.policy_set, old.inventory, [str(path)])
    seconds = time.perf_counter() - t
    state = EngineState()
    a, b = state.update(old.policy_set, old.inventory), state.update(new.policy_set, new.inventory)
    t = time.perf_counter()
    n = 0
    for chunk in RecordReader([str(path)], old.inventory):
        a.judge(chunk.headers)
        b.judge(chunk.headers)
        n += len(chunk.headers)
    twice = time.perf_counter() - t
    doc = result.to_json()["summary"]
    assert doc["observed"]["records"] == n == DIFF_RECORDS
    print(
        f"\ndiff --traffic over {DIFF_RECORDS:,} IPFIX records at {PODS:,} pods: {seconds:.1f} s "
        f"({DIFF_RECORDS / seconds:,.0f} records/s; loading both sets {loaded:.1f} s apart); judging every record "
        f"twice, no aggregation: {twice:.1f} s; ratio {seconds / twice:.2f}; {doc['changes']} changes, "
        f"{doc['closed_flows'] + doc['opened_flows']:,} flows flipped"
    )
