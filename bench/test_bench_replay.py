"""End-to-end replay throughput (issue 5, item 6): read + decode + classify (+ conntrack).

A capture of 1,048,576 Ethernet/IPv4/TCP packets between two pods of ``examples/demo``
(frontend/web -> backend/api:8080, 2,000 connections picked up mid-stream) is generated with
numpy in a temp dir and replayed against the demo manifests:

- read + decode alone (the floor: ``pyclassify.capture``),
- replay through the Python API with connection tracking (what ``pyclassify replay`` does),
- replay judging every packet by policy (``--no-conntrack``),
- the ``pyclassify replay --json`` command, end to end (process start and manifest loading included),
  and its startup alone (the same command on a one-packet capture),
- the pure-Python reference evaluator on a 5,000-packet sample (a packet at a time), the baseline;
- the peer (issue 15): libpcap's ``pcap_next_ex`` read loop over the same file
  (``bench/peers/pcap_loop.c``, Debian ``libpcap-dev``), its loop alone and its whole process.

    .venv/bin/python -m pytest bench/test_bench_replay.py -s --benchmark-columns=min,mean,rounds
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.captures import write_tcp_capture
from bench.peers import build_or_skip, run_json
from pyclassify.capture import open_capture
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.reference import Flow, FlowEnd, evaluate
from pyclassify.replay import Replay

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
N = int(os.environ.get("PYCLASSIFY_REPLAY_PACKETS", str(1 << 20)))
RESULTS: dict[str, float] = {}
STARTUP: list[float] = []


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    i = np.arange(N, dtype=np.uint32)
    return write_tcp_capture(tmp_path_factory.mktemp("bench") / "replay.pcap", N, 20000 + i % 2000)


@pytest.fixture(scope="module")
def project():
    return load_project([DEMO])


def report(name: str, seconds: float, n: int) -> None:
    rate = n / seconds
    RESULTS[name] = rate
    print(f"\n{name}: {rate / 1e6:.3f} M packets/s, {1e9 / rate:.0f} ns/packet")


def test_read_decode_floor(benchmark, capture):
    def run() -> int:
        n = 0
        with open_capture(capture, batch_size=65536) as cap:
            for b in cap:
                n += len(b)
        return n

    assert benchmark.pedantic(run, rounds=3, iterations=1) == N
    report("read+decode", benchmark.stats.stats.min, N)


def test_replay_with_conntrack(benchmark, capture, project):
    engine = NativeEngine(project.policy_set, project.inventory)

    def run():
        return Replay(engine).run([str(capture)])

    summary = benchmark.pedantic(run, rounds=3, iterations=1)
    assert summary.packets == N and summary.allowed == N and summary.established > N - 4000
    report("replay, conntrack", benchmark.stats.stats.min, N)


def test_replay_every_packet_by_policy(benchmark, capture, project):
    engine = NativeEngine(project.policy_set, project.inventory)
    summary = benchmark.pedantic(lambda: Replay(engine, conntrack=False).run([str(capture)]), rounds=2, iterations=1)
    assert summary.packets == N and summary.allowed == N
    report("replay, policy per packet", benchmark.stats.stats.min, N)


def test_replay_cli_end_to_end(benchmark, capture):
    def run() -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "pyclassify", "replay", DEMO, "--pcap", str(capture), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(r.stdout)

    doc = benchmark.pedantic(run, rounds=2, iterations=1)
    assert doc["packets"] == N
    report("pyclassify replay (CLI, whole process)", benchmark.stats.stats.min, N)


def test_libpcap_read_loop(benchmark, capture, tmp_path):
    exe = build_or_skip("pcap_loop", tmp_path)
    loops: list[float] = []

    def run() -> dict:
        doc = run_json([str(exe), str(capture)])
        loops.append(doc["seconds"])
        return doc

    doc = benchmark.pedantic(run, rounds=3, iterations=1)
    assert doc["packets"] == N
    print(f"\n{doc['libpcap']}")
    report("libpcap pcap_next_ex loop (C, loop only)", min(loops), N)
    report("libpcap pcap_next_ex loop (C, whole process)", benchmark.stats.stats.min, N)


def test_replay_cli_startup(benchmark, tmp_path):
    """The whole ``pyclassify replay --json`` process on a one-packet capture: interpreter,
    imports, manifests and engine build — the fixed cost inside the whole-process figure."""
    one = write_tcp_capture(tmp_path / "one.pcap", 1, np.array([20000], dtype=np.uint32))

    def run() -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "pyclassify", "replay", DEMO, "--pcap", str(one), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(r.stdout)

    assert benchmark.pedantic(run, rounds=3, iterations=1)["packets"] == 1
    STARTUP.append(benchmark.stats.stats.min)
    print(f"\npyclassify replay startup (one packet, whole process): {STARTUP[-1] * 1e3:.0f} ms")


def test_reference_evaluator_baseline(benchmark, project):
    web, api = project.find_endpoint("frontend/web"), project.find_endpoint("backend/api")
    flows = [
        Flow(
            FlowEnd(None, ipaddress.ip_address("10.0.1.10")),
            FlowEnd(None, ipaddress.ip_address("10.0.2.20")),
            6,
            20000 + k % 2000,
            8080,
        )
        for k in range(5000)
    ]
    assert web and api

    def run() -> int:
        return sum(evaluate(project.policy_set, project.inventory, f).allowed for f in flows)

    assert benchmark.pedantic(run, rounds=2, iterations=1) == 5000
    report("reference evaluator (Python, per packet)", benchmark.stats.stats.min, 5000)


def test_ratios():
    base = RESULTS.get("reference evaluator (Python, per packet)")
    floor = RESULTS.get("read+decode")
    if not base or not floor:
        pytest.skip("run the whole module for ratios")
    for name, rate in RESULTS.items():
        print(f"\n{name}: {rate / base:,.0f}x the reference evaluator, {rate / floor:.2f}x read+decode")
    pcap = RESULTS.get("libpcap pcap_next_ex loop (C, whole process)")
    cli = RESULTS.get("pyclassify replay (CLI, whole process)")
    if cli and STARTUP:
        print(
            f"\npyclassify replay (CLI) without its startup ({STARTUP[-1] * 1e3:.0f} ms): "
            f"{N / (N / cli - STARTUP[-1]) / 1e6:.2f} M packets/s"
        )
    if pcap and cli:
        print(
            f"\npyclassify replay (whole process) / libpcap read loop (whole process): {cli / pcap:.2f}x "
            f"(goal: at least 0.5x and 5 M packets/s)"
        )
