"""``replay --pcap`` on a real Dask cluster (``pyclassify.dask_capture``, a ``dask scheduler``
and two ``dask worker`` processes started here): each capture read once and split by
connection, the partitions give the in-process summary on random captures (connections cut
across files, pickups mid-stream, ICMP queries and errors, DNS answers teaching a domain rule,
http requests, malformed and not-IP frames), in process (``PartitionReplay``) and on the
cluster; a worker killed mid-run loses and doubles nothing; the command line refuses what it
cannot do there, and names an unreachable scheduler and workers of another version (exit 8)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.captures import (
    ETHERNET,
    PCAP_HEADER,
    dns_message,
    ipv4_frame,
    pcap_record,
    tcp_segment,
    udp_datagram,
    write_tcp_capture,
)
from pyclassify import domains
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.replay import Replay
from tests import dask_cluster
from tests.dask_cluster import shared_client, shared_cluster  # noqa: F401  (fixtures `client`, `cluster`)

ROOT = Path(__file__).resolve().parent.parent
DEMO, DOMAINS = ROOT / "examples" / "demo", ROOT / "examples" / "domains"
WEB, DNS_SERVER, API = bytes([10, 0, 1, 10]), bytes([10, 0, 9, 53]), bytes([10, 0, 2, 20])
#: the summary's fields that are work, not answers (time; the trackers' own counters, which
#: count DNS connections in every partition)
WORK = ("seconds", "packets_per_second", "conntrack")


@pytest.fixture(scope="module")
def project():
    return load_project([DEMO, DOMAINS])


@pytest.fixture(scope="module")
def staged_project():
    """With staged policies too: judged beside, in lanes and trackers of their own."""
    return load_project([DEMO, DOMAINS, ROOT / "examples" / "staged"])


def icmp(kind: int, code: int, rest: bytes) -> bytes:
    return struct.pack(">BBH", kind, code, 0) + rest


def frames_of(events: list[tuple[str, int, int, int]]) -> list[bytes]:
    """Frames for ``events`` ``(kind, a, b, c)``, in order, each a few packets of one kind of
    conversation between web and others (examples/demo, examples/domains)."""
    frames: list[bytes] = []
    for kind, a, b, c in events:
        outside = bytes([198, 18, 0, a % 4])
        port = 40000 + b
        if kind == "dns":  # web asks, the server answers: api.example.com or a name no rule allows
            name = "api.example.com" if c % 2 else "other.example.com"
            frames.append(ipv4_frame(WEB, DNS_SERVER, 17, udp_datagram(port, 53, dns_message(b, name))))
            answer = dns_message(b, name, (outside, 1 + c % 5))
            frames.append(ipv4_frame(DNS_SERVER, WEB, 17, udp_datagram(53, port, answer)))
        elif kind in ("syn", "synack", "ack"):  # parts of a connection to the outside (443)
            flags = {"syn": 0x02, "synack": 0x12, "ack": 0x10}[kind]
            segment = (
                tcp_segment(port, 443, 1000, 0, flags) if kind != "synack" else tcp_segment(443, port, 5000, 0, flags)
            )
            src, dst = (WEB, outside) if kind != "synack" else (outside, WEB)
            frames.append(ipv4_frame(src, dst, 6, segment))
        elif kind == "inside":  # web to api:8080 and back (examples/demo allows it)
            frames.append(ipv4_frame(WEB, API, 6, tcp_segment(port, 8080, 1, 0, 0x02 if c % 3 == 0 else 0x10)))
            if c % 2:
                frames.append(ipv4_frame(API, WEB, 6, tcp_segment(8080, port, 1, 0, 0x12 if c % 3 == 0 else 0x10)))
        elif kind == "ping":  # an echo request and maybe its reply
            frames.append(ipv4_frame(WEB, outside, 1, icmp(8, 0, struct.pack(">HH", b, c))))
            if c % 2:
                frames.append(ipv4_frame(outside, WEB, 1, icmp(0, 0, struct.pack(">HH", b, c))))
        elif kind == "unreachable":  # a router's error quoting web's SYN to the outside
            quoted = ipv4_frame(WEB, outside, 6, tcp_segment(port, 443, 1000, 0, 0x02))[len(ETHERNET) :][:28]
            frames.append(ipv4_frame(bytes([10, 0, 0, 1]), WEB, 1, icmp(3, c % 4, b"\0\0\0\0" + quoted)))
        elif kind == "malformed":
            frames.append(ipv4_frame(WEB, API, 6, tcp_segment(port, 8080, 1, 0, 0x02))[: len(ETHERNET) + 10 + c % 20])
        else:  # ARP: not IP
            frames.append(ETHERNET[:12] + b"\x08\x06" + bytes(28))
    return frames


KINDS = ("dns", "syn", "synack", "ack", "inside", "ping", "unreachable", "malformed", "arp")
events = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 7), st.integers(0, 5), st.integers(0, 11)),
    min_size=1,
    max_size=60,
)


def write_captures(directory: Path, frames: list[bytes], cuts: list[int]) -> list[str]:
    """``frames`` at 100 ms apart, cut into files at ``cuts`` (connections span files)."""
    bounds = [0, *sorted({min(c, len(frames)) for c in cuts}), len(frames)]
    paths = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        path = directory / f"part-{i}.pcap"
        path.write_bytes(PCAP_HEADER + b"".join(pcap_record(k * 100_000, frames[k]) for k in range(lo, hi)))
        paths.append(str(path))
    return paths


def in_process(project: Any, paths: list[str], conntrack: bool = True, out: Any = None) -> dict[str, Any]:
    """One ``Replay`` over ``paths`` as the command makes it, domain facts of its own; ``out``:
    where its lines go."""
    inventory = dataclasses.replace(project.inventory, domains=domains.new_facts())
    engine = NativeEngine(project.policy_set, inventory)
    view = project.policy_set.staged_view()
    staged = None if view is None else engine.update(view, inventory)
    replay = Replay(engine, conntrack=conntrack, staged=staged, dns=domains.DnsLearner(inventory.domains), out=out)
    replay.run(paths)
    return replay.summary_json()


def answer(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in WORK and k != "cluster"}


def plain_engine(project: Any) -> NativeEngine:
    """The engine the client sends: its inventory learns nothing (each task's does)."""
    return NativeEngine(project.policy_set, project.inventory)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=events,
    cuts=st.lists(st.integers(0, 80), max_size=3),
    parts=st.integers(1, 5),
    staged=st.booleans(),
    conntrack=st.booleans(),
    batch_size=st.sampled_from([1, 3, 16, 65536]),
)
def test_partitions_by_connection_add_up_to_one_replay(
    tmp_path_factory, project, staged_project, events, cuts, parts, staged, conntrack, batch_size
):
    """``batch_size``: of the reads, and about of a partition's batches (joined from the reads'
    shares)."""
    from pyclassify import dask_capture

    project = staged_project if staged else project
    paths = write_captures(tmp_path_factory.mktemp("captures"), frames_of(events), cuts)
    one_run = io.StringIO()
    whole = in_process(project, paths, conntrack, out=one_run)
    options = dask_capture.CaptureOptions(conntrack=conntrack)
    results, lines = [], []
    for part in range(parts):
        inventory = dataclasses.replace(project.inventory, domains=domains.new_facts())
        replay = dask_capture.replay_for(NativeEngine(project.policy_set, inventory), options, part, parts)
        replay.batch_size = batch_size
        replay.out = io.StringIO()
        replay.run(paths)
        results.append(dask_capture.PartitionResult(replay.summary, replay.dns.to_json() if replay.dns else None))
        lines += [json.loads(line) for line in replay.out.getvalue().splitlines()]
    merged = dask_capture.merge_results(*results)
    assert merged.summary.packets == sum(r.summary.packets for r in results) == whole["packets"]
    assert answer(dask_capture.summary_json(plain_engine(project), merged, options)) == answer(whole)
    # each packet's line written by one partition, as one run writes it
    assert len(lines) == whole["packets"]
    assert sorted(lines, key=lambda line: line["index"]) == [
        json.loads(line) for line in one_run.getvalue().splitlines()
    ]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=events, cuts=st.lists(st.integers(0, 80), max_size=3), parts=st.integers(2, 4))
def test_any_capture_judged_on_the_cluster_gives_the_in_process_answer(
    tmp_path_factory, project, client, events, cuts, parts
):
    from pyclassify import dask_capture

    paths = write_captures(tmp_path_factory.mktemp("captures"), frames_of(events), cuts)
    doc, _, info = dask_capture.run(plain_engine(project), paths, client=client, parts=parts)
    assert answer(doc) == answer(in_process(project, paths))
    assert info["tasks"] == info["partitions"] == parts


def test_the_domain_rule_sees_the_answers_in_every_partition(project, tmp_path):
    """A connection allowed only by what an answer taught is judged where its key falls; the
    answer's connection is another's: unless every partition learned it, the SYN is denied."""
    from pyclassify import dask_capture

    events = [("dns", 1, b, 1) for b in range(6)] + [("syn", 1, b, 0) for b in range(6)]
    paths = write_captures(tmp_path, frames_of(events), [6])
    whole = in_process(project, paths)
    rows = {(r["policy"], r["rule"], r["verdict"]): r["packets"] for r in whole["by_rule"]}
    assert rows[("GlobalNetworkPolicy/web-egress-by-name", 2, "allow")] == 6  # the SYNs, by the domain rule
    options = dask_capture.CaptureOptions()
    results = []
    for part in range(3):
        inventory = dataclasses.replace(project.inventory, domains=domains.new_facts())
        replay = dask_capture.replay_for(NativeEngine(project.policy_set, inventory), options, part, 3)
        replay.run(paths)
        results.append(dask_capture.PartitionResult(replay.summary, replay.dns.to_json() if replay.dns else None))
        assert replay.dns is not None and replay.dns.learned == whole["dns"]["learned"] > 0
    assert sum(1 for r in results if r.summary.packets) > 1  # the work was spread
    merged = dask_capture.merge_results(*results)
    assert merged.summary.packets == whole["packets"] and merged.summary.flows == whole["flows"]
    assert answer(dask_capture.summary_json(plain_engine(project), merged, options)) == answer(whole)


@pytest.mark.parametrize(("parts", "batch_size"), [(1, 65536), (2, 5), (3, 65536), (5, 2)])
def test_http_requests_are_judged_from_the_payloads_routed_with_their_packets(parts, batch_size):
    """http rules read each TCP payload: the task that reads the capture sends the payloads with
    the headers, and the partitions' requests and verdicts add up to one replay's."""
    from pyclassify import dask_capture, httprules

    project = load_project([DEMO, ROOT / "examples" / "http"])
    assert httprules.has_http_rules(project.policy_set)
    paths = [str(ROOT / "pcaps" / "http.pcap"), str(ROOT / "pcaps" / "demo.pcap")]
    whole = Replay(plain_engine(project), http=True)
    whole.run(paths)
    expected = whole.summary_json()
    assert expected["http"]["requests_allowed"] and expected["http"]["requests_denied"]
    options = dask_capture.CaptureOptions()
    results = []
    for part in range(parts):
        replay = dask_capture.replay_for(plain_engine(project), options, part, parts)
        replay.batch_size = batch_size
        replay.run(paths)
        results.append(dask_capture.PartitionResult(replay.summary))
    merged = dask_capture.merge_results(*results)
    assert answer(dask_capture.summary_json(plain_engine(project), merged, options)) == answer(expected)


def _payloads(batches: list[Any]) -> tuple[list[bytes], list[tuple[int, bytes]], list[bytes]]:
    """What a partition's routed batches hold, batch boundaries aside: each packet's headers and
    TCP payload, and the DNS answers' payloads by packet."""
    headers, answers, segments = [], [], []
    first = 0
    for b in batches:
        headers += [bytes(row) for row in b.headers.view(f"V{b.headers.dtype.itemsize}")]
        segments += [b.data[s:e] for s, e, _ in b.segments]
        answers += [(first + int(row), b.data[s:e]) for row, s, e in b.dns]
        first += len(b)
    return headers, answers, segments


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("batch_size", [1, 2, 3, 7])
def test_a_partitions_batches_joined_hold_what_one_read_gives(parts, batch_size):
    """Small reads' shares joined into a partition's batches: the same packets, payloads and DNS
    answers as one large read gives, whatever the boundaries."""
    from pyclassify.capturepartition import route

    for pcap in ("http.pcap", "domains.pcap"):
        path = str(ROOT / "pcaps" / pcap)
        one = route(path, parts, dns=True, http=True)
        small = route(path, parts, dns=True, http=True, batch_size=batch_size)
        assert small.packets == one.packets
        for k in range(parts):
            assert _payloads(small.parts[k]) == _payloads(one.parts[k])
            assert any(len(b) > 1 for b in small.parts[k]) or batch_size == 1 or not one.parts[k]


def test_routed_packets_are_counted_at_their_size_and_hold_no_more(tmp_path):
    """Dask's memory accounting sees a routed capture's arrays (it would count a few dozen bytes
    otherwise, and neither spill nor pause), and a partition's last, short batch does not keep
    a buffer sized for two read batches alive."""
    import numpy as np
    from dask.sizeof import sizeof

    from pyclassify.capturepartition import route

    path = write_tcp_capture(tmp_path / "flows.pcap", 5_000, 20000 + np.arange(5_000) % 300)
    routed = route(str(path), 3, batch_size=1024)
    batches = [b for part in routed.parts for b in part]
    held = sum(b.headers.nbytes + b.judging.nbytes * 3 for b in batches)
    assert sum(len(b) for b in batches) >= 5_000 and sizeof(routed) >= held
    for part in routed.parts:
        last = part[-1]
        assert last.headers.base is None or last.headers.base.nbytes < 2 * last.headers.nbytes


def test_each_capture_is_read_once_on_the_cluster(project, client, tmp_path):
    """One task reads each capture, whatever the partitions: the shuffle, not a read per
    partition."""
    from pyclassify import dask_capture

    events = [("inside", a, b, c) for a in range(3) for b in range(4) for c in range(3)]
    paths = write_captures(tmp_path, frames_of(events), [10, 40])
    doc, _, info = dask_capture.run(plain_engine(project), paths, client=client, parts=4)
    assert info["reads"] == len(paths) == 3 and info["partitions"] == 4
    assert answer(doc) == answer(in_process(project, paths))


def test_a_worker_killed_mid_run_loses_no_packet_and_counts_none_twice(tmp_path, project):
    """Twelve partitions of a capture on two workers; when the first partition's summary is in,
    the worker holding it is killed (SIGKILL): its summaries are judged again on the other."""
    import numpy as np
    from distributed import Client

    from pyclassify import dask_capture

    dask_cluster.dask_command()
    running = dask_cluster.start(tmp_path / "dask", workers=2)
    try:
        path = write_tcp_capture(tmp_path / "flows.pcap", 200_000, 20000 + np.arange(200_000) % 3000)
        extra = write_captures(tmp_path, frames_of([("dns", 1, 2, 1), ("syn", 1, 2, 0), ("ping", 3, 1, 1)]), [])
        paths = [str(path), *extra]
        whole = in_process(project, paths)
        killed: list[str] = []
        with Client(running.address, timeout=dask_cluster.STARTUP) as client:
            pids = client.run(os.getpid)

            def kill_a_holder(done: int, total: int, records: int) -> None:
                if killed:
                    return
                held = {
                    w for key, ws in client.who_has().items() if str(key).startswith("pyclassify-judge-") for w in ws
                }
                assert held, "a partition's summary is done but no worker holds it"
                victim = sorted(held)[0]
                os.kill(pids[victim], signal.SIGKILL)
                killed.append(victim)

            doc, _, info = dask_capture.run(
                plain_engine(project), paths, client=client, parts=12, progress=kill_a_holder
            )
            assert killed and info["workers"] == 1 and killed[0] not in info["engine_seconds"]
        assert answer(doc) == answer(whole)
        assert doc["packets"] == whole["packets"] == 200_005 and doc["flows"] == whole["flows"]
    finally:
        running.stop()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyclassify", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_the_command_on_the_cluster_answers_as_in_process(cluster):
    pcaps = ["--pcap", str(ROOT / "pcaps" / "demo.pcap"), "--pcap", str(ROOT / "pcaps" / "domains.pcap")]
    here = _cli("replay", str(DEMO), str(DOMAINS), *pcaps, "--json")
    there = _cli("replay", str(DEMO), str(DOMAINS), *pcaps, "--json", "--scheduler", cluster.address)
    assert here.returncode == 0, here.stderr
    assert there.returncode == 0, there.stderr + cluster.logs()
    local, distributed = json.loads(here.stdout), json.loads(there.stdout)
    assert local["dns"]["learned"] > 0 and local["by_rule"]
    assert answer(distributed) == answer(local)
    assert distributed["cluster"]["workers"] == 2 and distributed["cluster"]["partitions"] == 2


def test_the_partitions_write_each_packets_line_as_one_run_does(cluster, tmp_path):
    """``--out-dir``: each partition's lines file on the workers, ``index.json`` naming them;
    together, ordered by index, they are the lines ``--out`` writes in one process."""
    pcaps = ["--pcap", str(ROOT / "pcaps" / "demo.pcap"), "--pcap", str(ROOT / "pcaps" / "domains.pcap")]
    here = _cli("replay", str(DEMO), str(DOMAINS), *pcaps, "--out", str(tmp_path / "one.jsonl"))
    assert here.returncode == 0, here.stderr
    directory = tmp_path / "lines"
    there = _cli(
        "replay", str(DEMO), str(DOMAINS), *pcaps, "--json", "--scheduler", cluster.address, "--out-dir", str(directory)
    )
    assert there.returncode == 0, there.stderr + cluster.logs()
    index = json.loads((directory / "index.json").read_text())
    assert json.loads(there.stdout)["cluster"]["index"] == str(directory / "index.json")
    assert [p["lines"] for p in index["parts"]] == ["part-00000.jsonl", "part-00001.jsonl"]
    lines = []
    for part in index["parts"]:
        got = [json.loads(line) for line in (directory / part["lines"]).read_text().splitlines()]
        assert len(got) == part["packets"] and [g["index"] for g in got] == sorted(g["index"] for g in got)
        lines += got
    expected = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    assert index["packets"] == len(expected) > 0
    assert sorted(lines, key=lambda line: line["index"]) == expected
    in_process = _cli("replay", str(DEMO), *pcaps[:2], "--out-dir", str(directory))
    assert in_process.returncode == 2 and "give --scheduler or --workers" in in_process.stderr


def test_what_the_cluster_cannot_do_for_captures_is_refused(tmp_path):
    pcap = str(ROOT / "pcaps" / "demo.pcap")
    for extra in (("--out", str(tmp_path / "v.jsonl")), ("--denied", str(tmp_path / "d.pcap"))):
        refused = _cli("replay", str(DEMO), "--pcap", pcap, "--workers", "2", *extra)
        assert refused.returncode == 2 and "written in-process" in refused.stderr
    stdin = _cli("replay", str(DEMO), "--pcap", "-", "--scheduler", "tcp://127.0.0.1:1")
    assert stdin.returncode in (2, 8) and "standard input" in stdin.stderr
    both = _cli("replay", str(DEMO), "--pcap", pcap, "--scheduler", "tcp://127.0.0.1:1", "--workers", "2")
    assert both.returncode == 2 and "give one of them" in both.stderr


def test_an_unreachable_scheduler_is_named_with_exit_8():
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    result = _cli(
        "replay",
        str(DEMO),
        "--pcap",
        str(ROOT / "pcaps" / "demo.pcap"),
        "--scheduler",
        address,
        env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
    )
    assert result.returncode == 8, result.stderr
    assert f"cannot reach the Dask scheduler at {address}" in result.stderr and "Traceback" not in result.stderr


def test_workers_of_another_version_are_refused_with_exit_8(tmp_path):
    """As for flow records: a worker whose Python finds another pyclassify first is named."""
    dask_cluster.dask_command()
    other = tmp_path / "other"
    (other / "pyclassify-0.0.1.dist-info").mkdir(parents=True)
    (other / "pyclassify-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pyclassify\nVersion: 0.0.1\n"
    )
    running = dask_cluster.LocalDask(tmp_path)
    try:
        running.start_scheduler()
        running.start_worker(env={"PYTHONPATH": str(other) + os.pathsep + os.environ.get("PYTHONPATH", "")})
        running.wait_for_workers(1)
        result = _cli("replay", str(DEMO), "--pcap", str(ROOT / "pcaps" / "demo.pcap"), "--scheduler", running.address)
    finally:
        running.stop()
    assert result.returncode == 8, result.stderr
    assert "another pyclassify version" in result.stderr and "runs 0.0.1" in result.stderr


def test_ctrl_c_prints_what_was_judged_and_leaves_nothing_on_the_cluster(cluster, client, tmp_path):
    """SIGINT while the partitions are judged: exit 130, the summary marked interrupted (the
    partitions judged whole, a part of every capture: never more packets than the captures
    hold), and the tasks and the engine gone from the cluster."""
    import time

    import numpy as np

    # captures long enough that the run cannot end before the signal: one, linked 300 times
    packets = 200_000
    first = write_tcp_capture(tmp_path / "long-000.pcap", packets, np.arange(packets) % 28000 + 32768)
    paths = [str(first)]
    for i in range(1, 300):
        paths.append(str(tmp_path / f"long-{i:03d}.pcap"))
        os.link(first, paths[-1])
    pcaps = [a for p in paths for a in ("--pcap", p)]
    proc = dask_cluster.interruptible(["replay", str(DEMO), *pcaps, "--json", "--scheduler", cluster.address], ROOT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not dask_cluster.our_tasks(client):
        time.sleep(0.05)
    time.sleep(0.5)  # the partitions under way
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, errors = proc.communicate(timeout=120)
    assert proc.returncode == 130, errors
    doc = json.loads(out)
    assert doc["interrupted"]
    assert 0 <= doc["packets"] < packets * len(paths)
    dask_cluster.assert_nothing_left(client)
