"""Policy-shaped engine workload through the Python batch API (issue 4 item 8, "policy-shaped
workloads"): decisions through the decision memo against walking every packet's programs, in
the same run (the cluster-scale figures on ``bench.cluster`` are ``test_bench_scale.py``).

The workload (generated deterministically here as the engine spec JSON, the shape of
``pyclassify_core::engine::workload::policy_workload``): ``PODS`` pods in ``NAMESPACES``
namespaces, ``POLICIES`` policies — 60 % Kubernetes NetworkPolicy (pod and namespace selectors,
named ports, ipBlock with except), 25 % Calico ``security`` tier (Deny by nets, Log, Pass,
notPorts, ICMP), 15 % ANP/BANP (namespace selectors, Allow/Deny/Pass).

    .venv/bin/python -m pytest bench/test_bench_engine.py -s --benchmark-columns=min,mean,rounds

Set ``ENGINE_PODS``/``ENGINE_NAMESPACES``/``ENGINE_POLICIES`` to resize (defaults 10000/100/1000).
"""

from __future__ import annotations

import json
import os
import random
import resource
import time

import numpy as np
import pytest

from pyclassify import _engine
from pyclassify.batch import FLAG_HAS_PORTS, new_batch
from pyclassify.engine import VERDICT_DTYPE

PODS = int(os.environ.get("ENGINE_PODS", 10_000))
NAMESPACES = int(os.environ.get("ENGINE_NAMESPACES", 100))
POLICIES = int(os.environ.get("ENGINE_POLICIES", 1_000))
PACKETS = 1 << 16
BATCH = 256
RESULTS: dict[str, float] = {}


def _entity(**kw):
    e = {
        "nets": [],
        "not_nets": [],
        "selector": None,
        "not_selector": None,
        "endpoint_kinds": None,
        "namespace": None,
        "namespace_selector": None,
        "namespace_relation": None,
        "same_labels": [],
        "not_same_labels": [],
        "service_account_names": None,
        "service_account_selector": None,
        "service": None,
        "node_selector": None,
        "has_domains": False,
        "ports": [],
        "not_ports": [],
        "unresolvable": False,
    }
    e.update(kw)
    return e


def _rule(action, **kw):
    r = {
        "action": action,
        "ip_version": None,
        "protocols": None,
        "not_protocols": [],
        "icmp": None,
        "not_icmp": None,
        "sources": [],
        "destinations": [],
    }
    r.update(kw)
    return r


def _ports(proto, first, last=None, name=None):
    return {
        "protocol": proto,
        "first": None if name else first,
        "last": None if name else (last or first),
        "name": name,
    }


def pod_ip(i: int) -> str:
    return f"10.{1 + i // 62_500}.{(i // 250) % 250}.{1 + i % 250}"


def subject(selector, namespace=None, ns_selector=None):
    return {
        "selector": selector,
        "endpoint_kinds": ["pod"],
        "namespace": namespace,
        "namespace_selector": ns_selector,
        "service_account_selector": None,
    }


def workload(seed: int = 1) -> dict:
    rnd = random.Random(seed)
    nss = [f"ns{i}" for i in range(NAMESPACES)]
    namespaces = {
        n: {
            "kubernetes.io/metadata.name": n,
            "projectcalico.org/name": n,
            "team": f"team{i % 10}",
            "env": "prod" if i % 3 == 0 else "dev",
        }
        for i, n in enumerate(nss)
    }
    endpoints = []
    for i in range(PODS):
        ns, app, tier = nss[i % len(nss)], f"app{rnd.randrange(10)}", rnd.choice(["web", "api", "db"])
        endpoints.append(
            {
                "kind": "pod",
                "namespace": ns,
                "labels": {
                    "app": app,
                    "tier": tier,
                    "projectcalico.org/namespace": ns,
                    "projectcalico.org/orchestrator": "k8s",
                },
                "raw_labels": {"app": app, "tier": tier},
                "sa_labels": {},
                "service_account": "default",
                "ips": [pod_ip(i)],
                "ports": [
                    {"name": "http", "protocol": 6, "port": 8080},
                    {"name": "metrics", "protocol": 6, "port": 9090},
                ],
                "host_network": False,
                "profiles": [],
                "addressable": True,
            }
        )
    n_k8s, n_calico = POLICIES * 60 // 100, POLICIES * 25 // 100
    admin, baseline, security, k8s = [], [], [], []
    for k in range(POLICIES - n_k8s - n_calico):
        rule = _rule(
            rnd.choice(["Allow", "Deny", "Pass"]),
            protocols=[6],
            sources=[_entity(selector="all()", namespace_selector=f"team == 'team{rnd.randrange(10)}'")],
            destinations=[_entity(ports=[_ports(6, rnd.choice([22, 3306, 5432]))])],
        )
        p = {
            "tier": "kube-baseline" if k % 3 == 2 else "kube-admin",
            "types": ["ingress"],
            "subject": subject(
                f"app == 'app{rnd.randrange(10)}'", ns_selector=f"env == '{rnd.choice(['prod', 'dev'])}'"
            ),
            "ingress": [rule],
            "egress": [],
        }
        (baseline if k % 3 == 2 else admin).append(p)
    for _ in range(n_calico):
        ingress = []
        if rnd.random() < 0.3:
            ingress.append(_rule("Log", protocols=[6], destinations=[_entity(not_ports=[_ports(6, 8080)])]))
        ingress += [
            _rule("Deny", sources=[_entity(nets=[f"10.{1 + rnd.randrange(2)}.{rnd.randrange(40)}.0/24"])]),
            _rule("Allow", protocols=[1], icmp={"type": 8, "code": None}),
            _rule("Pass"),
        ]
        egress = [
            _rule(
                "Deny",
                protocols=[6],
                destinations=[_entity(nets=["0.0.0.0/0"], not_nets=["10.0.0.0/8"], ports=[_ports(6, 25)])],
            ),
            _rule("Pass"),
        ]
        security.append(
            {
                "tier": "security",
                "types": ["egress", "ingress"],
                "subject": subject(f"app == 'app{rnd.randrange(10)}' && tier == '{rnd.choice(['web', 'api', 'db'])}'"),
                "ingress": ingress,
                "egress": egress,
            }
        )
    for _ in range(n_k8s):
        ns = rnd.choice(nss)
        ingress = [
            _rule(
                "Allow",
                sources=[_entity(selector=f"app == 'app{rnd.randrange(10)}'", namespace=ns, endpoint_kinds=["pod"])],
                destinations=[_entity(ports=[_ports(6, None, name="http")])],
            ),
            _rule(
                "Allow",
                sources=[
                    _entity(
                        selector="all()",
                        namespace_selector=f"team == 'team{rnd.randrange(10)}'",
                        endpoint_kinds=["pod"],
                    )
                ],
                destinations=[_entity(ports=[_ports(6, 9090)])],
            ),
        ]
        if rnd.random() < 0.3:
            ingress.append(_rule("Allow", sources=[_entity(nets=["172.16.0.0/12"], not_nets=["172.16.5.0/24"])]))
        egress = [
            _rule("Allow", destinations=[_entity(ports=[_ports(17, 53)])]),
            _rule(
                "Allow",
                destinations=[
                    _entity(
                        selector=f"tier == '{rnd.choice(['web', 'api', 'db'])}'", namespace=ns, endpoint_kinds=["pod"]
                    )
                ],
            ),
        ]
        k8s.append(
            {
                "tier": "default",
                "types": ["egress", "ingress"],
                "subject": subject(f"app == 'app{rnd.randrange(10)}'", ns),
                "ingress": ingress,
                "egress": egress,
            }
        )
    return {
        "namespaces": namespaces,
        "endpoints": endpoints,
        "network_sets": [],
        "nodes": [],
        "services": [],
        "tiers": [
            {"name": "kube-admin", "default_action": "Pass"},
            {"name": "security", "default_action": "Pass"},
            {"name": "default", "default_action": "Deny"},
            {"name": "kube-baseline", "default_action": "Pass"},
        ],
        "policies": admin + security + k8s + baseline,
        "profiles": [],
    }


def headers(n: int, seed: int = 7) -> np.ndarray:
    rnd = random.Random(seed)
    batch = new_batch(n)
    src = batch["src_addr"]
    dst = batch["dst_addr"]
    for i in range(n):
        for arr in (src, dst):
            ip = rnd.choice(["172.16.1.9", "8.8.8.8"]) if rnd.random() < 0.1 else pod_ip(rnd.randrange(PODS))
            arr[i, 10:12] = 0xFF
            arr[i, 12:] = [int(x) for x in ip.split(".")]
        proto, port = rnd.choice([(6, 8080), (6, 9090), (6, 22), (6, 25), (17, 53), (1, 0), (6, 5432)])
        batch["ip_version"][i], batch["protocol"][i] = 4, proto
        if proto == 1:
            batch["icmp_type"][i] = 8
        else:
            batch["sport"][i], batch["dport"][i], batch["flags"][i] = 30000 + rnd.randrange(30000), port, FLAG_HAS_PORTS
    return batch


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def spec_json() -> str:
    return json.dumps(workload())


@pytest.fixture(scope="module")
def engine(spec_json):
    before = _rss_mib()
    t = time.perf_counter()
    e = _engine.Engine(spec_json)
    RESULTS["compile_s"] = time.perf_counter() - t
    RESULTS["rss_mib"] = _rss_mib() - before
    RESULTS["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return e


@pytest.fixture(scope="module")
def batch():
    return headers(PACKETS)


def _judge_all(engine, batch, interpret: bool) -> np.ndarray:
    out = np.zeros(len(batch), dtype=VERDICT_DTYPE)
    for i in range(0, len(batch), BATCH):
        engine.judge(batch[i : i + BATCH], out[i : i + BATCH], True, False, None, None, interpret)
    return out


def test_compile(benchmark, spec_json, engine):
    stats = dict(engine.stats())
    benchmark.pedantic(lambda: _engine.Engine(spec_json), rounds=1, iterations=1)
    print(
        f"\nbuild {PODS} pods / {POLICIES} policies: {RESULTS['compile_s']:.2f} s, RSS +{RESULTS['rss_mib']:.0f} MiB "
        f"(peak {RESULTS['peak_mib']:.0f} MiB); {stats['identities']} identities, {stats['sets']} selector sets"
    )


def test_judge_interpreter(benchmark, engine, batch):
    out = benchmark.pedantic(_judge_all, args=(engine, batch, True), rounds=3, iterations=1)
    RESULTS["interp_pps"] = PACKETS / benchmark.stats.stats.min
    RESULTS["interp_allow"] = float(out["allow"].sum())


def test_judge_compiled(benchmark, engine, batch):
    out = benchmark.pedantic(_judge_all, args=(engine, batch, False), rounds=3, iterations=1)
    pps = PACKETS / benchmark.stats.stats.min
    reference = _judge_all(engine, batch, True)
    assert np.array_equal(out, reference), "memoized and walked verdicts differ"
    base = RESULTS.get("interp_pps")
    ratio = f", ratio {pps / base:.2f}x vs walking every packet {base / 1e6:.3f} Mpps" if base else ""
    print(
        f"\njudge (batch {BATCH}): decision memo {pps / 1e6:.3f} Mpps ({1e9 / pps:.0f} ns/pkt){ratio}; "
        f"{int(out['allow'].sum())} of {PACKETS} allowed"
    )
