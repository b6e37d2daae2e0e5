"""The daemon in a memory limit, as the DaemonSet runs it (a cgroup of its own), given a policy
set far larger than the limit allows: the set is rejected whole before it is built (named in
the log, counted in the metrics), the daemon lives on and enforces the set in force; copies of
one large policy, which share their compiled form, fit where distinct ones do not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench import heavy_policies
from bench.cluster import to_yaml
from tests.enforce import cgroup, manifests
from tests.enforce.netns import Daemon, Topology, root_reason
from tests.enforce.report import record

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

LIMIT = 384 * 1024 * 1024  # the cgroup's limit: the default budget is half of it less 96 MiB
URL = "http://127.0.0.1:9464"


def write_policies(path: Path, objects: list[dict]) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text("".join("---\n" + to_yaml(o) for o in objects if o["kind"] == "GlobalNetworkPolicy"))
    tmp.rename(path)


def metric(topo: Topology, name: str) -> float:
    status, text = topo.get(f"{URL}/metrics")
    assert status == 200
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


def test_a_set_over_the_memory_budget_is_rejected_and_the_daemon_lives(topo: Topology, tmp_path: Path) -> None:
    try:
        group = cgroup.memory(LIMIT)
    except OSError as e:
        pytest.fail(f"no memory cgroup to run the daemon in: {e}")
    root = tmp_path / "policy"
    root.mkdir()
    manifests.write(root)
    try:
        daemon = Daemon(topo, [str(root)], 0, extra=("--metrics", "127.0.0.1:9464"), prefix=group.prefix())
        daemon.wait_event("start")
        assert topo.reach(0, 1) and not topo.reach(2, 1)
        budget = metric(topo, "pyclassify_policy_memory_budget_bytes")
        assert budget == (LIMIT - 96 * 1024 * 1024) // 2, "the budget is not derived from the cgroup's limit"
        in_force = metric(topo, "pyclassify_policy_memory_estimate_bytes")

        # 300 distinct policies of ~26 KB (7.8 MB): ~330 MB built, over the limit with the rest
        started = time.monotonic()
        write_policies(root / "90-wide.yaml", heavy_policies.wide(300))
        rejected = daemon.wait_event("reload-rejected", timeout=120)
        seconds = time.monotonic() - started
        (error,) = rejected["errors"]
        assert "over the memory budget" in error and "GlobalNetworkPolicy/wide-" in error, error
        assert daemon.proc.poll() is None and group.oom_kills() == 0
        assert topo.reach(0, 1) and not topo.reach(2, 1), "the policy in force changed"
        assert metric(topo, "pyclassify_policy_over_budget_total") == 1
        assert metric(topo, "pyclassify_policy_memory_estimate_bytes") == in_force
        assert topo.get(f"{URL}/healthz") == (200, "ok\n")
        peak_rejected = group.peak()

        # the same size as 300 copies of one policy: one compiled form, it fits and applies
        wide = heavy_policies.wide(1)[-1]
        copies = [{**wide, "metadata": {"name": f"copy-{i:03d}"}} for i in range(300)]
        write_policies(root / "90-wide.yaml", copies)
        reload = daemon.wait_event("reload", timeout=120)
        assert reload["policies"] >= 300
        assert daemon.proc.poll() is None and group.oom_kills() == 0
        assert not topo.reach(2, 1)
        estimate = metric(topo, "pyclassify_policy_memory_estimate_bytes")
        assert in_force < estimate < budget
        peak = group.peak()
        record(
            "memory-budget",
            {
                "limit_bytes": LIMIT,
                "budget_bytes": budget,
                "estimate_in_force_bytes": in_force,
                "rejected_set": "300 distinct GlobalNetworkPolicies of ~26 KB (bench/heavy_policies.py wide)",
                "rejected_after_s": round(seconds, 2),
                "rejection": error,
                "peak_bytes_at_rejection": peak_rejected,
                "accepted_set": "300 copies of one of them",
                "estimate_accepted_bytes": estimate,
                "peak_bytes_after_accepting": peak,
                "oom_kills": group.oom_kills(),
            },
        )
        assert daemon.terminate() == 0
    finally:
        topo.stop_processes()
        group.close()
