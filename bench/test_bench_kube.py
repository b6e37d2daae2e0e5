"""The Kubernetes API as the live source (issue 12), against a real etcd + kube-apiserver
(``scripts/kube-testenv.sh``): the generated cluster (``bench.cluster``, ``PYCLASSIFY_KUBE_PODS``
pods, 10,000 by default: 100 namespaces, 1,000 NetworkPolicies, 5 ANPs, a BANP, a Calico tier of 10
GlobalNetworkPolicies) is created through the API once, then, each beside a baseline measured in
the same run:

- the initial list to policy in force (``KubeSource.start``: every kind listed, decoded,
  normalized, the engine built), wall and CPU seconds, best of 3, against the same objects read
  from a YAML file (``load_project`` + ``NativeEngine``);
- a watch event to in force: pods relabelled through the API one at a time; from each event's
  arrival to the daemon's next snapshot (``KubePolicySource.load``, what ``enforce`` swaps in),
  p50 and p99 (the API server's own latency excluded, reported beside), against a full rebuild;
- the resident memory of ``pyclassify enforce --kubeconfig`` (a real daemon, in a network
  namespace of its own, reaching the API server through a relay) once the list is in force,
  against the same daemon reading the same objects from files (root only).

    .venv/bin/python -m pytest bench/test_bench_kube.py -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cluster import generate, write_yaml
from bench.kube_cluster import populate
from pyclassify.bulk import collector_paused
from pyclassify.enforce.cluster_source import KubePolicySource
from pyclassify.engine import NativeEngine
from pyclassify.kube import load_client
from pyclassify.kube.listwatch import KubeSource
from pyclassify.project import load_project

PODS = int(os.environ.get("PYCLASSIFY_KUBE_PODS", "10000"))
EVENTS = int(os.environ.get("PYCLASSIFY_KUBE_EVENTS", "200"))
PY = sys.executable


def record(what: str, text: str) -> None:
    print(f"\n[{PODS} pods] {what}: {text}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.kube.apiserver import KubeCluster
    from tests.kube.conftest import _testenv

    env = _testenv()
    if env is None:
        pytest.skip("etcd and kube-apiserver are not built: run `bash scripts/kube-testenv.sh`")
    workdir = tmp_path_factory.mktemp("kube")
    server = KubeCluster(workdir, env / "bin", env / "crds")
    server.start()
    try:
        generated = generate(PODS, seed=1)
        client = load_client(str(server.kubeconfig), "test")
        t = time.perf_counter()
        counts = populate(client, generated)
        record(
            "cluster created through the API",
            f"{sum(counts.values())} objects in {time.perf_counter() - t:.1f} s "
            f"({counts['pods']} pods, {counts['network_policies']} NetworkPolicies)",
        )
        files = workdir / "files"
        files.mkdir()
        write_yaml(generated, files / "cluster.yaml")
        yield {"server": server, "generated": generated, "files": files, "client": client}
    finally:
        server.stop()


def test_initial_list_to_in_force(cluster):
    client = cluster["client"]

    def from_api() -> KubeSource:
        source = KubeSource(client)
        source.start()
        source.stop()
        return source

    def from_files() -> NativeEngine:
        with collector_paused():
            project = load_project([str(cluster["files"])])
            return NativeEngine(project.policy_set, project.inventory)

    api = [_timed(from_api) for _ in range(3)]
    files = [_timed(from_files) for _ in range(3)]
    source = api[-1][2]
    assert source.full_builds == 1 and not source.rejected, source.rejected
    endpoints = len(source.engine().inventory.endpoints)
    assert endpoints >= PODS
    wall, cpu = min(a[0] for a in api), min(a[1] for a in api)
    fwall, fcpu = min(f[0] for f in files), min(f[1] for f in files)
    record(
        "initial list to in force (KubeSource.start)",
        f"{wall:.2f} s wall, {cpu:.2f} s CPU (best of 3); from a YAML file: {fwall:.2f} s wall, {fcpu:.2f} s CPU; "
        f"ratio {wall / fwall:.2f}x wall, {cpu / fcpu:.2f}x CPU; {endpoints} endpoints",
    )


def _timed(f):
    t, c = time.perf_counter(), time.process_time()
    value = f()
    return time.perf_counter() - t, time.process_time() - c, value


def test_watch_event_to_in_force(cluster):
    server, client, generated = cluster["server"], cluster["client"], cluster["generated"]
    source = KubePolicySource(str(server.kubeconfig), "test")
    loaded = source.load()
    in_force: list[float] = []
    seen = threading.Condition()

    def reload(arrived: float | None) -> None:
        if arrived is None:
            return
        source.load()  # the snapshot the daemon swaps in
        with seen:
            in_force.append(time.monotonic() - arrived)
            seen.notify_all()

    source.watch(reload)
    try:
        pods = sorted(generated.pods)[: max(EVENTS, 1)]
        round_trips = []
        for i, (ns, name) in enumerate(pods):
            t = time.monotonic()
            with seen:
                before = len(in_force)
                client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    body={"metadata": {"labels": {"bench-step": str(i)}}},
                    content_type="application/merge-patch+json",
                )
                assert seen.wait_for(lambda before=before: len(in_force) > before, timeout=30), "the event never came"
            round_trips.append(time.monotonic() - t)
        assert source.kube is not None and source.kube.full_builds == 1
        project = loaded.project
        rebuild = min(_timed(lambda: NativeEngine(project.policy_set, project.inventory))[0] for _ in range(3))
    finally:
        source.stop()
    p50, p99 = _quantiles(in_force)
    rt50, _ = _quantiles(round_trips)
    record(
        "watch event to in force (a pod relabelled)",
        f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms over {len(in_force)} events; full rebuild {rebuild * 1e3:.0f} ms "
        f"(p50 {rebuild / p50:.0f}x faster); PATCH to in force incl. the API server p50 {rt50 * 1e3:.1f} ms",
    )


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), q[98]


def test_enforce_resident_memory(cluster, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace and NFQUEUE for the daemon)")
    from tests.kube.test_enforce_kube import RELAY

    server = cluster["server"]
    tag = os.urandom(3).hex()
    netns = f"pcb-{tag}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        sock = str(tmp_path / "apiserver.sock")
        outside = subprocess.Popen(
            [PY, "-c", RELAY, "unix-to-tcp", sock, str(server.port)], stdout=subprocess.PIPE, text=True
        )
        procs.append(outside)
        assert outside.stdout is not None and outside.stdout.readline().strip() == "ready"
        inside = subprocess.Popen(
            ["ip", "netns", "exec", netns, PY, "-c", RELAY, "tcp-to-unix", str(server.port), sock],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(inside)
        assert inside.stdout is not None and inside.stdout.readline().strip() == "ready"
        api = _daemon_rss(netns, ["--kubeconfig", str(server.kubeconfig), "--context", "test"], procs)
        files = _daemon_rss(netns, [str(cluster["files"])], procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["ip", "netns", "del", netns], check=False)
    record(
        "enforce resident memory once in force",
        f"--kubeconfig {api[0]:.0f} MB (start {api[1]:.1f} s); the same objects from files {files[0]:.0f} MB "
        f"(start {files[1]:.1f} s); ratio {api[0] / files[0]:.2f}x",
    )


def _daemon_rss(netns: str, args: list[str], procs: list[subprocess.Popen]) -> tuple[float, float]:
    """(VmRSS MB once the daemon said "start", seconds to that line) of ``pyclassify enforce``."""
    argv = [
        "ip",
        "netns",
        "exec",
        netns,
        PY,
        "-m",
        "pyclassify",
        "enforce",
        *args,
        "--queue",
        "0",
        "--no-ipv6",
        "--no-log",
    ]
    t = time.monotonic()
    daemon = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    procs.append(daemon)
    assert daemon.stdout is not None
    for line in daemon.stdout:
        if '"event": "start"' in line or '"event":"start"' in line:
            break
    else:
        raise AssertionError(f"enforce did not start: {daemon.stderr.read() if daemon.stderr else ''}")
    started = time.monotonic() - t
    time.sleep(1.0)  # the watches connected
    with open(f"/proc/{daemon.pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    daemon.terminate()
    assert daemon.wait(timeout=30) == 0
    return rss / 1024, started
