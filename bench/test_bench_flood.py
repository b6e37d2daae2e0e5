"""Verdicts per second at saturation: ``pyclassify enforce`` beside libnetfilter_queue's C
consumer (tests/enforce/c/nfq_accept.c: one NF_ACCEPT per packet, no judging), each alone on
queue 0 of a node namespace with the same iptables rules, under the same UDP flood (the C
sender of tests/enforce/flood.py at full rate from 200 spoofed addresses of pod a's subnet, for
``SECONDS``). Per consumer: packets that reached the queue rule, verdicts given, the kernel's
queue-full and socket-full drops, verdicts per second over the flood, and the ratio of
pyclassify's rate to the C consumer's.

    .venv/bin/python -m pytest bench/test_bench_flood.py -s   # root, gcc, libnetfilter-queue-dev
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.flood import compile_c, flood, kernel_queue, queued_by_rules
from tests.enforce.netns import PY, Daemon, Topology
from tests.enforce.report import record
from tests.enforce.test_flood import metric

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, iptables, NFQUEUE)")

SECONDS = float(os.environ.get("PYCLASSIFY_FLOOD_SECONDS", "5"))
MAXLEN = 4096

RULES = """
import sys
from pyclassify.enforce.iptables import Rules, uninstall
if sys.argv[1] == "install":
    Rules(0, 0, False, ("forward",), False).install()
else:
    uninstall(False)
"""


def _consumer_pyclassify(topo: Topology, policy: Path, flooder: Path) -> dict[str, float]:
    daemon = Daemon(
        topo,
        [str(policy)],
        0,
        extra=("--metrics", "127.0.0.1:9479", "--queue-maxlen", str(MAXLEN), "--no-log", "--hooks", "forward"),
    )
    daemon.wait_event("start")
    sent = flood(topo, flooder, 0, 1, "udp", 9999, SECONDS)
    status, text = topo.get("http://127.0.0.1:9479/metrics")
    assert status == 200
    verdicts = sum(
        metric(text, "pyclassify_nfqueue_packets_total", queue="0", outcome=o)
        for o in ("accepted", "dropped", "malformed")
    )
    out = {"sent": sent, "queued": queued_by_rules(topo), **kernel_queue(topo), "verdicts": verdicts}
    assert daemon.terminate() == 0
    return out


def _consumer_c(topo: Topology, flooder: Path, nfq_accept: Path) -> dict[str, float]:
    subprocess.run(
        ["ip", "netns", "exec", topo.node, PY, "-c", RULES, "install"], check=True, cwd=Path(__file__).parents[1]
    )
    proc = topo.spawn(topo.node, [str(nfq_accept), "0", str(MAXLEN)])
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    try:
        sent = flood(topo, flooder, 0, 1, "udp", 9999, SECONDS)
        out = {"sent": sent, "queued": queued_by_rules(topo), **kernel_queue(topo)}
    finally:
        proc.terminate()
        verdicts = int(proc.stdout.readline().split()[-1])
        subprocess.run(
            ["ip", "netns", "exec", topo.node, PY, "-c", RULES, "remove"], check=True, cwd=Path(__file__).parents[1]
        )
    return {**out, "verdicts": verdicts}


def test_verdicts_per_second_at_saturation(tmp_path: Path) -> None:
    flooder = compile_c("flood", tmp_path)
    nfq_accept = compile_c("nfq_accept", tmp_path, ("-lnetfilter_queue",))
    (tmp_path / "policy").mkdir()
    manifests.write(tmp_path / "policy")
    results = {}
    for name in ("nfq_accept (C, libnetfilter_queue)", "pyclassify enforce"):
        topo = Topology()
        try:
            topo.up()
            results[name] = (
                _consumer_c(topo, flooder, nfq_accept)
                if name.startswith("nfq")
                else _consumer_pyclassify(topo, tmp_path / "policy", flooder)
            )
        finally:
            topo.down()
        results[name]["verdicts_per_s"] = round(results[name]["verdicts"] / SECONDS)
    base = results["nfq_accept (C, libnetfilter_queue)"]["verdicts_per_s"]
    for r in results.values():
        r["ratio_to_c"] = round(r["verdicts_per_s"] / base, 3) if base else None
    print(json.dumps(results, indent=1))
    record("saturation", {"seconds": SECONDS, "queue_maxlen": MAXLEN, **results})
    assert all(r["verdicts"] > 0 for r in results.values())
