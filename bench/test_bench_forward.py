"""What a host endpoint's forward hook (applyOnForward policy on routed traffic) costs live.

The node namespace routes between two pod namespaces; pod 1 sends N UDP datagrams to pod 2, each
to a different port, so every one is a new connection iptables queues to userspace (as
``bench/test_bench_nfqueue.py``). Both node interfaces are Calico HostEndpoints. Measured in the
same run, ``pyclassify enforce`` with:

- the baseline: no applyOnForward policy, so each new connection meets the workload's queue only;
- the forward hook: an applyOnForward policy that allows the traffic on both host endpoints, so
  each new connection goes through the ingress loop of the interface it arrives by, the egress
  loop of the one it leaves by (each handing it back to the chain with a mark), then the
  workload's queue.

Per case: the datagrams the workload's queue judged, the daemon's CPU time over the burst
(/proc utime+stime) per new connection, and the ratio to the baseline.

    .venv/bin/python -m pytest bench/test_bench_forward.py -s   # root
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.test_bench_nfqueue import N, blast, cpu_seconds
from tests.enforce import manifests
from tests.enforce.netns import Daemon, Topology

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, iptables, NFQUEUE)")

HOSTS = """
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: gw-1, labels: {edge: "true"}}
spec: {node: node1, interfaceName: veth1}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: gw-2, labels: {edge: "true"}}
spec: {node: node1, interfaceName: veth2}
"""

FORWARD = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-forward}
spec:
  selector: edge == 'true'
  applyOnForward: true
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: UDP}, {action: Allow, protocol: TCP}]
  egress: [{action: Allow}]
"""

RESULTS: dict[str, dict[str, float]] = {}


@pytest.mark.parametrize("case", ["workload only", "forward hook"])
def test_forward_hook_cost(case: str, tmp_path: Path, benchmark) -> None:
    manifests.write(tmp_path)
    (tmp_path / "60-hosts.yaml").write_text(HOSTS + ("---" + FORWARD if case == "forward hook" else ""))
    topo = Topology(npods=2)
    try:
        topo.up()

        def run() -> dict[str, float]:
            d = Daemon(topo, [str(tmp_path)], 0, extra=("--hooks", "forward", "--queue-maxlen", "65536", "--no-log"))
            start = d.wait_event("start")
            assert ("forward_queues" in start) == (case == "forward hook")
            c0 = cpu_seconds(d.proc.pid)
            blast(topo)
            cpu = cpu_seconds(d.proc.pid) - c0
            d.terminate()
            stats = d.wait_event("stop")["stats"]
            return {"cpu": cpu, "received": stats["received"], "policy": stats["policy"]}

        m = benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        topo.down()
    RESULTS[case] = m
    # every datagram meets the workload's queue; with the hook, two loops before it as well
    hops = 3 if case == "forward hook" else 1
    assert m["received"] >= hops * N * 0.95, m
    print(
        f"\n{case}: {m['received']} packets queued ({hops} queue(s) per new connection), "
        f"{m['cpu'] / N * 1e6:.2f} us CPU per new connection"
    )
    if len(RESULTS) == 2:
        base, hook = RESULTS["workload only"]["cpu"], RESULTS["forward hook"]["cpu"]
        print(f"forward hook / workload only: {hook / base:.2f}x the CPU per new connection")
