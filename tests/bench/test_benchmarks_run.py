"""The cluster-scale benchmarks and those beside their peers (DPDK rte_acl, libpcap,
libnetfilter_queue: .ci/run installs them) run (at a smoke size): a benchmark that no longer runs is found by
the test run, not by the next person measuring. No figure is checked here; the benchmarks'
own assertions (no change rebuilt the engine, verdict agreement) are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_data import shared_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "suite",
    [
        "bench/test_bench_scale.py",
        "bench/test_bench_load.py",
        "bench/test_bench_kube.py",
        "bench/test_bench_diff.py",
        "bench/test_bench_rte_acl.py",
        "bench/test_bench_replay.py",
        "bench/test_bench_nfqueue_peer.py",
        "bench/test_bench_reload.py",
        "bench/test_bench_http.py",
        "bench/test_bench_schema.py",
        "bench/test_bench_report.py",
        "bench/test_bench_records.py",
    ],
)
def test_benchmark_suite_runs_at_a_small_size(suite: str) -> None:
    if suite.endswith("kube.py"):
        from tests.kube.conftest import _testenv

        reason = None if _testenv() is not None else "etcd and kube-apiserver are not built (scripts/kube-testenv.sh)"
        reason = reason or (None if os.geteuid() == 0 else "needs root (the daemon's network namespace)")
        if reason:
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
    if suite.endswith("rte_acl.py"):
        # its rule sets are data kept outside the repository: without them it would only skip
        shared_path("classbench", "acl1_1000.trace.gz", what="ClassBench rule sets and traces")
    if suite.endswith(("nfqueue_peer.py", "reload.py")) and os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("needs root (network namespaces, iptables, NFQUEUE)")
        pytest.skip("needs root (network namespaces, iptables, NFQUEUE)")
    env = dict(
        os.environ,
        PYCLASSIFY_SCALE_SIZES="300",
        PYCLASSIFY_SCALE_PACKETS="20000",
        PYCLASSIFY_SCALE_CHANGES="12",
        PYCLASSIFY_LOAD_SIZES="300",
        PYCLASSIFY_SCHEMA_PODS="300",
        PYCLASSIFY_SCHEMA_ROUNDS="1",
        PYCLASSIFY_KUBE_PODS="300",
        PYCLASSIFY_KUBE_EVENTS="20",
        PYCLASSIFY_DIFF_PODS="300",
        PYCLASSIFY_DIFF_ROUNDS="1",
        PYCLASSIFY_DIFF_SAMPLE="500",
        PYCLASSIFY_ACL_SETS="acl1_1000",
        PYCLASSIFY_ACL_ROUNDS="1",
        PYCLASSIFY_REPLAY_PACKETS="20000",
        PYCLASSIFY_PEER_COUNT="5000",
        PYCLASSIFY_PEER_SAT_SECONDS="1",
        PYCLASSIFY_RELOAD_PODS="300",
        PYCLASSIFY_RELOAD_ROUNDS="3",
        PYCLASSIFY_HTTP_CONNECTIONS="500",
        PYCLASSIFY_REPORT_BENCH_PODS="300",
        PYCLASSIFY_REPORT_BENCH_ROUNDS="1",
        PYCLASSIFY_RECORD_PODS="300",
        PYCLASSIFY_RECORDS="5000",
        PYCLASSIFY_DIFF_RECORDS="20000",
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            suite,
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1]
