"""NFQUEUE enforcement on veth (issue 6, item 7), beside a minimal per-packet consumer.

A node namespace routes between two pod namespaces; pod 1 sends N UDP datagrams to pod 2, each
to a different port, so every one is a new connection that iptables queues to userspace. Measured
in the same run, each consumer in the node namespace on queue 0:

- ``pyclassify enforce`` (the daemon, with batched verdicts, then with ``--no-batch-verdicts``);
- a minimal pure-Python NetfilterQueue consumer (``socket.AF_NETLINK``, one recv and one verdict
  per packet, accepts everything) with the same iptables rules.

Per consumer: packets it received, CPU time of its process while the burst was processed
(/proc/PID/stat utime+stime; startup excluded), CPU microseconds per packet and the ratio to the
baseline. pyclassify also reports p50/p99 per-batch processing time (decode, judge, verdict send)
from its ``pyclassify_batch_seconds`` histogram, scraped from ``--metrics`` after the burst, and
the policy apply and revocation latency of a live change that cuts an established TCP connection
(file change seen -> new engine in force; swap -> revalidation -> conntrack deleted), as the
daemon measures them.

    .venv/bin/python -m pytest bench/test_bench_nfqueue.py -s   # root
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import HOLD, PY, Daemon, Topology

N = 20000
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, iptables, NFQUEUE)")

BLAST = r"""
import socket, sys, time
dst, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(n):
    s.sendto(b"x", (dst, 10000 + i % 50000))
    if i % 256 == 255: time.sleep(0.002)   # pace: stay under the queue length
print("sent", flush=True)
"""

BASELINE = r"""
import json, os, socket, struct, sys, signal
from pyclassify.enforce.iptables import Rules
q = int(sys.argv[1])
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.bind((0, 0))
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)
def attr(t, p):
    n = 4 + len(p); return struct.pack("=HH", n, t) + p + b"\0" * ((-n) % 4)
def msg(kind, q, body, flags=1):
    b = struct.pack("=BBH", 0, 0, socket.htons(q)) + body
    return struct.pack("=IHHII", 16 + len(b), (3 << 8) | kind, flags, 0, 0) + b
s.send(msg(2, q, attr(1, struct.pack("=BBH", 1, 0, socket.htons(2))), 5)); s.recv(4096)
s.send(msg(2, q, attr(2, struct.pack(">IB", 128, 2)) + attr(3, struct.pack(">I", 65536)), 5)); s.recv(4096)
rules = Rules(q, q, False, ("forward",), False); rules.install()
n = 0
def stop(*a):
    rules.remove(); print(json.dumps({"received": n}), flush=True); os._exit(0)
signal.signal(signal.SIGTERM, stop)
print(json.dumps({"event": "start"}), flush=True)
while True:
    d = s.recv(65536)
    off = 0
    while off + 16 <= len(d):
        ln, typ = struct.unpack_from("=IH", d, off)
        if ln < 16: break
        if typ == (3 << 8) and ln > 20:
            a = off + 20
            while a + 4 <= off + ln:
                al, at = struct.unpack_from("=HH", d, a)
                if al < 4: break
                if at & 0x3fff == 1:
                    pid = struct.unpack_from(">I", d, a + 4)[0]
                    s.send(msg(1, q, attr(2, struct.pack(">II", 1, pid))))
                    n += 1
                a += (al + 3) & ~3
        off += (ln + 3) & ~3
"""

RESULTS: dict[str, dict[str, float]] = {}
METRICS_ADDR = "127.0.0.1:9464"  # inside the test's own node namespace

SCRAPE = r"""
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(), end="")
"""


def batch_histogram(topo: Topology) -> list[tuple[float, float]]:
    """``pyclassify_batch_seconds`` (queue 0) from the daemon's ``--metrics`` endpoint, scraped in
    the node namespace: cumulative ``(upper_bound_s, count)`` buckets, ``+Inf`` last."""
    from prometheus_client.parser import text_string_to_metric_families

    p = topo.spawn(topo.node, [PY, "-c", SCRAPE, f"http://{METRICS_ADDR}/metrics"])
    text, _ = p.communicate(timeout=30)
    assert p.returncode == 0, text
    for fam in text_string_to_metric_families(text):
        if fam.name == "pyclassify_batch_seconds":
            return sorted(
                (
                    (float(s.labels["le"]), s.value)
                    for s in fam.samples
                    if s.name.endswith("_bucket") and s.labels.get("queue") == "0"
                ),
                key=lambda b: b[0],
            )
    raise AssertionError("no pyclassify_batch_seconds in the metrics")


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The q-quantile of a cumulative histogram, interpolated linearly inside its bucket (as
    Prometheus' histogram_quantile): the buckets are powers of two, so the true value lies within
    a factor of two of it."""
    total = buckets[-1][1]
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cum in buckets:
        if cum >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cum - below, 1e-12)
        lower, below = bound, cum
    return lower


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def blast(topo: Topology) -> None:
    out = topo.spawn(topo.pods[0], [PY, "-c", BLAST, topo.ips[1], str(N)])
    assert out.stdout is not None and out.stdout.readline().strip() == "sent"
    out.wait(timeout=60)
    time.sleep(0.5)  # let the queue drain


@pytest.fixture
def env(tmp_path: Path):
    manifests.write(tmp_path)
    topo = Topology(npods=2)
    try:
        topo.up()
        yield topo, tmp_path
    finally:
        topo.down()


def revocation(topo: Topology, policy: Path, d: Daemon) -> dict[str, float]:
    hold = topo.spawn(topo.pods[0], [PY, "-c", HOLD, topo.ips[1], str(Topology.TCP_PORT), "1.0"], stdin=True)
    assert hold.stdout is not None and hold.stdout.readline().strip() == "connected"
    t = time.monotonic()
    manifests.replace(policy / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    ev = d.wait_event("reload")
    seen = time.monotonic()
    manifests.replace(policy / "10-netpol.yaml", manifests.NETPOL)
    d.wait_event("reload")
    return {
        "apply_ms": ev["apply_ms"],
        "revalidate_ms": ev["revalidate_ms"],
        "revoked": ev["revoked"],
        "write_to_event_ms": (seen - t) * 1000,
        "stages_ms": ev["stages_ms"],
    }


@pytest.mark.parametrize("mode", ["batched", "per-packet"])
def test_pyclassify_enforce(env, mode: str, benchmark) -> None:
    topo, policy = env
    extra = ("--hooks", "forward", "--queue-maxlen", "65536", "--no-log", "--metrics", METRICS_ADDR) + (
        ("--no-batch-verdicts",) if mode == "per-packet" else ()
    )

    def run() -> dict[str, float]:
        d = Daemon(topo, [str(policy)], 0, extra=extra)
        d.wait_event("start")
        pid = d.proc.pid
        c0 = cpu_seconds(pid)
        blast(topo)
        m = {"cpu": cpu_seconds(pid) - c0}
        hist = batch_histogram(topo)  # the burst's batches only (before the live change below)
        m["hist_batches"] = hist[-1][1]
        m["batch_p50_us"] = quantile(hist, 0.50) * 1e6
        m["batch_p99_us"] = quantile(hist, 0.99) * 1e6
        if mode == "batched":
            m.update(revocation(topo, policy, d))
        d.terminate()
        stop = d.wait_event("stop")
        m["received"] = stop["stats"]["received"] - (1 if mode == "batched" else 0)
        m["batches"] = stop["stats"]["batches"]
        return m

    m = benchmark.pedantic(run, rounds=1, iterations=1)
    RESULTS[f"pyclassify ({mode})"] = m
    print(
        f"\npyclassify enforce ({mode}): {m['received']} packets in {m['batches']} batches, "
        f"{m['cpu'] / max(m['received'], 1) * 1e6:.2f} us CPU/packet"
    )
    print(
        f"per-batch processing (decode, judge, verdict; pyclassify_batch_seconds over {m['hist_batches']:.0f} "
        f"batches, {m['received'] / max(m['batches'], 1):.1f} packets/batch): p50 {m['batch_p50_us']:.1f} us, "
        f"p99 {m['batch_p99_us']:.1f} us"
    )
    if "apply_ms" in m:
        print(
            f"policy apply {m['apply_ms']:.1f} ms, revalidate+conntrack delete {m['revalidate_ms']:.2f} ms, "
            f"file write -> reload event {m['write_to_event_ms']:.1f} ms, revoked {m['revoked']}; apply split: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in m["stages_ms"].items())
        )


def test_baseline_python_consumer(env, benchmark) -> None:
    topo, _ = env

    def run() -> dict[str, float]:
        p = topo.spawn(topo.node, [PY, "-c", BASELINE, "0"])
        assert p.stdout is not None and json.loads(p.stdout.readline())["event"] == "start"
        c0 = cpu_seconds(p.pid)
        blast(topo)
        c1 = cpu_seconds(p.pid)
        p.terminate()
        m = {"cpu": c1 - c0, "received": json.loads(p.stdout.readline())["received"]}
        p.wait(timeout=10)
        return m

    m = benchmark.pedantic(run, rounds=1, iterations=1)
    RESULTS["python per-packet consumer"] = m
    print(
        f"\nbaseline (Python, per packet): {m['received']} packets, "
        f"{m['cpu'] / max(m['received'], 1) * 1e6:.2f} us CPU/packet"
    )


def test_report() -> None:
    if "python per-packet consumer" not in RESULTS:
        pytest.skip("run the whole module")
    base = RESULTS["python per-packet consumer"]
    bus = base["cpu"] / max(base["received"], 1) * 1e6
    print()
    for name, m in RESULTS.items():
        us = m["cpu"] / max(m["received"], 1) * 1e6
        batch = (
            f", per-batch p50 {m['batch_p50_us']:.1f} us / p99 {m['batch_p99_us']:.1f} us"
            if "batch_p50_us" in m
            else ""
        )
        print(
            f"{name}: {us:.2f} us CPU/packet, {bus / us if us else float('inf'):.2f}x the baseline's CPU/packet{batch}"
        )
