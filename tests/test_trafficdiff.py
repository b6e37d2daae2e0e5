"""``diff --traffic``: the observed connections a change flips are exactly those whose verdict
differs when every record is judged alone under both policy sets (the reference evaluator), with
their counts summed per (groups, protocol, port, decisions)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify import reference
from pyclassify.flow import Flow, FlowEnd
from pyclassify.project import load_project
from pyclassify.trafficdiff import traffic_diff

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
CHANGE = ROOT / "examples" / "changes" / "db-behind-pgbouncer.yaml"
TRAFFIC = ROOT / "examples" / "traffic"
ADDRESSES = ["10.0.1.10", "10.0.2.20", "10.0.2.30", "10.0.3.40", "203.0.113.7", "198.51.100.9", "8.8.8.8"]


@pytest.fixture(scope="module")
def sets():
    old = load_project([DEMO])
    new = old.applied(load_project([CHANGE]))
    return old, new


def conntrack_line(src: str, dst: str, sport: int, dport: int, packets: int) -> str:
    return (
        f"tcp      6 100 ESTABLISHED src={src} dst={dst} sport={sport} dport={dport} packets={packets} "
        f"bytes={packets * 60} src={dst} dst={src} sport={dport} dport={sport} packets=1 bytes=60 [ASSURED] use=1"
    )


record = st.tuples(
    st.sampled_from(ADDRESSES),
    st.sampled_from(ADDRESSES),
    st.integers(32768, 65535),
    st.sampled_from([22, 53, 80, 5432, 6432, 8080, 9090]),
    st.integers(1, 50),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record, min_size=1, max_size=60))
def test_equals_judging_every_record_under_both_sets(tmp_path_factory, sets, records):
    old, new = sets
    rows = [r for r in records if r[0] != r[1]]
    if not rows:
        return
    path = tmp_path_factory.mktemp("t") / "conntrack.txt"
    path.write_text("\n".join(conntrack_line(*r) for r in rows) + "\n")
    result = traffic_diff(old.policy_set, new.policy_set, old.inventory, [str(path)])
    expect_flows = {"closed": 0, "opened": 0}
    expect_packets = {"closed": 0, "opened": 0}
    flipped = 0
    for src, dst, sport, dport, packets in rows:
        flow = Flow(FlowEnd(ip=ipaddress.ip_address(src)), FlowEnd(ip=ipaddress.ip_address(dst)), 6, sport, dport)
        a = reference.evaluate(old.policy_set, old.inventory, flow).verdict
        b = reference.evaluate(new.policy_set, new.inventory, flow).verdict
        if a != b:
            flipped += 1
            which = "closed" if a == "allow" else "opened"
            expect_flows[which] += 1
            expect_packets[which] += packets + 1
    got = {"closed": [0, 0, 0], "opened": [0, 0, 0]}
    for c in result.changes:
        acc = got["closed" if c.closed else "opened"]
        acc[0] += c.measures[0]
        acc[1] += c.measures[1]
        acc[2] += c.measures[2]
    assert got["closed"][0] + got["opened"][0] == flipped
    assert (got["closed"][1], got["opened"][1]) == (expect_flows["closed"], expect_flows["opened"])
    assert (got["closed"][2], got["opened"][2]) == (expect_packets["closed"], expect_packets["opened"])
    # newly denied first
    closed = [c.closed for c in result.changes]
    assert closed == sorted(closed, reverse=True)


def test_cli_exit_5_when_observed_traffic_closes():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify.cli",
            "diff",
            str(DEMO),
            "--apply",
            str(CHANGE),
            "--traffic",
            str(TRAFFIC / "hubble.jsonl"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 5, r.stderr
    doc = json.loads(r.stdout)
    first = doc["changes"][0]
    assert first["was"]["verdict"] == "allow" and first["now"]["verdict"] == "deny"
    assert (first["protocol"], first["port"], first["flows"]) == ("TCP", 5432, 2)
    assert first["from"]["endpoints"] == ["backend/api"] and first["to"]["endpoints"] == ["backend/db"]
    assert first["first"] == "2024-05-01T10:00:01Z" and first["last"] == "2024-05-01T10:00:02Z"


def diff_answer(doc: dict) -> dict:
    """A diff's document without how long it took and the decisions made (work, not answers)."""
    return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k not in ("seconds", "decisions")}}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(record, min_size=1, max_size=20), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 6), max_size=2),
)
def test_diffs_of_files_apart_merge_into_the_whole_runs(tmp_path_factory, sets, files, cuts):
    from pyclassify.recordreplay import new_judge
    from pyclassify.trafficdiff import DiffEngines, merge_diffs

    old, new = sets
    d = tmp_path_factory.mktemp("t")
    paths = []
    for i, rows in enumerate(files):
        path = d / f"part-{i}.txt"
        path.write_text("".join(conntrack_line(*r) + "\n" for r in rows))
        paths.append(str(path))
    engines = DiffEngines(old.policy_set, new.policy_set, old.inventory)
    whole = traffic_diff(old.policy_set, new.policy_set, old.inventory, paths, rule_usage=True, engines=engines)
    parts = [
        traffic_diff(old.policy_set, new.policy_set, old.inventory, [p], rule_usage=True, engines=engines)
        for p in paths
    ]
    # one judge keeping its keys from file to file (as each worker of a cluster keeps one)
    kept = new_judge([engines.old, engines.new], None, engines.services, logs=True, keep_keys=True)
    kept_parts = [
        traffic_diff(old.policy_set, new.policy_set, old.inventory, [p], rule_usage=True, engines=engines, judge=kept)
        for p in paths
    ]
    bounds = sorted({0, len(parts), *(c for c in cuts if c <= len(parts))})
    grouped = merge_diffs(*(merge_diffs(*parts[a:b]) for a, b in zip(bounds, bounds[1:])))
    expected = diff_answer(whole.to_json())
    assert diff_answer(merge_diffs(*parts).to_json()) == expected
    assert diff_answer(merge_diffs(*kept_parts).to_json()) == expected
    assert merge_diffs(*kept_parts).usage == whole.usage
    assert diff_answer(grouped.to_json()) == expected
    assert whole.usage is not None  # no rule may decide a record outside every policy: by_rule may be empty
    assert merge_diffs(*parts).usage == grouped.usage == whole.usage


def test_cli_unreadable_traffic_is_an_error_naming_the_file(tmp_path):
    missing = tmp_path / "nowhere.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "pyclassify.cli", "diff", str(DEMO), "--apply", str(CHANGE), "--traffic", str(missing)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 1, r.stderr
    assert f"{missing}: cannot open" in r.stderr and "Traceback" not in r.stderr
