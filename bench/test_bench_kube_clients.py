"""Which Kubernetes client (issue 12, item 6): list and decode every pod of the generated cluster
(``PYCLASSIFY_KUBE_PODS``, 10,000 by default) from the real API server of
``bench/test_bench_kube.py``, pages of 500, with

- the official ``kubernetes`` client as pyclassify uses it (configuration, TLS, auth and HTTP
  from the client; the body read raw with orjson) — the baseline;
- the same client decoding into its models (``CoreV1Api.list_pod_for_all_namespaces``);
- lightkube (typed models, its sync client);
- kr8s (its sync API, dict-backed objects).

Each: wall seconds, best of 3, and the resident memory its import adds. lightkube and kr8s are
not dependencies of pyclassify; install them to run this (the measurement is in
bench/README.md):

    .venv/bin/python -m pip install lightkube==1.0.1 kr8s==0.20.15
    .venv/bin/python -m pytest bench/test_bench_kube_clients.py -s -p no:cacheprovider
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.test_bench_kube import PODS, cluster, record  # noqa: F401 - the module's fixture

PAGE = 500


def best(f, rounds: int = 3) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        count = f()
        times.append(time.perf_counter() - t)
    return min(times), count


def import_rss(module: str) -> float:
    """MB of resident memory importing ``module`` adds to a fresh interpreter."""
    code = (
        "def rss():\n return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])\n"
        f"a = rss()\nimport {module}\nprint((rss() - a) / 1024)"
    )
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def test_list_and_decode_every_pod_by_client(cluster):  # noqa: F811 - the fixture
    lightkube = pytest.importorskip("lightkube")
    kr8s = pytest.importorskip("kr8s")
    from kubernetes import client as k8s

    from pyclassify.kube import load_client

    server = cluster["server"]
    ours = load_client(str(server.kubeconfig), "test")

    def raw() -> int:
        return len(ours.list("/api/v1/pods", limit=PAGE)[0])

    def typed() -> int:
        api = k8s.CoreV1Api(ours.api)
        n, token = 0, None
        while True:
            page = api.list_pod_for_all_namespaces(limit=PAGE, _continue=token)
            n += len(page.items)
            token = page.metadata._continue
            if not token:
                return n

    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.resources.core_v1 import Pod

    light = lightkube.Client(config=KubeConfig.from_file(str(server.kubeconfig)).get(context_name="test"))

    def with_lightkube() -> int:
        return sum(1 for _ in light.list(Pod, namespace="*", chunk_size=PAGE))

    api = kr8s.api(kubeconfig=str(server.kubeconfig), context="test")

    def with_kr8s() -> int:
        return sum(1 for _ in api.get("pods", namespace=kr8s.ALL))

    base, n = best(raw)
    assert n >= PODS
    rows = [("kubernetes, raw JSON (pyclassify)", base, import_rss("kubernetes.client"))]
    for name, f, module in (
        ("kubernetes, its models", typed, "kubernetes.client"),
        ("lightkube 1.0.1, models", with_lightkube, "lightkube.resources.core_v1"),
        ("kr8s 0.20.15", with_kr8s, "kr8s"),
    ):
        seconds, count = best(f)
        assert count == n, (name, count, n)
        rows.append((name, seconds, import_rss(module)))
    for name, seconds, rss in rows:
        record(
            f"list + decode {n} pods: {name}",
            f"{seconds:.2f} s (best of 3), {seconds / base:.2f}x the raw path; import +{rss:.0f} MB",
        )
