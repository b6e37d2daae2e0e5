"""Replay with DNS learning (`domains` rules): every answer in the capture is learned in the
native judge call, between the packets before it and those after (``NativeEngine.judge_lanes``).

The capture (``bench.captures.write_dns_capture``): web of ``examples/demo`` asks for a name every
half second and connects to an outside address on 443 right after: a query, its answer, a SYN and
its SYN-ACK per round, 25,000 rounds (100,000 packets, 25,000 answers, in two batches). Replayed
through the Python API, each measured in the same run:

- the baseline: ``examples/demo`` alone (no domain rules: nothing learned, one lane);
- with ``examples/domains``: every answer learned, in capture order;
- the same with the DNS server behind a Service (kube-dns, two backends): three lanes per batch.

    .venv/bin/python -m pytest bench/test_bench_replay_dns.py -s --benchmark-columns=min,median,rounds
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.captures import DNS_NAMES_ALLOWED, KUBE_DNS_SERVICE, syns_allowed, write_dns_capture
from pyclassify import domains
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.replay import Replay

REPO = Path(__file__).resolve().parents[1]
DEMO, DOMAINS = str(REPO / "examples" / "demo"), str(REPO / "examples" / "domains")
ROUNDS = 25_000
MEDIANS: dict[str, float] = {}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[bool]]]:
    root = tmp_path_factory.mktemp("dns")
    out = {}
    for server in ("10.0.9.53", "10.96.0.10"):
        path = root / f"dns-{server}.pcap"
        answers, syns = write_dns_capture([path], ROUNDS, server=server)
        out[server] = (path, syns_allowed(answers, syns, DNS_NAMES_ALLOWED))
    (root / "kube-dns.yaml").write_text(KUBE_DNS_SERVICE)
    return out


def replay(paths: list[str], capture: Path) -> tuple[Replay, float]:
    """A fresh replay (facts of its own) of ``capture`` against ``paths``: the replay, its seconds."""
    project = load_project(paths)
    learner = None
    if domains.has_domain_rules(project.policy_set):
        project.inventory.domains = domains.new_facts()
        learner = domains.DnsLearner(project.inventory.domains)
    r = Replay(NativeEngine(project.policy_set, project.inventory), dns=learner)
    summary = r.run([str(capture)])
    return r, summary.seconds


@pytest.mark.parametrize("case", ["baseline", "domains", "domains+kube-dns"])
def test_replay_with_dns_learning(benchmark, captures, case):
    server = "10.96.0.10" if case == "domains+kube-dns" else "10.0.9.53"
    capture, allowed = captures[server]
    paths = {
        "baseline": [DEMO],
        "domains": [DEMO, DOMAINS],
        "domains+kube-dns": [DEMO, DOMAINS, str(capture.parent / "kube-dns.yaml")],
    }[case]
    seconds: list[float] = []

    def run() -> Replay:
        r, s = replay(paths, capture)
        seconds.append(s)
        return r

    r = benchmark.pedantic(run, rounds=5, iterations=1)
    assert r.summary.packets == 4 * ROUNDS
    if case != "baseline":
        assert r.dns is not None and r.dns.answers == ROUNDS
        # the SYNs an answer's TTL covered, and only those, were allowed
        assert r.summary.allowed == 2 * ROUNDS + 2 * sum(allowed)
    seconds.sort()
    MEDIANS[case] = seconds[len(seconds) // 2]  # the replay alone (manifest loading apart)
    base = MEDIANS.get("baseline")
    ratio = f", {MEDIANS[case] / base:.2f}x the baseline" if base else ""
    print(
        f"\n{case}: replay {MEDIANS[case] * 1e3:.1f} ms median for {4 * ROUNDS:,} packets, "
        f"{MEDIANS[case] / ROUNDS * 1e6:.2f} us per round{ratio}"
    )
