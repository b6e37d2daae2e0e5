"""``pyclassify enforce`` beside libnetfilter_queue's C consumer under a bursty load, in one run.

A node namespace routes between two pod namespaces (tests/enforce/netns.py). The C program
tests/enforce/c/burst.c sends from pod 0 (its own address, raw socket, varying source port) UDP
datagrams to pod 1, ``BURST`` back to back per sendmmsg call, the bursts spaced so the average is
``RATE`` packets/s; each datagram is a connection of its own (unreplied UDP stays ctstate NEW), so
the iptables rules queue every one. Each payload carries a sequence number and its
CLOCK_MONOTONIC send time; burst.c's receiver in pod 1 (recvmmsg, SO_TIMESTAMPNS) gives each
datagram's latency sender -> receiver's socket, and counts what arrived.

Consumers, each in a topology of its own, on queue 0 of the node namespace with the same rules
(pyclassify.enforce.iptables.Rules, ``--hooks forward``) and a queue of ``MAXLEN`` packets:

- ``nfq_accept`` (tests/enforce/c/nfq_accept.c, libnetfilter_queue's documented per-packet
  consumer, NF_ACCEPT for everything, no judging), and the same with one batch verdict per recv
  buffer (``nfq_set_verdict_batch``);
- ``pyclassify enforce --no-log --hooks forward --queue-maxlen 65536 --metrics ...`` with the
  test manifests, NetworkPolicy b-from-a widened to let namespace a's UDP reach b on the
  receiver's ports (so the datagrams are judged *and allowed*);
- the floor: no queue rule, no consumer, no iptables rule at all (plain forwarding over veth; no
  conntrack in the node namespace either).

Burst phase, per consumer: ``COUNT`` datagrams at ``RATE``. CPU of the consumer process over the
load (/proc/PID/stat utime+stime, 10 ms ticks; startup excluded; until the queue drained),
packets the rules queued (iptables counters), verdicts (from the kernel's queue row:
id_sequence - user_dropped - depth, deltas over the phase; cross-checked with the consumer's own
count at the end), received/lost at the receiver, latency p50/p99/max.

Saturation phase, same consumer: the same sender with no pause for ``SAT_SECONDS``; verdicts/s
from two samples of the kernel's queue row taken while the flood runs (0.5 s in, 0.3 s before
its end; ``depth`` > 0 at both, or drops, means the consumer never ran out of work), and CPU µs per
verdict between the same samples. One sender on a 2-core machine may not outrun a consumer: then
the row says "sender-bound" and its verdicts/s is a lower bound (the sender's rate).

What the figures include: latency runs from just before the burst's sendmmsg call (every datagram
of a burst carries that one time: they arrive together) to the kernel's receive timestamp at pod
1's socket, so it has the veth forwarding in it and, for a packet late in a burst, the wait behind
the packets before it; the floor row shows that part. A consumer's CPU includes the kernel work
done in its verdict syscalls: reinjecting the packet, forwarding it, delivering it to pod 1. The
saturation flood starts its sequence at 0 again: its flows repeat the burst's (unreplied entries,
still NEW, still queued). The default RATE (50,000/s) is one the C consumer keeps up with on the
2-core VM most of the time; at 100,000/s it fell behind (sender slowed to 77k/s, p99 ~200 ms).

    PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_nfqueue_peer.py -s -p no:randomly  # root
    PYCLASSIFY_PEER_RATE=50000 PYCLASSIFY_PEER_COUNT=100000 PYCLASSIFY_PEER_BURST=64 \
    PYCLASSIFY_PEER_SAT_SECONDS=3 ...                                                           # other loads
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bench.test_bench_nfqueue import cpu_seconds
from tests.enforce import manifests
from tests.enforce.flood import compile_c, queued_by_rules
from tests.enforce.netns import PY, REPO, Daemon, Topology, sh
from tests.enforce.test_flood import metric

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, iptables, NFQUEUE)")

RATE = int(os.environ.get("PYCLASSIFY_PEER_RATE", "50000"))
COUNT = int(os.environ.get("PYCLASSIFY_PEER_COUNT", "200000"))
BURST = int(os.environ.get("PYCLASSIFY_PEER_BURST", "64"))
SAT_SECONDS = float(os.environ.get("PYCLASSIFY_PEER_SAT_SECONDS", "3"))
MAXLEN = 65536
DPORT, NPORTS = 20000, 4  # the receiver's ports; with 64000 source ports: 256,000 distinct flows
METRICS_ADDR = "127.0.0.1:9466"

C_NAME, PY_NAME, FLOOR_NAME = "nfq_accept (C, libnetfilter_queue)", "pyclassify enforce", "floor (no queue)"
C_BATCH_NAME = "nfq_accept (C, libnetfilter_queue, batched verdicts)"

# b-from-a of tests/enforce/manifests.py, also letting namespace a's UDP reach b on DPORT..+3.
NETPOL_UDP = f"""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: b-from-a, namespace: b}}
spec:
  podSelector: {{}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {{kubernetes.io/metadata.name: a}}
    ports:
    - {{protocol: TCP, port: 8080}}
    - {{protocol: UDP, port: {DPORT}, endPort: {DPORT + NPORTS - 1}}}
"""

RULES = """
import sys
from pyclassify.enforce.iptables import Rules, uninstall
if sys.argv[1] == "install":
    Rules(0, 0, False, ("forward",), False).install()
else:
    uninstall(False)
"""

# In the node namespace: for each line on stdin, queue 0's row of the kernel's
# /proc/net/netfilter/nfnetlink_queue and the CLOCK_MONOTONIC time it was read, as JSON.
SAMPLER = r"""
import json, sys, time
for _ in sys.stdin:
    row = {}
    with open("/proc/net/netfilter/nfnetlink_queue") as f:
        for line in f:
            c = line.split()
            if c and int(c[0]) == 0:
                row = {"depth": int(c[2]), "queue_dropped": int(c[5]), "user_dropped": int(c[6]),
                       "id_sequence": int(c[7])}
    row["t"] = time.monotonic()
    print(json.dumps(row), flush=True)
"""


class Sampler:
    def __init__(self, topo: Topology) -> None:
        self.proc = topo.spawn(topo.node, [PY, "-c", SAMPLER], stdin=True)

    def sample(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        row = json.loads(self.proc.stdout.readline())
        assert "id_sequence" in row, "queue 0 is not bound"
        return row

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=5)


def verdicts(row: dict[str, Any]) -> int:
    """Packets of the queue that got a verdict so far: handed to the consumer (id_sequence, which
    the kernel counts after its queue-full check) minus those its socket refused, minus those
    still waiting."""
    return row["id_sequence"] - row["user_dropped"] - row["depth"]


def compile_all(out: Path) -> dict[str, Path]:
    """burst and nfq_accept built into ``out``; skips when gcc or libnetfilter_queue is missing."""
    try:
        burst = compile_c("burst", out)
    except RuntimeError as e:
        if "no C compiler" in str(e):
            pytest.skip(str(e))
        raise
    try:
        nfq = compile_c("nfq_accept", out, ("-lnetfilter_queue",))
    except RuntimeError as e:
        if "netfilter_queue" in str(e):  # the header missing, or -lnetfilter_queue
            pytest.skip(f"libnetfilter_queue missing (apt-get install libnetfilter-queue-dev): {e}")
        raise
    return {"burst": burst, "nfq_accept": nfq}


def receiver(topo: Topology, exe: Path, capacity: int) -> subprocess.Popen[str]:
    p = topo.spawn(
        topo.pods[1], [str(exe), "recv", topo.ips[1], str(DPORT), str(NPORTS), str(capacity)], stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    return p


def stop_receiver(p: subprocess.Popen[str]) -> dict[str, Any]:
    p.send_signal(signal.SIGTERM)
    assert p.stdout is not None
    out = json.loads(p.stdout.readline())
    p.wait(timeout=10)
    return out


def send_argv(topo: Topology, exe: Path, count: int, rate: int, seconds: float) -> list[str]:
    return [
        str(exe),
        "send",
        topo.ips[1],
        topo.ips[0],
        str(DPORT),
        str(NPORTS),
        str(count),
        str(BURST),
        str(rate),
        str(seconds),
    ]


def drain(sampler: Sampler | None, timeout: float = 20.0) -> None:
    """Wait until the kernel queue is empty (then a little for the last packets to arrive)."""
    deadline = time.monotonic() + timeout
    while sampler is not None and sampler.sample()["depth"] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)


def burst_phase(topo: Topology, exe: Path, pid: int | None, sampler: Sampler | None) -> dict[str, Any]:
    recv = receiver(topo, exe, COUNT)
    s0 = sampler.sample() if sampler else None
    q0 = queued_by_rules(topo) if sampler else 0
    c0 = cpu_seconds(pid) if pid else 0.0
    sent = json.loads(sh("ip", "netns", "exec", topo.pods[0], *send_argv(topo, exe, COUNT, RATE, 0)).stdout)
    drain(sampler)
    c1 = cpu_seconds(pid) if pid else 0.0
    m: dict[str, Any] = {"sent": sent["sent"], "send_failed": sent["failed"], "send_pps": sent["pps"]}
    if sampler is not None and s0 is not None:
        s1 = sampler.sample()
        m.update(
            queued=queued_by_rules(topo) - q0,
            verdicts=verdicts(s1) - verdicts(s0),
            queue_dropped=s1["queue_dropped"] - s0["queue_dropped"],
            user_dropped=s1["user_dropped"] - s0["user_dropped"],
            cpu=c1 - c0,
        )
    m["recv"] = stop_receiver(recv)
    return m


def saturation_phase(topo: Topology, exe: Path, pid: int | None, sampler: Sampler | None) -> dict[str, Any]:
    recv = receiver(topo, exe, 0)
    sender = topo.spawn(topo.pods[0], send_argv(topo, exe, 0, 0, SAT_SECONDS))
    m: dict[str, Any] = {}
    if sampler is not None and pid is not None:
        time.sleep(0.5)
        a, ca = sampler.sample(), cpu_seconds(pid)
        time.sleep(max(SAT_SECONDS - 0.8, 0.2))
        b, cb = sampler.sample(), cpu_seconds(pid)
        dv = verdicts(b) - verdicts(a)
        m.update(
            window_s=b["t"] - a["t"],
            window_verdicts=dv,
            verdicts_per_s=dv / (b["t"] - a["t"]),
            cpu_us_per_verdict=(cb - ca) / max(dv, 1) * 1e6,
            depth=(a["depth"], b["depth"]),
            queue_dropped=b["queue_dropped"] - a["queue_dropped"],
            user_dropped=b["user_dropped"] - a["user_dropped"],
        )
    assert sender.stdout is not None
    sent = json.loads(sender.stdout.readline())
    sender.wait(timeout=10)
    drain(sampler)
    r = stop_receiver(recv)
    m.update(
        sent=sent["sent"], send_pps=sent["pps"], received=r["received"], delivered_per_s=r["received"] / sent["seconds"]
    )
    return m


def run_consumer(name: str, exes: dict[str, Path], policy: Path) -> dict[str, Any]:
    topo = Topology(npods=2)
    try:
        topo.up()
        pid: int | None = None
        sampler: Sampler | None = None
        daemon: Daemon | None = None
        proc: subprocess.Popen[str] | None = None
        if name in (C_NAME, C_BATCH_NAME):
            subprocess.run(["ip", "netns", "exec", topo.node, PY, "-c", RULES, "install"], check=True, cwd=REPO)
            proc = topo.spawn(
                topo.node, [str(exes["nfq_accept"]), "0", str(MAXLEN), *(["batch"] if name == C_BATCH_NAME else [])]
            )
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            pid = proc.pid
        elif name == PY_NAME:
            daemon = Daemon(
                topo,
                [str(policy)],
                0,
                extra=("--no-log", "--hooks", "forward", "--queue-maxlen", str(MAXLEN), "--metrics", METRICS_ADDR),
            )
            daemon.wait_event("start")
            pid = daemon.proc.pid
        if pid is not None:
            sampler = Sampler(topo)
            sampler.sample()
        m: dict[str, Any] = {"burst": burst_phase(topo, exes["burst"], pid, sampler)}
        m["saturation"] = saturation_phase(topo, exes["burst"], pid, sampler)
        if sampler is not None:
            m["kernel_verdicts_total"] = verdicts(sampler.sample())
            sampler.close()
        if proc is not None:
            proc.terminate()
            assert proc.stdout is not None
            m["own_verdicts_total"] = int(proc.stdout.readline().split()[-1])
            proc.wait(timeout=10)
            subprocess.run(["ip", "netns", "exec", topo.node, PY, "-c", RULES, "remove"], check=True, cwd=REPO)
        if daemon is not None:
            status, text = topo.get(f"http://{METRICS_ADDR}/metrics")
            assert status == 200
            out = {
                o: metric(text, "pyclassify_nfqueue_packets_total", queue="0", outcome=o)
                for o in ("accepted", "dropped", "malformed", "lost")
            }
            m["own_verdicts_total"] = int(out["accepted"] + out["dropped"] + out["malformed"])
            m["own_outcomes"] = out
            assert daemon.terminate() == 0
        return m
    finally:
        topo.down()


def saturated(s: dict[str, Any]) -> bool | None:
    """Whether the consumer was the bottleneck of the saturation window: packets waiting in the
    queue at both samples, or dropped for want of room (None: no consumer)."""
    if "depth" not in s:
        return None
    return min(s["depth"]) > 0 or s["queue_dropped"] > 0 or s["user_dropped"] > 0


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        f"burst phase: {COUNT:,} datagrams in bursts of {BURST} at {RATE:,}/s; saturation: {SAT_SECONDS:g} s "
        f"unpaced; queue length {MAXLEN}",
        "",
        "| consumer | sent | sender pps | queued | verdicts | received | lost | CPU µs/queued packet "
        "| latency p50 µs | p99 µs | max µs | saturation verdicts/s | consumer saturated | sat. CPU µs/verdict "
        "| sat. sender pps | sat. delivered/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m in results.items():
        b, s, r = m["burst"], m["saturation"], m["burst"]["recv"]
        cpu_pp = b["cpu"] / max(b["queued"], 1) * 1e6 if "cpu" in b else None
        sat = saturated(s)
        vps = "—" if sat is None else ("" if sat else "≥ ") + fmt(s["verdicts_per_s"])
        rows.append(
            f"| {name} | {b['sent']:,} | {b['send_pps']:,.0f} | {fmt(b.get('queued'))} | "
            f"{fmt(b.get('verdicts'))} | {r['distinct']:,} | {b['sent'] - r['distinct']:,} | "
            f"{fmt(cpu_pp, '.2f')} | {r['k_p50_us']:,.1f} | {r['k_p99_us']:,.1f} | {r['k_max_us']:,.1f} | "
            f"{vps} | {'—' if sat is None else 'yes' if sat else 'no (sender-bound)'} | "
            f"{fmt(s.get('cpu_us_per_verdict'), '.2f')} | {s['send_pps']:,.0f} | {s['delivered_per_s']:,.0f} |"
        )
    p = results.get(PY_NAME)
    for c_name in (C_NAME, C_BATCH_NAME):
        c = results.get(c_name)
        if not (c and p):
            continue

        def ratio(x: float, y: float) -> str:
            return f"{x / y:.2f}×" if y else "—"

        cb, pb = c["burst"], p["burst"]
        sp, sc = saturated(p["saturation"]), saturated(c["saturation"])
        bound = "≥ " if not sp and sc else "≤ " if sp and not sc else ""
        note = (
            ""
            if sp and sc
            else " (neither consumer saturated: both sender-bound)"
            if not (sp or sc)
            else " (one consumer sender-bound: a bound)"
        )
        rows += [
            "",
            f"pyclassify / {c_name}: "
            f"CPU per queued packet {ratio(pb['cpu'] / max(pb['queued'], 1), cb['cpu'] / max(cb['queued'], 1))}, "
            f"saturation verdicts/s {bound}{ratio(p['saturation']['verdicts_per_s'], c['saturation']['verdicts_per_s'])}"
            f"{note}, "
            f"p99 latency {ratio(pb['recv']['k_p99_us'], cb['recv']['k_p99_us'])} "
            f"(p50 {ratio(pb['recv']['k_p50_us'], cb['recv']['k_p50_us'])})",
        ]
    return "\n".join(rows)


def test_nfqueue_peer_bursty(tmp_path: Path, benchmark) -> None:
    exes = compile_all(tmp_path)
    policy = tmp_path / "policy"
    policy.mkdir()
    manifests.write(policy, netpol=NETPOL_UDP)

    def run() -> dict[str, dict[str, Any]]:
        return {name: run_consumer(name, exes, policy) for name in (C_NAME, C_BATCH_NAME, PY_NAME, FLOOR_NAME)}

    results = benchmark.pedantic(run, rounds=1, iterations=1)
    print("\n" + json.dumps(results, indent=1))
    print("\n" + table(results))
    for name in (C_NAME, C_BATCH_NAME, PY_NAME):
        b = results[name]["burst"]
        assert b["verdicts"] > 0 and results[name]["saturation"]["window_verdicts"] > 0, name
        assert b["recv"]["distinct"] > 0.5 * b["sent"], f"{name}: most datagrams did not arrive (policy?)"
