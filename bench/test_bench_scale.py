"""Cluster scale (issue 11): a generated cluster (``bench.cluster``: N pods in N/100
namespaces, N/10 NetworkPolicies, 5 ANPs, a BANP, a Calico tier of 10 GNPs) at 1k and 10k pods
(``PYCLASSIFY_SCALE_SIZES=1000,10000,100000`` adds 100k; ``PYCLASSIFY_SCALE_PACKETS`` and
``PYCLASSIFY_SCALE_CHANGES`` shrink the capture and the changes for a smoke run), each figure
beside a baseline measured in the same run:

- normalize (documents to IR and inventory) and engine build, CPU seconds;
- ``pyclassify explain`` as a whole process: wall time and peak RSS;
- a change in force (one pod added, a pod relabelled, a namespace relabelled, a NetworkPolicy
  changed, each normalized and applied as one delta: ``LiveProject.apply``), p50 and p99,
  against a full rebuild of the engine;
- decisions/s with every packet judged by policy (``judge`` without a tracker), on the real
  capture and on random pod pairs: through the decision memo (warmed by a pass, as on a live
  node), by the compiled programs alone (a cold memo), and walking every packet's rules, and the
  reference evaluator on a sample;
- the adversarial policy sets (``bench.cluster.adversarial_policy``): one rule of thousands of
  CIDRs crossed with thousands of port ranges (compiled: its rows add up, they do not multiply),
  and thousands of rules of one CIDR and range each (past the compiled form's memory bound:
  walked), their build and decisions;
- replay with connection tracking through the API (``judge`` with a tracker) against reading
  and decoding alone, and ``pyclassify replay --json`` as a whole process.

Loading (MB/s against PyYAML's C loader and ``json.loads``) is ``bench/test_bench_load.py``.

    .venv/bin/python -m pytest bench/test_bench_scale.py -s -p no:cacheprovider
"""

from __future__ import annotations

import copy
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.cluster import (
    adversarial_policy,
    apply_change,
    generate,
    random_change,
    write_capture,
    write_json_compact,
    write_yaml,
)
from bench.peers import build_or_skip
from pyclassify.batch import FLAG_HAS_PORTS, new_batch
from pyclassify.bulk import collector_paused
from pyclassify.capture import open_capture
from pyclassify.documents import Document, Problems
from pyclassify.engine import VERDICT_DTYPE, NativeEngine, Tracker
from pyclassify.live import LiveProject
from pyclassify.loader import iter_paths
from pyclassify.project import build_project
from pyclassify.reference import Flow, FlowEnd, evaluate
from pyclassify.replay import Replay

SIZES = tuple(int(n) for n in os.environ.get("PYCLASSIFY_SCALE_SIZES", "1000,10000").split(","))
CHANGES = int(os.environ.get("PYCLASSIFY_SCALE_CHANGES", "200"))
RESULTS: dict[str, dict[int, str]] = {}
PYCLASSIFY = str(Path(sys.executable).with_name("pyclassify"))


def record(what: str, pods: int, text: str) -> None:
    RESULTS.setdefault(what, {})[pods] = text
    print(f"\n[{pods} pods] {what}: {text}")


def cpu(f, rounds: int = 3) -> tuple[float, object]:
    """Best CPU time of ``rounds`` runs of ``f`` (these machines are shared: CPU time, best of)."""
    best, value = float("inf"), None
    for _ in range(rounds):
        t = time.process_time()
        value = f()
        best = min(best, time.process_time() - t)
    return best, value


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{n}pods")
def cluster(request, tmp_path_factory):
    pods = request.param
    out = tmp_path_factory.mktemp(f"cluster{pods}")
    c = generate(pods, seed=1)
    (out / "yaml").mkdir()
    (out / "json").mkdir()
    write_yaml(c, out / "yaml" / "cluster.yaml")
    write_json_compact(c, out / "json" / "cluster.json")
    packets, flows = (1_000_000, 20_000) if pods >= 10_000 else (200_000, 2_000)
    packets = int(os.environ.get("PYCLASSIFY_SCALE_PACKETS", packets))  # the test run's smoke size
    write_capture(c, out / "cluster.pcap", packets, flows, seed=1)
    with collector_paused():
        docs = list(iter_paths([str(out / "yaml")], Problems()))
    return {"pods": pods, "dir": out, "cluster": c, "docs": docs}


@pytest.fixture(scope="module")
def project(cluster):
    with collector_paused():
        p = build_project(cluster["docs"], Problems())
    assert not p.problems.errors
    return p


def test_normalize_and_build(cluster, project):
    pods = cluster["pods"]
    with collector_paused():
        t_norm, _ = cpu(lambda: build_project(cluster["docs"], Problems()))
        t_build, engine = cpu(lambda: NativeEngine(project.policy_set, project.inventory))
    stats = engine.model_stats
    record("normalize", pods, f"{t_norm:.3f} s CPU ({len(cluster['docs'])} documents)")
    record(
        "engine build",
        pods,
        f"{t_build:.3f} s CPU; {stats['identities']} identities for {stats['endpoints']} "
        f"endpoints, {stats['selectors']} selectors, {stats['programs']} programs",
    )


def _whole_process(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of a command, as its own process."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    # As installed: pip compiles the modules, so a command does not (a CI shell may forbid
    # writing bytecode; the first of the runs then writes it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", probe, *args], check=True, capture_output=True, text=True, env=env
    ).stdout
    wall, rss = out.split()
    return float(wall), int(rss) / 1024


def test_explain_whole_process(cluster, project):
    pods = cluster["pods"]
    eps = [e for e in project.inventory.endpoints if e.ips and not e.host_network]
    a, b = eps[0], eps[len(eps) // 2]
    for fmt in ("yaml", "json"):
        runs = [
            _whole_process(
                [
                    PYCLASSIFY,
                    "explain",
                    str(cluster["dir"] / fmt),
                    "--from",
                    a.ref,
                    "--to",
                    b.ref,
                    "--proto",
                    "TCP",
                    "--port",
                    "8080",
                ]
            )
            for _ in range(3)
        ]
        wall = min(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        size = sum(f.stat().st_size for f in (cluster["dir"] / fmt).iterdir()) / 1e6
        record(
            f"explain, whole process ({fmt}, {size:.1f} MB)",
            pods,
            f"{wall:.2f} s wall (best of 3), {rss:.0f} MB peak RSS",
        )


@pytest.mark.parametrize("kind", ["pod-added", "pod-relabelled", "namespace-relabelled", "networkpolicy-changed"])
def test_change_in_force(cluster, project, kind):
    pods = cluster["pods"]
    live = LiveProject(project)
    c = copy.deepcopy(cluster["cluster"])
    rng = random.Random(11)
    times = []
    for _ in range(CHANGES if pods <= 10_000 else CHANGES // 4):
        change = random_change(c, rng, kind)
        apply_change(c, change)
        before, after = copy.deepcopy(change.before), copy.deepcopy(change.after)
        t = time.perf_counter()
        live.apply(before, after)
        times.append(time.perf_counter() - t)
    assert live.state.full_builds == 1
    t_rebuild, _ = cpu(lambda: NativeEngine(project.policy_set, project.inventory), rounds=1)
    times.sort()
    p50, p99 = statistics.median(times) * 1e3, times[int(0.99 * (len(times) - 1))] * 1e3
    record(
        f"change in force: {kind}",
        pods,
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(times)} changes; full rebuild {t_rebuild * 1e3:.0f} ms "
        f"({t_rebuild * 1e3 / p50:.0f}x the p50)",
    )


@pytest.fixture(scope="module")
def headers(cluster):
    batches = []
    with open_capture(str(cluster["dir"] / "cluster.pcap")) as cap:
        for b in cap:
            batches.append((b.headers.copy(), None if b.quotes is None else b.quotes.copy()))
    return batches


def _rates(engine: NativeEngine, batches: list[np.ndarray]) -> tuple[float, float, float]:
    """Seconds to judge ``batches`` through the memo (warmed by a pass first), by the compiled
    programs alone, and walking every packet's rules: CPU time, best of 3 (the walk: 1)."""

    def judge_all(**how: bool) -> None:
        for h in batches:
            out = np.zeros(len(h), dtype=VERDICT_DTYPE)
            engine._engine.judge(
                h, out, True, False, None, None, how.get("interpret", False), None, None, how.get("memo", True)
            )

    judge_all()  # the memo warms on the first pass, as on a live node
    t_memo, _ = cpu(judge_all)
    t_compiled, _ = cpu(lambda: judge_all(memo=False))
    t_walk, _ = cpu(lambda: judge_all(interpret=True), rounds=1)
    return t_memo, t_compiled, t_walk


def _rate_text(n: int, t_memo: float, t_compiled: float, t_walk: float) -> str:
    return (
        f"{n / t_memo / 1e6:.2f} M/s ({t_memo / n * 1e9:.0f} ns each) through the decision memo; "
        f"{n / t_compiled / 1e6:.2f} M/s ({t_compiled / n * 1e9:.0f} ns) by the compiled programs alone (cold memo); "
        f"{n / t_walk / 1e6:.2f} M/s ({t_walk / n * 1e9:.0f} ns) walking every packet's rules "
        f"(compiled {t_walk / t_compiled:.1f}x the walk)"
    )


def test_decisions_every_packet(cluster, project, headers):
    pods = cluster["pods"]
    engine = NativeEngine(project.policy_set, project.inventory)
    batches = [h for h, _ in headers]
    n = sum(len(h) for h in batches)
    t_memo, t_compiled, t_walk = _rates(engine, batches)
    # The reference evaluator, per packet, on a sample.
    sample = headers[0][0][:2000]
    flows = [
        Flow(
            FlowEnd(None, _ip(r["src_addr"], r["ip_version"])),
            FlowEnd(None, _ip(r["dst_addr"], r["ip_version"])),
            int(r["protocol"]),
            int(r["sport"]),
            int(r["dport"]),
        )
        for r in sample
    ]
    t_ref, _ = cpu(lambda: [evaluate(project.policy_set, project.inventory, f) for f in flows], rounds=1)
    ref = len(flows) / t_ref
    record(
        "decisions, every packet judged by policy (real capture)",
        pods,
        f"{_rate_text(n, t_memo, t_compiled, t_walk)}; reference evaluator {ref / 1e3:.1f} k/s "
        f"({n / t_memo / ref:.0f}x slower than the memo)",
    )


def random_pairs(inventory, n: int, seed: int = 7) -> list[np.ndarray]:
    """Headers of random pod pairs (5 % outside addresses): TCP and UDP to ports the cluster's
    policies name and to any port, ICMP echo — almost every packet a new combination for the
    memo. Batches of 256 rows."""
    rng = np.random.default_rng(seed)
    ips = np.array(
        [int(ip) for e in inventory.endpoints if not e.host_network for ip in e.ips if ip.version == 4], dtype=np.uint32
    )
    outside = np.array([int(v) for v in (0x08080808, 0xC0A80701, 0x64400309, 0xAC100109)], dtype=np.uint32)
    batch = new_batch(n)
    for field in ("src_addr", "dst_addr"):
        addr = ips[rng.integers(0, len(ips), n)]
        out = rng.random(n) < 0.05
        addr[out] = outside[rng.integers(0, len(outside), out.sum())]
        raw = batch[field]
        raw[:, 10] = raw[:, 11] = 0xFF
        raw[:, 12:] = addr.astype(">u4").view(np.uint8).reshape(n, 4)
    protocol = rng.choice(np.array([6, 6, 6, 6, 6, 6, 17, 17, 1], dtype=np.uint8), n)
    named = np.array([53, 80, 443, 5432, 6379, 8080, 8443, 9090, 9100, 22], dtype=np.uint16)
    dport = np.where(rng.random(n) < 0.5, named[rng.integers(0, len(named), n)], rng.integers(1, 65536, n)).astype(
        np.uint16
    )
    batch["ip_version"] = 4
    batch["protocol"] = protocol
    ported = protocol != 1
    batch["sport"] = np.where(ported, rng.integers(32768, 60768, n), 0)
    batch["dport"] = np.where(ported, dport, 0)
    batch["flags"] = np.where(ported, FLAG_HAS_PORTS, 0)
    batch["icmp_type"] = np.where(ported, 0, 8)
    return [batch[i : i + 256] for i in range(0, n, 256)]


def test_decisions_random_pairs(cluster, project):
    pods = cluster["pods"]
    engine = NativeEngine(project.policy_set, project.inventory)
    n = int(os.environ.get("PYCLASSIFY_SCALE_PACKETS", 1_000_000))
    batches = random_pairs(project.inventory, n)
    t_memo, t_compiled, t_walk = _rates(engine, batches)
    stats = engine.compile_stats
    record(
        "decisions, every packet judged by policy (random pod pairs)",
        pods,
        f"{_rate_text(n, t_memo, t_compiled, t_walk)}; {stats['compiled']} programs compiled "
        f"({stats['bytes'] / 2**20:.1f} MiB), {stats['walked_identities']} identities walked",
    )


@pytest.mark.parametrize("shape", [(1, 2000, 2000), (12000, 1, 1)], ids=["cidrs-x-ports", "rules"])
def test_adversarial_policy(cluster, project, shape):
    """A policy set built to blow up a compiled form, added to the cluster: build time, how its
    programs are decided, and decisions on random pairs (compiled alone against the walk)."""
    pods = cluster["pods"]
    if pods != SIZES[0]:
        pytest.skip("measured at the first size only")
    policy = adversarial_policy(*shape)
    with collector_paused():
        extra = build_project(cluster["docs"] + [Document(policy, "adversarial.yaml", 1)], Problems())
        t_build, engine = cpu(lambda: NativeEngine(extra.policy_set, extra.inventory), rounds=1)
    stats = engine.compile_stats
    batches = random_pairs(extra.inventory, 20_000)
    n = sum(len(b) for b in batches)
    _, t_compiled, t_walk = _rates(engine, batches)
    record(
        f"adversarial policy: {shape[0]} rule(s) x {shape[1]} CIDR(s) x {shape[2]} port range(s)",
        pods,
        f"engine build {t_build:.2f} s CPU; {stats['compiled']} programs compiled ({stats['bytes'] / 2**20:.1f} MiB), "
        f"{stats['walked_memory']} walked past the memory bound ({stats['walked_identities']} identities); "
        f"random pairs {n / t_compiled / 1e3:.1f} k/s compiled path, {n / t_walk / 1e3:.1f} k/s walking",
    )


def _ip(raw, version):
    import ipaddress

    b = bytes(raw)
    return ipaddress.IPv4Address(b[12:]) if version == 4 else ipaddress.IPv6Address(b)


def test_replay_with_conntrack(cluster, project, headers):
    pods = cluster["pods"]
    engine = NativeEngine(project.policy_set, project.inventory)
    n = sum(len(h) for h, _ in headers)

    def replay() -> None:
        tracker = Tracker()
        for h, q in headers:
            engine.judge(h, q, tracker)

    def read_decode() -> None:
        with open_capture(str(cluster["dir"] / "cluster.pcap")) as cap:
            for _ in cap:
                pass

    t_api, _ = cpu(replay)
    t_floor, _ = cpu(read_decode)
    wall, rss = min(
        _whole_process(
            [
                PYCLASSIFY,
                "replay",
                str(cluster["dir"] / "json"),
                "--pcap",
                str(cluster["dir"] / "cluster.pcap"),
                "--json",
            ]
        )
        for _ in range(2)
    )
    record(
        "replay with connection tracking",
        pods,
        f"{n / t_api / 1e6:.2f} M packets/s through the API (judge + conntrack; read+decode alone "
        f"{n / t_floor / 1e6:.2f} M/s); `pyclassify replay --json` whole process {wall:.2f} s for {n} packets "
        f"({n / wall / 1e6:.2f} M/s including start, load and build), {rss:.0f} MB peak RSS (the capture is mapped)",
    )


def test_replay_with_denials(cluster, project, tmp_path):
    """Replay of a capture where a quarter of the packets belong to connections policy denies
    (``write_capture(denied=...)``: taken before any firewall, every packet of a denied
    connection kept): through the API, and ``pyclassify replay --json`` as a whole process
    against libpcap's read loop over the same file, in the same run. The process's marginal
    rate leaves out its start (the same command on a one-packet capture)."""
    pods = cluster["pods"]
    engine = NativeEngine(project.policy_set, project.inventory)

    def denied(f) -> bool:
        proto = {"TCP": 6, "UDP": 17}[f.proto]
        return not engine.evaluate(Flow(FlowEnd(None, f.src), FlowEnd(None, f.dst), proto, f.sport, f.dport)).allowed

    packets, flows = (1_000_000, 20_000) if pods >= 10_000 else (200_000, 2_000)
    packets = int(os.environ.get("PYCLASSIFY_SCALE_PACKETS", packets))
    capture = tmp_path / "denials.pcap"
    write_capture(cluster["cluster"], capture, packets, flows, seed=1, denied=denied)
    one = tmp_path / "one.pcap"
    write_capture(cluster["cluster"], one, 3, 1, seed=1)
    batches = []
    with open_capture(str(capture)) as cap:
        for b in cap:
            batches.append((b.headers.copy(), None if b.quotes is None else b.quotes.copy()))
    n = sum(len(h) for h, _ in batches)
    summary = Replay(engine).run([str(capture)])
    # packets of connections policy denied: their opening packets and the rest of each
    share = (summary.policy - summary.policy_allowed + summary.denied_connection) / n

    def replay() -> None:
        tracker = Tracker()
        for h, q in batches:
            engine.judge(h, q, tracker)

    t_api, _ = cpu(replay)
    command = [PYCLASSIFY, "replay", str(cluster["dir"] / "json"), "--json", "--pcap"]
    exe = build_or_skip("pcap_loop", tmp_path)
    # Rounds of the three commands in turn. A process's start (loading 10k pods) varies by a
    # third from one run to the next on a shared VM, more than the replay itself takes, so the
    # marginal is the replay's own wall time in the process (the summary's ``seconds``: from
    # opening the capture to the summary), each round's ratio against that round's libpcap
    # loop, and the figures medians over rounds; the difference of the two processes' wall
    # times is printed beside it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rounds = []
    for _ in range(int(os.environ.get("PYCLASSIFY_SCALE_ROUNDS", 5))):
        t = time.perf_counter()
        out = subprocess.run([*command, str(capture)], check=True, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        seconds = json.loads(out.stdout)["seconds"]
        start = _whole_process([*command, str(one)])[0]
        pcap_wall = _whole_process([str(exe), str(capture)])[0]
        rounds.append((wall, start, seconds, pcap_wall, pcap_wall / seconds))
    wall, start, seconds, pcap_wall, ratio = (statistics.median(r[k] for r in rounds) for k in range(5))
    record(
        "replay, a quarter of the packets denied",
        pods,
        f"{share:.1%} of {n} packets in denied connections; {n / t_api / 1e6:.2f} M packets/s through the API "
        f"(judge + conntrack); `pyclassify replay --json` whole process {wall:.2f} s, of which replaying "
        f"{seconds:.3f} s ({n / seconds / 1e6:.2f} M/s; the one-packet process {start:.2f} s); libpcap read "
        f"loop whole process {pcap_wall:.3f} s ({n / pcap_wall / 1e6:.2f} M/s); marginal / libpcap {ratio:.2f}x, "
        f"per round {', '.join(f'{r[4]:.2f}' for r in rounds)} (medians of {len(rounds)} rounds; goals: "
        "5 M/s through the API, 0.5x)",
    )


def test_zz_summary():
    print("\n\n== cluster scale: summary")
    for what, by_size in RESULTS.items():
        for pods, text in sorted(by_size.items()):
            print(f"  {what} [{pods} pods]: {text}")
