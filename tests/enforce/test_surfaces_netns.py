"""The daemon's HTTP surface, with real sockets in the namespaces: metrics and probes on the
node's loopback unless an address is given (a pod cannot read them), policy names left out of
the counters on request, and 2,000 idle connections held against it in a pids limit: no thread
per connection, the probes answer, the resync thread still repairs the rules, enforcement holds."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.enforce import cgroup, manifests
from tests.enforce.netns import PY, Daemon, Topology, iptables_rules, root_reason
from tests.enforce.report import record

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

# Connections held open to a listener, idle: "held N" once open, then nothing until stdin closes.
HOLD_IDLE = r"""
import resource, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 256), hard))
held = []
for _ in range(n):
    held.append(socket.create_connection((host, port), timeout=5))
print("held", len(held), flush=True)
sys.stdin.read()
"""

CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close(); print("open")
except OSError as e:
    print("refused" if isinstance(e, ConnectionRefusedError) else f"error {e}")
"""


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    manifests.write(tmp_path)
    return tmp_path


def connect(topo: Topology, ns: str, host: str, port: int) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, PY, "-c", CONNECT, host, str(port)], capture_output=True, text=True, check=True
    ).stdout.strip()


def tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def timed_get(topo: Topology, url: str) -> tuple[int, str, float]:
    t = time.monotonic()
    status, body = topo.get(url)
    return status, body, time.monotonic() - t


def test_metrics_are_on_the_loopback_unless_an_address_is_given(topo: Topology, policy_dir: Path) -> None:
    daemon = Daemon(topo, [str(policy_dir)], 0, extra=("--metrics", "9464", "--no-metrics-rule-labels"))
    daemon.wait_event("start")
    assert topo.get("http://127.0.0.1:9464/healthz") == (200, "ok\n")
    # from a pod, the node's address on its link: nothing listens there
    assert connect(topo, topo.pods[0], "10.244.1.1", 9464) == "refused"
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    time.sleep(0.5)  # verdicts drained every 0.2 s
    status, text = topo.get("http://127.0.0.1:9464/metrics")
    assert status == 200
    verdicts = [line for line in text.splitlines() if line.startswith("pyclassify_verdicts_total{")]
    assert verdicts and all("policy=" not in line and "rule=" not in line for line in verdicts), verdicts
    assert "b-from-a" not in text  # no policy's name anywhere
    assert daemon.terminate() == 0
    # given an address, there it is (the opt-in for a scraper elsewhere)
    daemon = Daemon(topo, [str(policy_dir)], 0, extra=("--metrics", "10.244.1.1:9464"))
    daemon.wait_event("start")
    assert connect(topo, topo.pods[0], "10.244.1.1", 9464) == "open"
    assert daemon.terminate() == 0


def test_two_thousand_idle_connections_in_a_pids_limit(topo: Topology, policy_dir: Path) -> None:
    try:
        group = cgroup.pids(4096)
    except OSError as e:
        pytest.fail(f"no pids cgroup to run the daemon in: {e}")
    try:
        daemon = Daemon(
            topo,
            [str(policy_dir)],
            0,
            extra=("--metrics", "127.0.0.1:9464", "--resync-interval", "0.5"),
            prefix=group.prefix(),
        )
        daemon.wait_event("start")
        pid = daemon.proc.pid
        time.sleep(1.0)
        before = tasks(pid)
        rss_before = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        # room for the daemon as it is and the iptables commands of a repair, not for a thread
        # per connection
        group.set("pids.max", str(int(group.read("pids.current")) + 24))
        holder = topo.spawn(
            topo.node, [PY, "-c", HOLD_IDLE, "127.0.0.1", "9464", "2000"], stdin=True, stderr=subprocess.PIPE
        )
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        assert line == "held 2000", (line, holder.stderr.read() if holder.poll() is not None and holder.stderr else "")
        time.sleep(1.0)
        during = tasks(pid)
        assert during <= before + 2, f"{during - before} more threads for 2,000 idle connections"
        probes = [timed_get(topo, "http://127.0.0.1:9464/healthz") for _ in range(5)]
        probes += [timed_get(topo, "http://127.0.0.1:9464/readyz") for _ in range(5)]
        assert all(s == 200 for s, _, _ in probes), probes  # (how fast: recorded, not asserted)
        assert topo.reach(0, 1) and not topo.reach(2, 1)
        # the resync thread lives and repairs
        subprocess.run(["ip", "netns", "exec", topo.node, "iptables", "-F", "FORWARD"], check=True)
        repaired = daemon.wait_event("rules-repaired", timeout=10)
        assert repaired["found"]
        assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1
        assert not topo.reach(2, 1)
        status, text = topo.get("http://127.0.0.1:9464/metrics")
        assert status == 200
        cut = {
            line.split('"')[1]: float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("pyclassify_metrics_connections_cut_total{")
        }
        assert cut["evicted"] >= 2000 - 64 - 20
        rss_during = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        record(
            "surfaces-idle-connections",
            {
                "connections": 2000,
                "threads_before": before,
                "threads_during": during,
                "pids_max": int(group.read("pids.max")),
                "rss_before_bytes": rss_before,
                "rss_during_bytes": rss_during,
                "probe_ms_max": round(max(t for _, _, t in probes) * 1000, 1),
                "probe_ms": sorted(round(t * 1000, 1) for _, _, t in probes),
                "evicted": cut["evicted"],
                "refused": cut["refused"],
                "repaired_during": True,
            },
        )
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        assert daemon.terminate() == 0
    finally:
        topo.stop_processes()
        group.close()
