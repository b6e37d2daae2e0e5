"""A seeded, deterministic cluster workload: the yardstick of the scale work (issue 11).

``generate(pods, seed)`` builds a cluster the way the API server would print it — Nodes,
Namespaces, ServiceAccounts, Services, Pods (owned by ReplicaSets, StatefulSets and DaemonSets),
NetworkPolicies, AdminNetworkPolicies, the BaselineAdminNetworkPolicy, a Calico tier with its
GlobalNetworkPolicies and GlobalNetworkSets — as plain dicts. The writers print it as
``kubectl get -o yaml`` (multi-document), ``kubectl get -o json`` (an indented ``List``) and a
single-line JSON ``List``; ``write_capture`` writes a pcap of connections among the pods and to
and from outside addresses; ``mutations`` yields single-object changes for incremental-update
benchmarks and property tests.

Everything is drawn from seeded ``random.Random`` instances (and, for packet fields, a numpy
generator seeded from one), in a fixed order, never from global state, so the same arguments
give byte-identical files.

Shape (``pods`` = P): max(4, P/100) namespaces (kube-system, monitoring, and team namespaces
labelled team/env), 3 control-plane nodes and max(3, P/100) workers with a /24 of 10.244.0.0/14
each, P/10 NetworkPolicies spread over the team namespaces by size, 5 AdminNetworkPolicies,
1 BaselineAdminNetworkPolicy, the Calico tier ``security`` with 10 GlobalNetworkPolicies and
2 GlobalNetworkSets. bench/README.md has the details and the measured sizes.

    python -m bench.cluster --pods 10000 --seed 1 --out /tmp/c10k --packets 1000000 --flows 20000
"""

from __future__ import annotations

import argparse
import copy
import gc
import io
import itertools
import json
import math
import random
import re
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

# --- the shape of the cluster ---------------------------------------------------------------------

PODS_PER_NAMESPACE = 100
PODS_PER_NODE = 100
MAX_PODS_PER_NODE = 110  # the kubelet default
POLICIES_PER_POD = 0.1
CONTROL_PLANE_NODES = 3
MIN_PODS = 40  # below this the system pods leave nothing for the teams
SYSTEM_NAMESPACES = ("kube-system", "monitoring")

POD_NETWORK = int(IPv4Address("10.244.0.0"))  # a /24 per node; a /14 holds 1,024 nodes
NODE_NETWORK = int(IPv4Address("192.168.0.0"))
SERVICE_NETWORK = int(IPv4Address("10.96.0.0"))
KUBE_DNS_IP = "10.96.0.10"
PRIVATE_NETS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
METADATA_NET = "169.254.169.254/32"
BLOCKED_NETS = ["198.51.100.0/24", "203.0.113.192/26"]  # the threat feed (GlobalNetworkSet)
PARTNER_NETS = ["192.0.2.0/24", "100.64.10.0/24"]  # partners (GlobalNetworkSet)
INTERNET_CLIENTS = "203.0.113.0/26"  # outside addresses that are neither blocked nor partners
INTERNET_SERVERS = ["93.184.215.14", "151.101.1.69", "140.82.112.3", "104.16.132.229"]

CREATED = int(datetime(2025, 3, 3, 9, 0, 0, tzinfo=UTC).timestamp())
FIRST_RESOURCE_VERSION = 4_000_000
# Kubernetes' rand.SafeEncodeString alphabet: pod name suffixes and pod-template-hash values.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

TEAMS = (
    "payments",
    "checkout",
    "catalog",
    "search",
    "identity",
    "growth",
    "ads",
    "messaging",
    "media",
    "billing",
    "logistics",
    "support",
    "analytics",
    "risk",
    "platform",
    "mobile",
    "partners",
    "reviews",
    "loyalty",
    "pricing",
)
ENVS = ("prod", "staging", "dev")
ENV_WEIGHTS = (5, 3, 2)
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")

TCP, UDP = "TCP", "UDP"


@dataclass(frozen=True)
class Archetype:
    """A kind of workload: its tier, controller, image and named container ports."""

    name: str
    tier: str
    controller: str  # Deployment | StatefulSet | DaemonSet
    image: str
    ports: tuple[tuple[str, int, str], ...]  # (name, containerPort, protocol); the first one serves
    replicas: tuple[int, int]


ARCHETYPES = (
    Archetype("web", "frontend", "Deployment", "nginx:1.27.3", (("http", 8080, TCP), ("metrics", 9113, TCP)), (2, 12)),
    Archetype(
        "storefront",
        "frontend",
        "Deployment",
        "registry.example.com/shop/storefront:4.12.0",
        (("http", 3000, TCP), ("metrics", 9090, TCP)),
        (2, 16),
    ),
    Archetype(
        "gateway",
        "frontend",
        "Deployment",
        "envoyproxy/envoy:v1.32.2",
        (("https", 8443, TCP), ("http", 8080, TCP), ("admin", 9901, TCP)),
        (2, 10),
    ),
    Archetype(
        "api",
        "backend",
        "Deployment",
        "registry.example.com/svc/api:2.31.4",
        (("http", 8080, TCP), ("grpc", 9000, TCP), ("metrics", 9090, TCP)),
        (2, 20),
    ),
    Archetype(
        "orders",
        "backend",
        "Deployment",
        "registry.example.com/svc/orders:1.9.0",
        (("grpc", 50051, TCP), ("metrics", 9090, TCP)),
        (2, 12),
    ),
    Archetype(
        "payments",
        "backend",
        "Deployment",
        "registry.example.com/svc/payments:3.2.7",
        (("grpc", 50051, TCP), ("metrics", 9090, TCP)),
        (2, 8),
    ),
    Archetype(
        "catalog",
        "backend",
        "Deployment",
        "registry.example.com/svc/catalog:0.44.1",
        (("http", 8000, TCP), ("metrics", 9090, TCP)),
        (1, 10),
    ),
    Archetype(
        "auth",
        "backend",
        "Deployment",
        "registry.example.com/svc/auth:5.0.3",
        (("http", 8080, TCP), ("grpc", 9000, TCP)),
        (2, 6),
    ),
    Archetype(
        "notifier",
        "backend",
        "Deployment",
        "registry.example.com/svc/notifier:1.1.12",
        (("http", 8080, TCP), ("metrics", 9090, TCP)),
        (1, 4),
    ),
    Archetype(
        "worker", "worker", "Deployment", "registry.example.com/svc/worker:2.31.4", (("metrics", 9090, TCP),), (1, 24)
    ),
    Archetype(
        "scheduler",
        "worker",
        "Deployment",
        "registry.example.com/svc/scheduler:2.31.4",
        (("metrics", 9090, TCP),),
        (1, 2),
    ),
    Archetype(
        "statsd",
        "worker",
        "Deployment",
        "prom/statsd-exporter:v0.28.0",
        (("statsd", 9125, UDP), ("metrics", 9102, TCP)),
        (1, 2),
    ),
    Archetype("redis", "cache", "StatefulSet", "redis:7.4.1", (("redis", 6379, TCP), ("metrics", 9121, TCP)), (1, 6)),
    Archetype("memcached", "cache", "Deployment", "memcached:1.6.32", (("memcache", 11211, TCP),), (1, 4)),
    Archetype(
        "postgres", "db", "StatefulSet", "postgres:17.2", (("postgres", 5432, TCP), ("metrics", 9187, TCP)), (1, 3)
    ),
    Archetype(
        "elasticsearch",
        "db",
        "StatefulSet",
        "elasticsearch:8.16.1",
        (("http", 9200, TCP), ("transport", 9300, TCP)),
        (1, 5),
    ),
    Archetype(
        "kafka", "queue", "StatefulSet", "apache/kafka:3.9.0", (("kafka", 9092, TCP), ("controller", 9093, TCP)), (1, 5)
    ),
    Archetype(
        "rabbitmq", "queue", "StatefulSet", "rabbitmq:4.0.4", (("amqp", 5672, TCP), ("management", 15672, TCP)), (1, 3)
    ),
)
# Who calls whom inside a namespace: callee tier -> caller tiers.
CALLERS = {
    "frontend": ("frontend",),
    "backend": ("frontend", "backend"),
    "cache": ("backend", "worker"),
    "db": ("backend", "worker"),
    "queue": ("backend", "worker"),
}


# --- the cluster ----------------------------------------------------------------------------------


@dataclass
class App:
    """A workload of a namespace: its pods share labels but for the per-ReplicaSet hash."""

    namespace: str
    name: str
    archetype: Archetype
    service_account: str
    revisions: list[tuple[str, str, str]]  # (version, pod-template-hash or revision hash, owner uid)
    controller: str
    host_network: bool = False
    extra_labels: dict[str, str] = field(default_factory=dict)
    ports: tuple[tuple[str, int, str], ...] = ()
    planned: int = 0  # pods the generator creates
    pods: int = 0  # pods created so far (StatefulSet ordinals, DaemonSet spread)

    @property
    def tier(self) -> str:
        return self.archetype.tier


@dataclass(frozen=True)
class Edge:
    """Traffic the teams intend: pods of one app call another app's named port."""

    client_namespace: str
    client_app: str
    server_namespace: str
    server_app: str
    port_name: str


@dataclass
class NodeSlot:
    name: str
    ip: str
    pod_base: int  # the /24 as an integer
    next_host: int = 2  # .1 is the bridge


@dataclass
class Cluster:
    """The objects, by kind, keyed by (namespace, name) in creation order, plus what the
    generator knows about them (apps, edges, address allocation) for captures and mutations."""

    pods_requested: int
    seed: int
    nodes: dict[tuple[str, str], dict] = field(default_factory=dict)
    namespaces: dict[tuple[str, str], dict] = field(default_factory=dict)
    service_accounts: dict[tuple[str, str], dict] = field(default_factory=dict)
    services: dict[tuple[str, str], dict] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)
    network_policies: dict[tuple[str, str], dict] = field(default_factory=dict)
    admin_network_policies: dict[tuple[str, str], dict] = field(default_factory=dict)
    baseline_admin_network_policies: dict[tuple[str, str], dict] = field(default_factory=dict)
    tiers: dict[tuple[str, str], dict] = field(default_factory=dict)
    global_network_sets: dict[tuple[str, str], dict] = field(default_factory=dict)
    global_network_policies: dict[tuple[str, str], dict] = field(default_factory=dict)
    # generator state
    apps: dict[tuple[str, str], App] = field(default_factory=dict)
    apps_by_namespace: dict[str, list[App]] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    node_slots: list[NodeSlot] = field(default_factory=list)
    team_namespaces: list[str] = field(default_factory=list)
    clock: _Clock | None = None

    KINDS = (
        "nodes",
        "namespaces",
        "service_accounts",
        "services",
        "pods",
        "network_policies",
        "admin_network_policies",
        "baseline_admin_network_policies",
        "tiers",
        "global_network_sets",
        "global_network_policies",
    )

    def objects(self, detail: str = "full") -> list[dict]:
        """Every object, cluster-wide kinds and inventory first, in a fixed order. ``detail``
        ``full`` is what the API server prints; ``policy`` keeps only what policy reads (see
        ``trim_for_policy``)."""
        if detail not in DETAILS:
            raise ValueError(f"detail must be one of {', '.join(DETAILS)}")
        out: list[dict] = []
        for kind in self.KINDS:
            out.extend(getattr(self, kind).values())
        return out if detail == "full" else [trim_for_policy(o) for o in out]

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in self.KINDS}

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return self.namespaces[("", namespace)]["metadata"]["labels"]


DETAILS = ("full", "policy")
_SERVER_METADATA = ("annotations", "creationTimestamp", "generation", "ownerReferences", "resourceVersion", "uid")
_SERVER_SPEC = {"Service": ("internalTrafficPolicy", "ipFamilies", "ipFamilyPolicy", "sessionAffinity")}


def trim_for_policy(obj: dict) -> dict:
    """``obj`` as a person writes it for policy analysis (like examples/demo): without the API
    server's bookkeeping (uid, resourceVersion, timestamps, owners, generation, defaulted
    fields) and without status that policy does not read. The input is not changed."""
    kind = obj["kind"]
    out = dict(obj)
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_METADATA}
    if kind == "Pod":
        out["status"] = {k: obj["status"][k] for k in ("podIP", "podIPs")}
    elif kind == "Node":
        out["status"] = {"addresses": obj["status"]["addresses"]}
        del out["spec"]
    elif kind in ("Namespace", "Service"):
        out.pop("status", None)
        if kind == "Namespace":
            out.pop("spec", None)
        else:
            out["spec"] = {k: v for k, v in obj["spec"].items() if k not in _SERVER_SPEC[kind]}
    return out


class _NoGC:
    """Bulk construction of millions of small dicts and lists: the cyclic collector would
    rescan the growing heap again and again (none of it is cyclic garbage)."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


class _Clock:
    """Creation timestamps, resource versions and UIDs, drawn in object order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = CREATED
        self.version = FIRST_RESOURCE_VERSION

    def metadata(self, name: str, namespace: str | None = None, step: int = 7) -> dict[str, Any]:
        self.now += self.rng.randint(1, step)
        self.version += self.rng.randint(1, 40)
        meta: dict[str, Any] = {
            "creationTimestamp": _timestamp(self.now),
            "name": name,
            "resourceVersion": str(self.version),
            "uid": self.uid(),
        }
        if namespace is not None:
            meta["namespace"] = namespace
        return meta

    def bump(self, meta: dict[str, Any]) -> None:
        """An update: a newer resourceVersion (and generation, where the kind has one)."""
        self.version += self.rng.randint(1, 40)
        meta["resourceVersion"] = str(self.version)
        if "generation" in meta:
            meta["generation"] += 1

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _timestamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _safe(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(SAFE_ALPHABET, k=n))


def _apportion(total: int, weights: list[float]) -> list[int]:
    """``total`` split by ``weights`` into integers that add up (largest remainder)."""
    scale = sum(weights)
    exact = [total * w / scale for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


# --- generation -----------------------------------------------------------------------------------


def generate(pods: int, seed: int = 1) -> Cluster:
    """A cluster of exactly ``pods`` pods; the same arguments always give the same objects."""
    if pods < MIN_PODS:
        raise ValueError(f"pods must be at least {MIN_PODS}")
    with _NoGC():
        return _generate(pods, seed)


def _generate(pods: int, seed: int) -> Cluster:
    rng = random.Random(seed)
    cluster = Cluster(pods_requested=pods, seed=seed, clock=_Clock(rng))
    _nodes(cluster, rng, max(3, math.ceil(pods / PODS_PER_NODE)))
    namespace_count = max(2 + len(SYSTEM_NAMESPACES), pods // PODS_PER_NAMESPACE)
    _namespaces(cluster, rng, namespace_count - len(SYSTEM_NAMESPACES))
    system_pods = _system_apps(cluster, rng)
    team_pods = pods - system_pods
    sizes = _apportion(team_pods, [rng.uniform(0.4, 1.6) for _ in cluster.team_namespaces])
    for namespace, size in zip(cluster.team_namespaces, sizes):
        _team_apps(cluster, rng, namespace, size)
    _cross_namespace_edges(cluster, rng)
    for app in list(cluster.apps.values()):
        _service_account(cluster, app)
    for app in _exposed_apps(cluster):
        _service(cluster, rng, app)
    for app in list(cluster.apps.values()):
        for _ in range(app.planned):
            _add_pod(cluster, rng, app)
    policy_counts = _apportion(int(pods * POLICIES_PER_POD), _policy_weights(cluster, rng))
    edges_into: dict[str, list[Edge]] = {}
    for edge in cluster.edges:
        edges_into.setdefault(edge.server_namespace, []).append(edge)
    featured = 0
    for namespace, count in zip(cluster.team_namespaces, policy_counts):
        if not count:
            continue
        # Each namespace with policies leads with another of the usual shapes, so that every
        # shape is there as soon as there are a few such namespaces.
        shape = POLICY_SHAPES[featured % len(POLICY_SHAPES)]
        featured += 1
        for policy in _namespace_policies(cluster, rng, namespace, count, edges_into.get(namespace, []), shape):
            cluster.network_policies[(namespace, policy["metadata"]["name"])] = policy
    _admin_policies(cluster)
    _calico(cluster)
    assert len(cluster.pods) == pods
    return cluster


def _nodes(cluster: Cluster, rng: random.Random, workers: int) -> None:
    """Three control-plane nodes (tainted: no pods of ours) and the workers, each with a /24."""
    clock = cluster.clock
    for i in range(CONTROL_PLANE_NODES + workers):
        control_plane = i < CONTROL_PLANE_NODES
        name = f"control-plane-{i}" if control_plane else f"worker-{i - CONTROL_PLANE_NODES:04d}"
        ip = str(IPv4Address(NODE_NETWORK + 10 + i))
        base = POD_NETWORK + 256 * i
        cidr = f"{IPv4Address(base)}/24"
        role = "node-role.kubernetes.io/control-plane" if control_plane else "node-role.kubernetes.io/worker"
        meta = clock.metadata(name, step=60)
        meta["labels"] = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            role: "",
            "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
        }
        cluster.nodes[("", name)] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
            "status": {
                "addresses": [{"address": ip, "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
                "nodeInfo": {
                    "architecture": "amd64",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.31.4",
                    "operatingSystem": "linux",
                },
            },
        }
        if not control_plane:
            cluster.node_slots.append(NodeSlot(name, ip, base))


def _namespace_object(cluster: Cluster, name: str, labels: dict[str, str]) -> dict:
    meta = cluster.clock.metadata(name, step=600)
    meta["labels"] = {**labels, "kubernetes.io/metadata.name": name}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def _namespaces(cluster: Cluster, rng: random.Random, teams: int) -> None:
    for name in SYSTEM_NAMESPACES:
        labels = {"team": "platform"} if name == "monitoring" else {}
        cluster.namespaces[("", name)] = _namespace_object(cluster, name, labels)
    used: set[str] = set(SYSTEM_NAMESPACES)
    for i in range(teams):
        team = TEAMS[i % len(TEAMS)] if i < len(TEAMS) else rng.choice(TEAMS)
        env = ENVS[i % 2] if i < 2 else rng.choices(ENVS, ENV_WEIGHTS)[0]  # prod and staging exist
        name = f"{team}-{env}"
        k = 2
        while name in used:
            name = f"{team}-{env}-{k}"
            k += 1
        used.add(name)
        labels = {"env": env, "team": team}
        if env == "prod":
            labels["pod-security.kubernetes.io/enforce"] = "baseline"
        cluster.namespaces[("", name)] = _namespace_object(cluster, name, labels)
        cluster.team_namespaces.append(name)


def _new_app(
    cluster: Cluster,
    rng: random.Random,
    namespace: str,
    name: str,
    archetype: Archetype,
    pods: int,
    own_account: bool,
    controller: str | None = None,
    **kw: Any,
) -> App:
    controller = controller or archetype.controller
    major, minor = rng.randint(1, 6), rng.randint(0, 40)
    versions = [f"v{major}.{minor}.{rng.randint(0, 9)}"]
    if controller == "Deployment" and pods >= 4 and rng.random() < 0.15:
        versions.append(f"v{major}.{minor + 1}.0")  # a rollout under way: two ReplicaSets
    revisions = [(v, _safe(rng, rng.choice((9, 10))), cluster.clock.uid()) for v in versions]
    app = App(
        namespace,
        name,
        archetype,
        name if own_account else "default",
        revisions,
        controller,
        ports=archetype.ports,
        planned=pods,
        **kw,
    )
    cluster.apps[(namespace, name)] = app
    cluster.apps_by_namespace.setdefault(namespace, []).append(app)
    return app


def _system_apps(cluster: Cluster, rng: random.Random) -> int:
    """kube-dns and metrics-server in kube-system; Prometheus, kube-state-metrics and a
    host-network node-exporter (on every tenth node) in monitoring. Returns their pod count."""
    pods = cluster.pods_requested
    dns = Archetype(
        "coredns",
        "dns",
        "Deployment",
        "registry.k8s.io/coredns/coredns:v1.11.3",
        (("dns", 53, UDP), ("dns-tcp", 53, TCP), ("metrics", 9153, TCP)),
        (2, 2),
    )
    app = _new_app(
        cluster, rng, "kube-system", "coredns", dns, max(2, pods // 2500), True, extra_labels={"k8s-app": "kube-dns"}
    )
    app.revisions = app.revisions[:1]
    metrics = Archetype(
        "metrics-server",
        "monitoring",
        "Deployment",
        "registry.k8s.io/metrics-server/metrics-server:v0.7.2",
        (("https", 10250, TCP),),
        (1, 1),
    )
    _new_app(
        cluster, rng, "kube-system", "metrics-server", metrics, 1, True, extra_labels={"k8s-app": "metrics-server"}
    )
    prometheus = Archetype(
        "prometheus", "monitoring", "StatefulSet", "quay.io/prometheus/prometheus:v3.0.1", (("web", 9090, TCP),), (2, 2)
    )
    _new_app(cluster, rng, "monitoring", "prometheus", prometheus, 2, True)
    ksm = Archetype(
        "kube-state-metrics",
        "monitoring",
        "Deployment",
        "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.14.0",
        (("http-metrics", 8080, TCP), ("telemetry", 8081, TCP)),
        (1, 1),
    )
    _new_app(cluster, rng, "monitoring", "kube-state-metrics", ksm, 1, True)
    exporter = Archetype(
        "node-exporter",
        "monitoring",
        "DaemonSet",
        "quay.io/prometheus/node-exporter:v1.8.2",
        (("metrics", 9100, TCP),),
        (1, 1),
    )
    app = _new_app(
        cluster,
        rng,
        "monitoring",
        "node-exporter",
        exporter,
        math.ceil(len(cluster.node_slots) / 10),
        True,
        controller="DaemonSet",
        host_network=True,
    )
    app.revisions = app.revisions[:1]
    return sum(a.planned for a in cluster.apps.values())


def _team_apps(cluster: Cluster, rng: random.Random, namespace: str, size: int) -> None:
    """Apps drawn from the archetypes until the namespace has ``size`` pods; always at least one
    frontend and one backend so there is traffic to allow."""
    by_tier: dict[str, list[Archetype]] = {}
    for a in ARCHETYPES:
        by_tier.setdefault(a.tier, []).append(a)
    chosen = [rng.choice(by_tier["frontend"]), rng.choice(by_tier["backend"])]
    rest = [a for a in ARCHETYPES if a not in chosen]
    rng.shuffle(rest)
    chosen += rest
    left = size
    names: dict[str, int] = {}
    i = 0
    while left > 0:
        archetype = chosen[i % len(chosen)]
        i += 1
        lo, hi = archetype.replicas
        count = min(left, rng.randint(lo, hi))
        left -= count
        n = names.get(archetype.name, 0) + 1
        names[archetype.name] = n
        name = archetype.name if n == 1 else f"{archetype.name}-{n}"
        _new_app(cluster, rng, namespace, name, archetype, count, rng.random() < 0.6)
    apps = _apps_of(cluster, namespace)
    for server in apps:
        callers = [a for a in apps if a is not server and a.tier in CALLERS.get(server.tier, ())]
        if server.tier == "frontend":
            callers = [a for a in callers if a.archetype.name == "gateway"]
        for client in rng.sample(callers, min(len(callers), rng.randint(1, 3))):
            cluster.edges.append(Edge(namespace, client.name, namespace, server.name, server.ports[0][0]))
        if server.archetype.name == "statsd":
            for client in apps:
                if client.tier in ("backend", "worker") and client is not server and rng.random() < 0.5:
                    cluster.edges.append(Edge(namespace, client.name, namespace, server.name, "statsd"))


def _apps_of(cluster: Cluster, namespace: str) -> list[App]:
    return cluster.apps_by_namespace.get(namespace, [])


def _cross_namespace_edges(cluster: Cluster, rng: random.Random) -> None:
    """A third of the team namespaces serve an app of theirs to another team (same env mostly)."""
    spaces = cluster.team_namespaces
    by_env: dict[str, list[str]] = {}
    for ns in spaces:
        by_env.setdefault(cluster.namespace_labels(ns)["env"], []).append(ns)
    for namespace in spaces:
        if rng.random() > 0.35:
            continue
        servers = [a for a in _apps_of(cluster, namespace) if a.tier == "backend"]
        env = cluster.namespace_labels(namespace)["env"]
        pool = by_env[env] if len(by_env[env]) > 1 and rng.random() < 0.8 else spaces
        if not servers or len(pool) < 2:
            continue
        client_ns = namespace
        while client_ns == namespace:
            client_ns = rng.choice(pool)
        clients = [a for a in _apps_of(cluster, client_ns) if a.tier in ("frontend", "backend")]
        server = rng.choice(servers)
        client = rng.choice(clients)
        cluster.edges.append(Edge(client_ns, client.name, namespace, server.name, server.ports[0][0]))


def _service_account(cluster: Cluster, app: App) -> None:
    for name in ("default", app.service_account):
        key = (app.namespace, name)
        if key not in cluster.service_accounts:
            meta = cluster.clock.metadata(name, app.namespace)
            if name != "default":
                meta["labels"] = {"app": app.name}
            cluster.service_accounts[key] = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def _exposed_apps(cluster: Cluster) -> list[App]:
    """The apps with a Service: the add-ons, each team namespace's entry point (its first
    frontend) and the apps other teams call."""
    called = {(e.server_namespace, e.server_app) for e in cluster.edges if e.client_namespace != e.server_namespace}
    out = []
    entry_points: set[str] = set()
    for key, app in cluster.apps.items():
        entry = app.tier == "frontend" and app.namespace not in entry_points
        if entry:
            entry_points.add(app.namespace)
        if (
            app.namespace in SYSTEM_NAMESPACES
            and not app.host_network
            and app.name != "kube-state-metrics"
            or entry
            or key in called
        ):
            out.append(app)
    return out


def _service(cluster: Cluster, rng: random.Random, app: App) -> None:
    """A ClusterIP Service (headless for StatefulSets) selecting the app's pods and naming
    their container ports as targets."""
    name = "kube-dns" if app.name == "coredns" else app.name
    meta = cluster.clock.metadata(name, app.namespace)
    selector = {"k8s-app": app.extra_labels["k8s-app"]} if "k8s-app" in app.extra_labels else {"app": app.name}
    meta["labels"] = dict(selector)
    if app.controller == "StatefulSet":
        ips: list[str] = ["None"]
    elif app.name == "coredns":
        ips = [KUBE_DNS_IP]
    else:
        ips = [str(IPv4Address(SERVICE_NETWORK + 256 + len(cluster.services) * 7 + rng.randint(0, 6)))]
    ports = []
    for port_name, number, protocol in app.ports:
        exposed = {"http": 80, "https": 443, "grpc": 9000}.get(port_name, number)
        ports.append({"name": port_name, "port": exposed, "protocol": protocol, "targetPort": port_name})
    cluster.services[(app.namespace, name)] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": ips[0],
            "clusterIPs": ips,
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": ports,
            "selector": selector,
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    }


def _place(cluster: Cluster, rng: random.Random, host_network_node: int | None = None) -> NodeSlot:
    slots = cluster.node_slots
    if host_network_node is not None:
        return slots[host_network_node]
    start = rng.randrange(len(slots))
    for k in range(len(slots)):
        slot = slots[(start + k) % len(slots)]
        if slot.next_host - 2 < MAX_PODS_PER_NODE:
            return slot
    # Every node full (only after many added pods): the /24 still has room past the kubelet cap.
    for k in range(len(slots)):
        slot = slots[(start + k) % len(slots)]
        if slot.next_host < 255:
            return slot
    raise RuntimeError("no pod addresses left on any node")


def _unique_pod_name(cluster: Cluster, rng: random.Random, namespace: str, prefix: str) -> str:
    """``prefix-xxxxx`` as a controller names pods, drawn again on the rare collision."""
    while True:
        name = f"{prefix}-{_safe(rng, 5)}"
        if (namespace, name) not in cluster.pods:
            return name


def _add_pod(cluster: Cluster, rng: random.Random, app: App, revision: int | None = None) -> dict:
    """One pod of ``app`` on a node with room, with the next address of that node's /24."""
    clock = cluster.clock
    arch = app.archetype
    ordinal = app.pods
    app.pods += 1
    if revision is None:
        # The newer ReplicaSet of a rollout holds about a third of the pods.
        revision = 1 if len(app.revisions) > 1 and rng.random() < 0.35 else 0
    version, rev_hash, owner_uid = app.revisions[revision]
    labels = {"app": app.name} if "k8s-app" not in app.extra_labels else {}
    labels.update(app.extra_labels)
    if app.namespace != "kube-system":  # the add-ons carry only their k8s-app label
        labels.setdefault("tier", arch.tier)
        labels["version"] = version
    if app.controller == "Deployment":
        owner_kind, owner = "ReplicaSet", f"{app.name}-{rev_hash}"
        labels["pod-template-hash"] = rev_hash
        name = _unique_pod_name(cluster, rng, app.namespace, owner)
    elif app.controller == "StatefulSet":
        owner_kind, owner = "StatefulSet", app.name
        name = f"{app.name}-{ordinal}"
        labels["apps.kubernetes.io/pod-index"] = str(ordinal)
        labels["controller-revision-hash"] = f"{app.name}-{rev_hash}"
        labels["statefulset.kubernetes.io/pod-name"] = name
    else:
        owner_kind, owner = "DaemonSet", app.name
        name = _unique_pod_name(cluster, rng, app.namespace, app.name)
        labels["controller-revision-hash"] = rev_hash
        labels["pod-template-generation"] = "1"
    if app.host_network:
        slot = _place(cluster, rng, host_network_node=(ordinal * 10) % len(cluster.node_slots))
        ip = slot.ip
    else:
        slot = _place(cluster, rng)
        ip = str(IPv4Address(slot.pod_base + slot.next_host))
        slot.next_host += 1
    meta = clock.metadata(name, app.namespace, step=3)
    meta["labels"] = labels
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "controller": True,
            "kind": owner_kind,
            "name": owner,
            "uid": owner_uid,
        }
    ]
    if any(p[0] == "metrics" for p in app.ports) and rng.random() < 0.1:
        port = next(p[1] for p in app.ports if p[0] == "metrics")
        meta["annotations"] = {"prometheus.io/port": str(port), "prometheus.io/scrape": "true"}
    container = {
        # The teams' own images are tagged with the app's version.
        "image": f"{arch.image.rsplit(':', 1)[0]}:{version[1:]}"
        if arch.image.startswith("registry.example.com/")
        else arch.image,
        "name": arch.name,
        "ports": [{"containerPort": n, "name": p, "protocol": proto} for p, n, proto in app.ports],
    }
    spec: dict[str, Any] = {"containers": [container], "nodeName": slot.name, "serviceAccountName": app.service_account}
    if app.host_network:
        spec["hostNetwork"] = True
        container["ports"] = [dict(p, hostPort=p["containerPort"]) for p in container["ports"]]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"hostIP": slot.ip, "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    }
    cluster.pods[(app.namespace, name)] = pod
    return pod


# --- NetworkPolicies -----------------------------------------------------------------------------


def _ns_name(name: str) -> dict:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def _dns_peer() -> dict:
    return {"namespaceSelector": _ns_name("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}


DNS_PORTS = [{"port": 53, "protocol": UDP}, {"port": 53, "protocol": TCP}]


def _netpol(cluster: Cluster, namespace: str, name: str, spec: dict) -> dict:
    meta = cluster.clock.metadata(name, namespace)
    meta["generation"] = 1
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def _policy_weights(cluster: Cluster, rng: random.Random) -> list[float]:
    """How the NetworkPolicies spread over the team namespaces: by size, except that some
    teams (dev ones more often) have written none at all."""
    none_odds = {"prod": 0.15, "staging": 0.3, "dev": 0.5}
    weights = []
    for i, ns in enumerate(cluster.team_namespaces):
        size = sum(a.pods for a in _apps_of(cluster, ns))
        # The first (prod) namespace always has policies, the second (staging) never: small
        # clusters get both kinds too.
        none = i == 1 or (i > 1 and rng.random() < none_odds[cluster.namespace_labels(ns)["env"]])
        weights.append(0.0 if none else size * rng.uniform(0.5, 1.5))
    return weights


def _namespace_policies(
    cluster: Cluster, rng: random.Random, namespace: str, count: int, edges: list[Edge], featured: str
) -> list[dict]:
    """``count`` NetworkPolicies of a namespace: a default deny first in most namespaces, then
    the intended edges and the other usual shapes, shuffled, cut at ``count``."""
    env = cluster.namespace_labels(namespace)["env"]
    specs: list[tuple[str, dict]] = []
    deny_odds = {"prod": 0.7, "staging": 0.5, "dev": 0.25}[env]
    if rng.random() < deny_odds:
        if rng.random() < 0.15 and count >= 2:
            specs.append(("default-deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))
            specs.append(
                (
                    "allow-dns-egress",
                    {
                        "podSelector": {},
                        "policyTypes": ["Egress"],
                        "egress": [{"ports": DNS_PORTS, "to": [_dns_peer()]}, {"to": [{"podSelector": {}}]}],
                    },
                )
            )
        else:
            specs.append(("default-deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    candidates = list(_edge_policies(cluster, rng, namespace, edges))
    candidates += [_policy_shape(cluster, rng, namespace, shape) for shape in POLICY_SHAPES if shape != featured]
    rng.shuffle(candidates)
    candidates.append(_policy_shape(cluster, rng, namespace, featured))  # popped first
    names = {n for n, _ in specs}
    extra = 0
    while len(specs) < count:
        if candidates:
            name, spec = candidates.pop()
        else:
            extra += 1
            name, spec = _policy_shape(cluster, rng, namespace, rng.choice(POLICY_SHAPES), extra)
        if spec is None or name in names:
            continue
        names.add(name)
        specs.append((name, spec))
    return [_netpol(cluster, namespace, name, spec) for name, spec in specs[:count]]


def _edge_policies(
    cluster: Cluster, rng: random.Random, namespace: str, edges_into: list[Edge]
) -> Iterator[tuple[str, dict]]:
    """Ingress allows for the edges into this namespace: one policy per server listing its
    clients (some teams write one policy per client instead)."""
    by_server: dict[str, list[Edge]] = {}
    for edge in edges_into:
        by_server.setdefault(edge.server_app, []).append(edge)
    for server, edges in by_server.items():
        per_client = rng.random() < 0.4
        groups = [[e] for e in edges] if per_client else [edges]
        for group in groups:
            peers = []
            for e in group:
                peer: dict[str, Any] = {"podSelector": {"matchLabels": {"app": e.client_app}}}
                if e.client_namespace != namespace:
                    ns_labels = cluster.namespace_labels(e.client_namespace)
                    peer["namespaceSelector"] = {
                        "matchExpressions": [{"key": "env", "operator": "In", "values": [ns_labels["env"]]}],
                        "matchLabels": {"team": ns_labels["team"]},
                    }
                peers.append(peer)
            ports = sorted({(e.port_name, _port_protocol(cluster, e)) for e in group})
            name = f"allow-{group[0].client_app}-to-{server}" if per_client else f"{server}-ingress"
            if per_client and group[0].client_namespace != namespace:
                name = f"allow-{group[0].client_namespace}-{group[0].client_app}-to-{server}"[:63].rstrip("-")
            yield (
                name,
                {
                    "ingress": [{"from": peers, "ports": [{"port": p, "protocol": proto} for p, proto in ports]}],
                    "podSelector": {"matchLabels": {"app": server}},
                    "policyTypes": ["Ingress"],
                },
            )


def _port_protocol(cluster: Cluster, edge: Edge) -> str:
    app = cluster.apps[(edge.server_namespace, edge.server_app)]
    return next(proto for name, _, proto in app.ports if name == edge.port_name)


POLICY_SHAPES = (
    "monitoring",
    "egress-internet",
    "datastore",
    "quarantine",
    "same-namespace",
    "node-ports",
    "tier-ingress",
    "partner-cidr",
)


def _policy_shape(
    cluster: Cluster, rng: random.Random, namespace: str, shape: str, variant: int = 0
) -> tuple[str, dict | None]:
    """One of the usual NetworkPolicy shapes for this namespace (None if it has no app for it)."""
    apps = _apps_of(cluster, namespace)
    suffix = f"-{variant}" if variant else ""
    by_tier = lambda *tiers: [a for a in apps if a.tier in tiers]  # noqa: E731
    if shape == "monitoring":
        return f"allow-prometheus-scrape{suffix}", {
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": _ns_name("monitoring"),
                            "podSelector": {"matchLabels": {"app": "prometheus"}},
                        }
                    ],
                    "ports": [{"port": "metrics", "protocol": TCP}],
                }
            ],
            "podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
            "policyTypes": ["Ingress"],
        }
    if shape == "egress-internet":
        candidates = by_tier("backend", "worker")
        if not candidates:
            return "", None
        app = rng.choice(candidates)
        return f"{app.name}-egress{suffix}", {
            "egress": [
                {
                    "ports": [{"port": 443, "protocol": TCP}],
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE_NETS + [METADATA_NET]}}],
                },
                {"ports": DNS_PORTS, "to": [_dns_peer()]},
                {"to": [{"podSelector": {}}]},
            ],
            "podSelector": {"matchLabels": {"app": app.name}},
            "policyTypes": ["Egress"],
        }
    if shape == "datastore":
        stores = by_tier("db", "cache", "queue")
        if not stores:
            return "", None
        store = rng.choice(stores)
        return f"{store.name}-lockdown{suffix}", {
            "egress": [
                {"to": [{"podSelector": {"matchLabels": {"app": store.name}}}]},
                {"ports": DNS_PORTS, "to": [_dns_peer()]},
            ],
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchExpressions": [
                                    {"key": "tier", "operator": "In", "values": ["backend", "worker"]},
                                    {"key": "quarantine", "operator": "DoesNotExist"},
                                ]
                            }
                        }
                    ],
                    "ports": [{"port": store.ports[0][0], "protocol": TCP}],
                },
                {"from": [{"podSelector": {"matchLabels": {"app": store.name}}}]},
            ],
            "podSelector": {"matchLabels": {"app": store.name}},
            "policyTypes": ["Ingress", "Egress"],
        }
    if shape == "quarantine":
        return f"isolate-quarantined{suffix}", {
            "podSelector": {"matchExpressions": [{"key": "quarantine", "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"],
        }
    if shape == "same-namespace":
        return f"allow-same-namespace{suffix}", {
            "ingress": [{"from": [{"podSelector": {}}]}],
            "podSelector": {"matchExpressions": [{"key": "quarantine", "operator": "DoesNotExist"}]},
            "policyTypes": ["Ingress"],
        }
    if shape == "node-ports":
        fronts = by_tier("frontend")
        if not fronts:
            return "", None
        app = rng.choice(fronts)
        return f"{app.name}-from-load-balancers{suffix}", {
            "ingress": [
                {
                    "from": [
                        {"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.255.0/24"]}},
                        {"ipBlock": {"cidr": INTERNET_CLIENTS}},
                    ],
                    "ports": [
                        {"endPort": 8099, "port": 8000, "protocol": TCP},
                        {"port": app.ports[0][0], "protocol": TCP},
                    ],
                }
            ],
            "podSelector": {"matchLabels": {"app": app.name}},
            "policyTypes": ["Ingress"],
        }
    if shape == "tier-ingress":
        backs = by_tier("backend")
        if not backs:
            return "", None
        app = rng.choice(backs)
        return f"{app.name}-from-tiers{suffix}", {
            "ingress": [
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchExpressions": [
                                    {"key": "tier", "operator": "In", "values": ["frontend", "backend"]},
                                    {"key": "app", "operator": "NotIn", "values": [app.name]},
                                ]
                            }
                        }
                    ],
                    "ports": [{"port": p, "protocol": proto} for p, _, proto in app.ports[:2]],
                }
            ],
            "podSelector": {"matchLabels": {"app": app.name, "tier": "backend"}},
            "policyTypes": ["Ingress"],
        }
    # partner-cidr: an outside range allowed into the gateways on a port range
    fronts = by_tier("frontend") or apps
    app = rng.choice(fronts)
    third = (variant * 7 + rng.randrange(256)) % 256
    return f"allow-partner-{third}{suffix}", {
        "ingress": [
            {
                "from": [{"ipBlock": {"cidr": f"100.64.{third}.0/24", "except": [f"100.64.{third}.128/28"]}}],
                "ports": [{"endPort": 8443, "port": 8440, "protocol": TCP}],
            }
        ],
        "podSelector": {"matchLabels": {"app": app.name}},
        "policyTypes": ["Ingress"],
    }


# --- cluster-wide policy: AdminNetworkPolicy, BaselineAdminNetworkPolicy, Calico -----------------


def _admin_policies(cluster: Cluster) -> None:
    def anp(name: str, priority: int, spec: dict) -> None:
        meta = cluster.clock.metadata(name)
        meta["generation"] = 1
        cluster.admin_network_policies[("", name)] = {
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": meta,
            "spec": {"priority": priority, **spec},
        }

    anp(
        "allow-cluster-dns",
        10,
        {
            "egress": [
                {
                    "action": "Allow",
                    "name": "allow-dns",
                    "ports": [
                        {"portNumber": {"port": 53, "protocol": UDP}},
                        {"portNumber": {"port": 53, "protocol": TCP}},
                    ],
                    "to": [
                        {
                            "pods": {
                                "namespaceSelector": _ns_name("kube-system"),
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        }
                    ],
                }
            ],
            "subject": {"namespaces": {}},
        },
    )
    anp(
        "allow-monitoring-scrape",
        20,
        {
            "ingress": [
                {
                    "action": "Allow",
                    "from": [{"namespaces": _ns_name("monitoring")}],
                    "name": "scrape",
                    "ports": [{"namedPort": "metrics"}, {"portRange": {"end": 9199, "protocol": TCP, "start": 9100}}],
                }
            ],
            "subject": {
                "namespaces": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                    ]
                }
            },
        },
    )
    anp(
        "isolate-prod-from-dev",
        30,
        {
            "egress": [
                {"action": "Deny", "name": "deny-to-dev", "to": [{"namespaces": {"matchLabels": {"env": "dev"}}}]}
            ],
            "ingress": [
                {"action": "Deny", "from": [{"namespaces": {"matchLabels": {"env": "dev"}}}], "name": "deny-from-dev"}
            ],
            "subject": {"namespaces": {"matchLabels": {"env": "prod"}}},
        },
    )
    anp(
        "staging-delegation",
        40,
        {
            "ingress": [
                {
                    "action": "Pass",
                    "from": [{"namespaces": {"matchLabels": {"env": "staging"}}}],
                    "name": "pass-from-staging",
                },
                {
                    "action": "Deny",
                    "from": [
                        {
                            "namespaces": {
                                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]
                            }
                        }
                    ],
                    "name": "deny-datastore-ports",
                    "ports": [{"portRange": {"end": 6999, "protocol": TCP, "start": 5000}}, {"namedPort": "postgres"}],
                },
            ],
            "subject": {"namespaces": {"matchLabels": {"env": "staging"}}},
        },
    )
    anp(
        "protect-datastores",
        50,
        {
            "egress": [
                {"action": "Deny", "name": "deny-cloud-metadata", "to": [{"networks": [METADATA_NET]}]},
                {
                    "action": "Deny",
                    "name": "deny-control-plane",
                    "to": [
                        {
                            "nodes": {
                                "matchExpressions": [
                                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                                ]
                            }
                        }
                    ],
                },
            ],
            "ingress": [
                {
                    "action": "Pass",
                    "from": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"tier": "backend"}}}}],
                    "name": "pass-backends",
                },
                {
                    "action": "Deny",
                    "from": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"tier": "frontend"}}}}],
                    "name": "deny-frontends",
                    "ports": [{"portRange": {"end": 32767, "protocol": TCP, "start": 1024}}],
                },
            ],
            "subject": {
                "pods": {
                    "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
                    "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db", "cache"]}]},
                }
            },
        },
    )
    meta = cluster.clock.metadata("default")
    meta["generation"] = 1
    cluster.baseline_admin_network_policies[("", "default")] = {
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "BaselineAdminNetworkPolicy",
        "metadata": meta,
        "spec": {
            "egress": [{"action": "Deny", "name": "deny-cloud-metadata", "to": [{"networks": [METADATA_NET]}]}],
            "ingress": [
                {"action": "Allow", "from": [{"namespaces": _ns_name("monitoring")}], "name": "allow-monitoring"},
                {
                    "action": "Deny",
                    "from": [
                        {
                            "namespaces": {
                                "matchExpressions": [
                                    {"key": "env", "operator": "NotIn", "values": ["prod", "staging"]},
                                    {"key": "team", "operator": "Exists"},
                                ]
                            }
                        }
                    ],
                    "name": "deny-from-dev",
                },
            ],
            "subject": {
                "namespaces": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]}
            },
        },
    }


def _calico(cluster: Cluster) -> None:
    clock = cluster.clock
    cluster.tiers[("", "security")] = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "Tier",
        "metadata": clock.metadata("security"),
        "spec": {"order": 100},
    }
    for name, labels, nets in (
        ("threat-feed-blocked", {"threat-feed": "blocked"}, BLOCKED_NETS),
        ("partners", {"role": "partner"}, PARTNER_NETS),
    ):
        meta = clock.metadata(name)
        meta["labels"] = labels
        cluster.global_network_sets[("", name)] = {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkSet",
            "metadata": meta,
            "spec": {"nets": nets},
        }
    blocked = "threat-feed == 'blocked'"
    dns_dst = {"namespaceSelector": "kubernetes.io/metadata.name == 'kube-system'", "selector": "k8s-app == 'kube-dns'"}
    policies = [
        (
            "block-known-bad",
            10,
            {
                "selector": "all()",
                "types": ["Ingress", "Egress"],
                "ingress": [
                    {"action": "Log", "source": {"selector": blocked}},
                    {"action": "Deny", "source": {"selector": blocked}},
                ],
                "egress": [{"action": "Deny", "destination": {"selector": blocked}}],
            },
        ),
        (
            "quarantine",
            20,
            {
                "selector": "has(quarantine)",
                "types": ["Ingress", "Egress"],
                "ingress": [{"action": "Log"}, {"action": "Deny"}],
                "egress": [{"action": "Deny"}],
            },
        ),
        (
            "allow-cluster-dns",
            30,
            {
                "selector": "all()",
                "types": ["Egress"],
                "egress": [
                    {"action": "Allow", "destination": {**dns_dst, "ports": [53]}, "protocol": UDP},
                    {"action": "Allow", "destination": {**dns_dst, "ports": ["dns-tcp"]}, "protocol": TCP},
                ],
            },
        ),
        (
            "deny-cloud-metadata",
            40,
            {
                "selector": "all()",
                "types": ["Egress"],
                "egress": [
                    {"action": "Log", "destination": {"nets": [METADATA_NET]}},
                    {"action": "Deny", "destination": {"nets": [METADATA_NET]}},
                ],
            },
        ),
        (
            "icmp",
            50,
            {
                "selector": "all()",
                "types": ["Ingress"],
                "ingress": [
                    {
                        "action": "Allow",
                        "icmp": {"code": 0, "type": 8},
                        "protocol": "ICMP",
                        "source": {"nets": ["10.0.0.0/8", "192.168.0.0/16"]},
                    },
                    {"action": "Allow", "icmp": {"type": 3}, "protocol": "ICMP"},
                    {"action": "Deny", "protocol": "ICMP"},
                ],
            },
        ),
        (
            "dev-egress",
            60,
            {
                "namespaceSelector": "env == 'dev'",
                "selector": "all()",
                "types": ["Egress"],
                "egress": [
                    {"action": "Log", "destination": {"notNets": PRIVATE_NETS, "notPorts": [80, 443]}, "protocol": TCP},
                    {
                        "action": "Deny",
                        "destination": {"notNets": PRIVATE_NETS, "notPorts": [80, 443]},
                        "protocol": TCP,
                    },
                    {"action": "Deny", "destination": {"ports": [22, 25, "5900:5910"]}, "protocol": TCP},
                ],
            },
        ),
        (
            "prod-datastores",
            70,
            {
                "namespaceSelector": "env == 'prod'",
                "selector": "tier in {'db', 'cache'} && !has(quarantine)",
                "types": ["Ingress"],
                "ingress": [
                    {
                        "action": "Allow",
                        "protocol": TCP,
                        "source": {
                            "namespaceSelector": "env == 'prod'",
                            "selector": "tier == 'backend' || tier == 'worker'",
                        },
                        "destination": {"ports": ["postgres", "redis", 5432, 6379]},
                    },
                    {"action": "Log", "source": {"namespaceSelector": "env != 'prod'"}},
                    {"action": "Deny", "source": {"namespaceSelector": "env != 'prod'"}},
                    {"action": "Pass"},
                ],
            },
        ),
        (
            "partner-ingress",
            80,
            {
                "selector": "app == 'gateway'",
                "types": ["Ingress"],
                "ingress": [
                    {
                        "action": "Allow",
                        "protocol": TCP,
                        "source": {"selector": "role == 'partner'"},
                        "destination": {"ports": [8443, "https"]},
                    }
                ],
            },
        ),
        (
            "prod-ingress-audit",
            90,
            {
                "namespaceSelector": "env == 'prod'",
                "selector": "!has(quarantine)",
                "types": ["Ingress"],
                "ingress": [
                    {"action": "Log", "source": {"namespaceSelector": "env in {'dev', 'staging'}"}},
                    {"action": "Deny", "protocol": UDP, "source": {"notNets": ["10.0.0.0/8", "192.168.0.0/16"]}},
                ],
            },
        ),
        (
            "pass-to-namespaces",
            1000,
            {
                "selector": "all()",
                "types": ["Ingress", "Egress"],
                "ingress": [{"action": "Pass"}],
                "egress": [{"action": "Pass"}],
            },
        ),
    ]
    for short, order, spec in policies:
        name = f"security.{short}"
        cluster.global_network_policies[("", name)] = {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkPolicy",
            "metadata": clock.metadata(name),
            "spec": {"order": order, "tier": "security", **spec},
        }


# --- writers --------------------------------------------------------------------------------------

# Plain scalars that need no analysis: no indicator first, no ': ' or ' #', no trailing ':'.
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./:@+-]*\Z")
_YAML_SPECIAL_WORDS = {"y", "Y", "n", "N"}  # booleans to YAML 1.1 (and go-yaml), not to PyYAML
_ADDRESS_OR_UID = re.compile(
    r"\d{1,3}(\.\d{1,3}){3}(/\d{1,2})?\Z|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"
)
_scalar_cache: dict[str, str] = {}


def _yaml_str(s: str) -> str:
    """A string as go-yaml (kubectl) prints it: double-quoted when plain would read back as
    another type (a number, a boolean, a timestamp, null), else plain where YAML allows it,
    else single-quoted (the emitter's fallback, e.g. for a leading ``!``)."""
    cached = _scalar_cache.get(s)
    if cached is not None:
        return cached
    if not s or _resolves_to_other_type(s):
        out = json.dumps(s)
    elif (_PLAIN.match(s) and not s.endswith(":")) or _plain_allowed(s):
        out = s
    else:
        out = "'" + s.replace("'", "''") + "'"
    if len(_scalar_cache) < 200_000:
        _scalar_cache[s] = out
    return out


def _resolves_to_other_type(s: str) -> bool:
    if s in _YAML_SPECIAL_WORDS or s.isdigit():
        return True
    c = s[0] if s else ""
    if not (c.isdigit() or c in ".+-~" or s.lower() in ("true", "false", "yes", "no", "on", "off", "null")):
        return False
    if _ADDRESS_OR_UID.match(s):  # the many unique ones: strings to YAML, no need to ask
        return False
    global _resolver
    import yaml

    if _resolver is None:
        _resolver = yaml.resolver.Resolver()
    return _resolver.resolve(yaml.ScalarNode, s, (True, False)) != "tag:yaml.org,2002:str"


_resolver = None
_analyzer = None


def _plain_allowed(s: str) -> bool:
    global _analyzer
    import yaml

    if _analyzer is None:
        _analyzer = yaml.emitter.Emitter(io.StringIO())
    analysis = _analyzer.analyze_scalar(s)
    return analysis.allow_block_plain and not analysis.multiline and not analysis.empty


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, str):
        return _yaml_str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{}"  # only empty ones arrive here
    if isinstance(value, list):
        return "[]"
    raise TypeError(f"cannot print {type(value).__name__} as YAML")


def _yaml_mapping(obj: dict, indent: str, out: list[str]) -> None:
    for key in sorted(obj):
        value = obj[key]
        k = _yaml_str(key)
        if type(value) is dict and value:
            out.append(f"{indent}{k}:\n")
            _yaml_mapping(value, indent + "  ", out)
        elif type(value) is list and value:
            out.append(f"{indent}{k}:\n")
            _yaml_sequence(value, indent, out)  # kubectl does not indent a list under its key
        else:
            out.append(f"{indent}{k}: {_yaml_scalar(value)}\n")


def _yaml_sequence(seq: list, indent: str, out: list[str]) -> None:
    inner = indent + "  "
    for item in seq:
        if type(item) is dict and item:
            start = len(out)
            _yaml_mapping(item, inner, out)
            out[start] = f"{indent}- {out[start][len(inner) :]}"
        elif type(item) is list and item:
            start = len(out)
            _yaml_sequence(item, inner, out)
            out[start] = f"{indent}- {out[start][len(inner) :]}"
        else:
            out.append(f"{indent}- {_yaml_scalar(item)}\n")


def to_yaml(obj: dict) -> str:
    """One object as ``kubectl get -o yaml`` prints it: keys sorted, two-space indent, list items
    at their key's indentation, strings plain unless they would read back as something else."""
    out: list[str] = []
    _yaml_mapping(obj, "", out)
    return "".join(out)


def write_yaml(cluster: Cluster, path: str | Path, detail: str = "full") -> Path:
    """Every object as one multi-document YAML file (``---`` between documents)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f, _NoGC():
        chunk: list[str] = []
        for i, obj in enumerate(cluster.objects(detail)):
            if i:
                chunk.append("---\n")
            _yaml_mapping(obj, "", chunk)
            if len(chunk) > 100_000:
                f.write("".join(chunk))
                chunk.clear()
        f.write("".join(chunk))
    return path


def write_yaml_list(cluster: Cluster, path: str | Path, detail: str = "full") -> Path:
    """Every object in one ``kind: List`` document: what ``kubectl get pods,netpol,... -A -o yaml``
    prints for many objects at once."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f, _NoGC():
        out: list[str] = []
        _yaml_mapping(kubectl_list(cluster, detail), "", out)
        f.write("".join(out))
    return path


def kubectl_list(cluster: Cluster, detail: str = "full") -> dict:
    return {"apiVersion": "v1", "items": cluster.objects(detail), "kind": "List", "metadata": {"resourceVersion": ""}}


def _go_json_escapes(text: str) -> str:
    """Go's encoding/json escapes <, > and & inside strings (kubectl prints `&&` as \\u0026\\u0026)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def write_json_list(cluster: Cluster, path: str | Path, detail: str = "full") -> Path:
    """The cluster as ``kubectl get -o json`` prints it: a ``List``, keys sorted, four-space indent."""
    path = Path(path)
    with _NoGC():
        text = json.dumps(kubectl_list(cluster, detail), indent=4, sort_keys=True)
    path.write_text(_go_json_escapes(text) + "\n", encoding="utf-8")
    return path


def write_json_compact(cluster: Cluster, path: str | Path, detail: str = "full") -> Path:
    """The same ``List`` on one line."""
    path = Path(path)
    with _NoGC():
        text = json.dumps(kubectl_list(cluster, detail), separators=(",", ":"), sort_keys=True)
    path.write_text(_go_json_escapes(text) + "\n", encoding="utf-8")
    return path


WRITERS = {
    "yaml": (write_yaml, "cluster.yaml"),
    "json": (write_json_list, "cluster.json"),
    "json-compact": (write_json_compact, "cluster.json"),
    "yaml-list": (write_yaml_list, "cluster.yaml"),
}
DEFAULT_FORMATS = ("yaml", "json", "json-compact")


# --- captures -------------------------------------------------------------------------------------


class CaptureFlow(NamedTuple):
    """One connection of a capture (the client is the source)."""

    src: str
    dst: str
    proto: str  # TCP | UDP
    sport: int
    dport: int
    kind: str  # what it stands for: edge, random, dns, inbound, outbound, blocked


_PCAP_RECORD_HEADER = 16
DEFAULT_SNAPLEN = 262144  # tcpdump's default: whole frames
_ETH, _IP, _TCP, _UDP = 14, 20, 20, 8
_HEADER_DTYPE = np.dtype(
    [
        ("sec", "<u4"),
        ("usec", "<u4"),
        ("caplen", "<u4"),
        ("len", "<u4"),
        ("dst_mac_hi", ">u2"),
        ("dst_mac_lo", ">u4"),
        ("src_mac_hi", ">u2"),
        ("src_mac_lo", ">u4"),
        ("ethertype", ">u2"),
        ("ver_ihl", "u1"),
        ("tos", "u1"),
        ("total_len", ">u2"),
        ("ident", ">u2"),
        ("frag", ">u2"),
        ("ttl", "u1"),
        ("proto", "u1"),
        ("checksum", ">u2"),
        ("src", ">u4"),
        ("dst", ">u4"),
        ("sport", ">u2"),
        ("dport", ">u2"),
        ("seq", ">u4"),
        ("ack", ">u4"),
        ("data_offset", "u1"),
        ("flags", "u1"),
        ("window", ">u2"),
        ("tcp_checksum", ">u2"),
        ("urgent", ">u2"),
    ]
)
assert _HEADER_DTYPE.itemsize == _PCAP_RECORD_HEADER + _ETH + _IP + _TCP


def capture_flows(cluster: Cluster, flows: int, seed: int = 1) -> list[CaptureFlow]:
    """``flows`` connections: most along the teams' intended edges, some between random pods on
    a port the destination listens on, DNS to kube-dns, from outside addresses (clients,
    partners, the threat feed) into frontends, and from pods to the internet."""
    rng = random.Random(f"capture-{seed}")
    pods_by_app: dict[tuple[str, str], list[dict]] = {}
    pod_list = []
    for (ns, _), pod in cluster.pods.items():
        if pod["spec"].get("hostNetwork"):
            continue
        labels = pod["metadata"]["labels"]
        app = labels.get("app") or labels.get("k8s-app")
        pods_by_app.setdefault((ns, app), []).append(pod)
        pod_list.append(pod)
    dns = pods_by_app.get(("kube-system", "kube-dns"), [])
    fronts = [p for p in pod_list if p["metadata"]["labels"].get("tier") == "frontend"]
    edges = [
        e
        for e in cluster.edges
        if (e.client_namespace, e.client_app) in pods_by_app and (e.server_namespace, e.server_app) in pods_by_app
    ]
    blocked_hosts = [f"198.51.100.{i}" for i in range(1, 255)]
    partner_hosts = [f"192.0.2.{i}" for i in range(1, 255)]
    client_hosts = [f"203.0.113.{i}" for i in range(1, 63)]

    def port_of(pod: dict, name: str | None = None) -> tuple[int, str]:
        ports = pod["spec"]["containers"][0]["ports"]
        chosen = next((p for p in ports if p["name"] == name), None) if name else rng.choice(ports)
        return chosen["containerPort"], chosen.get("protocol", TCP)

    out: list[CaptureFlow] = []
    used: set[tuple[str, str, int, int]] = set()
    while len(out) < flows:
        roll = rng.random()
        if roll < 0.5 and edges:
            e = rng.choice(edges)
            src = rng.choice(pods_by_app[(e.client_namespace, e.client_app)])
            dst = rng.choice(pods_by_app[(e.server_namespace, e.server_app)])
            dport, proto = port_of(dst, e.port_name)
            flow = (src["status"]["podIP"], dst["status"]["podIP"], proto, dport, "edge")
        elif roll < 0.7:
            src, dst = rng.choice(pod_list), rng.choice(pod_list)
            dport, proto = port_of(dst)
            flow = (src["status"]["podIP"], dst["status"]["podIP"], proto, dport, "random")
        elif roll < 0.8 and dns:
            src = rng.choice(pod_list)
            dst = rng.choice(dns)
            flow = (src["status"]["podIP"], dst["status"]["podIP"], UDP if rng.random() < 0.9 else TCP, 53, "dns")
        elif roll < 0.9 and fronts:
            dst = rng.choice(fronts)
            dport, proto = port_of(dst)
            r = rng.random()
            hosts, kind = (
                (client_hosts, "inbound")
                if r < 0.7
                else (partner_hosts, "partner")
                if r < 0.85
                else (blocked_hosts, "blocked")
            )
            flow = (rng.choice(hosts), dst["status"]["podIP"], proto, dport, kind)
        else:
            src = rng.choice(pod_list)
            if rng.random() < 0.85:
                flow = (src["status"]["podIP"], rng.choice(INTERNET_SERVERS), TCP, 443, "outbound")
            else:
                flow = (
                    src["status"]["podIP"],
                    rng.choice(blocked_hosts + ["169.254.169.254"]),
                    TCP,
                    rng.choice((443, 80, 22)),
                    "blocked",
                )
        sport = rng.randint(32768, 60999)
        key = (flow[0], flow[1], sport, flow[3])
        if key in used:
            continue
        used.add(key)
        out.append(CaptureFlow(flow[0], flow[1], flow[2], sport, flow[3], flow[4]))
    return out


def write_capture(
    cluster: Cluster,
    path: str | Path,
    packets: int,
    flows: int,
    seed: int = 1,
    snaplen: int = DEFAULT_SNAPLEN,
    denied: Callable[[CaptureFlow], bool] | None = None,
    denied_share: float = 0.25,
) -> list[CaptureFlow]:
    """A pcap (Ethernet/IPv4, link type 1) of ``packets`` packets in ``flows`` connections,
    interleaved in time. A TCP connection is SYN, SYN-ACK, then data and ACKs both ways with
    consistent sequence numbers; a UDP flow is request/response pairs. Built with numpy: one
    record array, no per-packet Python. ``snaplen`` truncates frames as ``tcpdump -s`` does
    (headers only from 54 up; the records keep the wire length). Returns the flows (client →
    server).

    ``denied`` (a flow → whether policy denies its opening packet) makes ``denied_share`` of
    the packets belong to the flows it names: a capture taken where a firewall has not dropped
    them yet (a mirror port, a tap upstream), every packet of a denied connection kept."""
    if packets < 3 * flows:
        raise ValueError("need at least 3 packets per flow (SYN, SYN-ACK, ACK)")
    if snaplen < _ETH + _IP + _TCP:
        raise ValueError(f"snaplen must be at least {_ETH + _IP + _TCP} (the headers)")
    flow_list = capture_flows(cluster, flows, seed)
    g = np.random.default_rng(random.Random(f"packets-{seed}").getrandbits(64))
    n_flows = len(flow_list)
    chosen = None if denied is None else np.array([denied(f) for f in flow_list], dtype=bool)
    src = np.array([int(IPv4Address(f.src)) for f in flow_list], dtype=np.uint32)
    dst = np.array([int(IPv4Address(f.dst)) for f in flow_list], dtype=np.uint32)
    is_udp = np.array([f.proto == UDP for f in flow_list])
    sport = np.array([f.sport for f in flow_list], dtype=np.uint16)
    dport = np.array([f.dport for f in flow_list], dtype=np.uint16)

    # Packets per flow: at least 3, the rest spread unevenly (a few long connections).
    weights = g.pareto(1.5, n_flows) + 1.0
    budget = packets - 3 * n_flows
    if chosen is None or chosen.all() or not chosen.any():
        extra = np.floor(weights / weights.sum() * budget).astype(np.int64)
    else:
        # the denied flows' packets beyond their first three, to make up their share
        to_denied = min(max(round(denied_share * packets) - 3 * int(chosen.sum()), 0), budget)
        extra = np.zeros(n_flows, dtype=np.int64)
        for group, share in ((chosen, to_denied), (~chosen, budget - to_denied)):
            extra[group] = np.floor(weights[group] / weights[group].sum() * share).astype(np.int64)
    extra[: budget - int(extra.sum())] += 1
    per_flow = 3 + extra
    flow_of = np.repeat(np.arange(n_flows), per_flow)
    first = np.concatenate(([0], np.cumsum(per_flow)[:-1]))
    k = np.arange(packets) - first[flow_of]  # index of the packet inside its flow

    # Direction: TCP k=0 client SYN, k=1 server SYN-ACK, then alternating; UDP alternates from 0.
    udp = is_udp[flow_of]
    reply = np.where(udp, k % 2 == 1, (k == 1) | ((k >= 2) & (k % 2 == 1)))
    payload = np.where(
        udp,
        np.where(reply, 96, 40),
        np.where(k < 2, 0, np.where(reply, g.integers(0, 900, packets), g.integers(20, 400, packets))),
    )
    payload = payload.astype(np.int64)
    # TCP: the client's first data packet comes with the handshake's ACK; pure ACKs (payload 0)
    # happen on the server side now and then.
    syn = ~udp & (k == 0)
    synack = ~udp & (k == 1)

    # Sequence numbers: bytes each side sent before this packet, per flow.
    isn_c = g.integers(0, 2**32, n_flows, dtype=np.uint64)
    isn_s = g.integers(0, 2**32, n_flows, dtype=np.uint64)
    sent_before = {}
    for side, mask in (("c", ~reply), ("s", reply)):
        p = np.where(mask, payload, 0)
        c = np.cumsum(p)
        before = c - p
        sent_before[side] = before - before[first][flow_of]
    # A packet's seq counts its own side's bytes so far (the SYN takes one); its ack, every
    # byte the other side sent before it.
    seq = np.where(reply, isn_s[flow_of] + 1 + sent_before["s"], isn_c[flow_of] + 1 + sent_before["c"])
    ack = np.where(reply, isn_c[flow_of] + 1 + sent_before["c"], isn_s[flow_of] + 1 + sent_before["s"])
    seq = np.where(syn, isn_c[flow_of], np.where(synack, isn_s[flow_of], seq)) % 2**32
    ack = np.where(syn, 0, np.where(synack, isn_c[flow_of] + 1, ack)) % 2**32
    flags = np.where(syn, 0x02, np.where(synack, 0x12, np.where(payload > 0, 0x18, 0x10)))

    # Time: flows start spread over the capture; packets of a flow follow each other by a few
    # hundred microseconds (at least 1 µs apart, so the order inside a flow is kept).
    duration_us = max(1_000_000, packets * 10)
    start = g.integers(0, duration_us, n_flows)
    gaps = g.integers(1, 800, packets)
    gaps[first] = 0
    offset = np.cumsum(gaps)
    offset -= offset[first][flow_of]
    ts = start[flow_of] + offset
    order = np.lexsort((k, flow_of, ts))

    src_ip = np.where(reply, dst[flow_of], src[flow_of])
    dst_ip = np.where(reply, src[flow_of], dst[flow_of])
    src_port = np.where(reply, dport[flow_of], sport[flow_of])
    dst_port = np.where(reply, sport[flow_of], dport[flow_of])

    l4 = np.where(udp, _UDP, _TCP)
    wire_len = (_ETH + _IP + l4 + payload).astype(np.int64)
    (src_ip, dst_ip, src_port, dst_port, udp, payload, wire_len, seq, ack, flags, ts) = (
        a[order] for a in (src_ip, dst_ip, src_port, dst_port, udp, payload, wire_len, seq, ack, flags, ts)
    )

    # Every record starts with the same 70 bytes (pcap record header, Ethernet, IPv4, TCP):
    # fill them field by field, then copy them to their offsets; payloads stay zero. A UDP
    # header is shorter: its length sits where TCP's sequence number would, and the 12 bytes
    # after it are payload (zero, as they are left).
    hdr = np.zeros(packets, _HEADER_DTYPE)
    hdr["sec"] = 1767225600 + ts // 1_000_000
    hdr["usec"] = ts % 1_000_000
    captured = np.minimum(wire_len, snaplen)
    hdr["caplen"] = captured
    hdr["len"] = wire_len
    # Ethernet: locally administered MACs derived from the IPs.
    hdr["dst_mac_hi"] = hdr["src_mac_hi"] = 0x0200
    hdr["dst_mac_lo"] = dst_ip
    hdr["src_mac_lo"] = src_ip
    hdr["ethertype"] = 0x0800
    total_len = wire_len - _ETH
    ident = g.integers(0, 65536, packets)
    proto = np.where(udp, 17, 6)
    ttl = 64
    hdr["ver_ihl"] = 0x45
    hdr["total_len"] = total_len
    hdr["ident"] = ident
    hdr["frag"] = 0x4000  # don't fragment
    hdr["ttl"] = ttl
    hdr["proto"] = proto
    hdr["src"] = src_ip
    hdr["dst"] = dst_ip
    # Header checksum: one's complement of the sum of the 16-bit words.
    words = (
        (0x4500 + total_len + ident + 0x4000 + (ttl << 8) + proto)
        + (src_ip >> 16)
        + (src_ip & 0xFFFF)
        + (dst_ip >> 16)
        + (dst_ip & 0xFFFF)
    ).astype(np.uint64)
    words = (words & 0xFFFF) + (words >> 16)
    words = (words & 0xFFFF) + (words >> 16)
    hdr["checksum"] = (~words) & 0xFFFF
    hdr["sport"] = src_port
    hdr["dport"] = dst_port
    tcp = ~udp
    hdr["seq"] = np.where(tcp, seq, (_UDP + payload) << 16)  # UDP: length, checksum 0 (none)
    hdr["ack"] = np.where(tcp, ack, 0)
    hdr["data_offset"] = np.where(tcp, 0x50, 0)
    hdr["flags"] = np.where(tcp, flags, 0)
    hdr["window"] = np.where(tcp, 64240, 0)

    rec_len = _PCAP_RECORD_HEADER + captured
    rec_start = np.concatenate(([0], np.cumsum(rec_len)[:-1]))
    buf = np.zeros(int(rec_len.sum()), dtype=np.uint8)
    raw = hdr.view(np.uint8).reshape(packets, _HEADER_DTYPE.itemsize)
    columns = np.arange(_HEADER_DTYPE.itemsize)
    for lo in range(0, packets, 65536):
        hi = min(packets, lo + 65536)
        buf[rec_start[lo:hi, None] + columns] = raw[lo:hi]
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        f.write(memoryview(buf))
    return flow_list


def write_flows(flows: list[CaptureFlow], path: str | Path) -> Path:
    """The flows of a capture as tab-separated lines (a header first)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write("src\tdst\tproto\tsport\tdport\tkind\n")
        for flow in flows:
            f.write("\t".join(str(x) for x in flow) + "\n")
    return path


# --- mutations ------------------------------------------------------------------------------------

CHANGE_KINDS = (
    "pod-added",
    "pod-deleted",
    "pod-relabelled",
    "namespace-relabelled",
    "networkpolicy-added",
    "networkpolicy-changed",
    "networkpolicy-deleted",
)


class Change(NamedTuple):
    """One object changing: ``before`` is None for an add, ``after`` None for a delete."""

    kind: str
    before: dict | None
    after: dict | None


def random_change(cluster: Cluster, rng: random.Random, kind: str | None = None) -> Change:
    """A single-object change of ``kind`` (a random one if None) to the cluster as it is now.
    The cluster is not modified: ``apply_change`` does that."""
    kind = kind or rng.choice(CHANGE_KINDS)
    clock = cluster.clock
    if kind == "pod-added":
        # A scale-up: one more pod of an existing app.
        app = rng.choice([a for a in cluster.apps.values() if not a.host_network])
        saved = (app.pods, [copy.copy(s) for s in cluster.node_slots])
        pod = _add_pod(cluster, rng, app)
        del cluster.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])]
        app.pods = saved[0]
        cluster.node_slots[:] = saved[1]
        return Change(kind, None, pod)
    if kind == "pod-deleted":
        return Change(kind, _pick(cluster.pods, rng), None)
    if kind == "pod-relabelled":
        before = _pick(cluster.pods, rng)
        after = copy.deepcopy(before)
        labels = after["metadata"]["labels"]
        ns = after["metadata"]["namespace"]
        choice = rng.random()
        others = [a.name for a in _apps_of(cluster, ns) if a.name != labels.get("app") and not a.host_network]
        if "quarantine" in labels:
            del labels["quarantine"]
        elif choice < 0.35:
            labels["quarantine"] = "true"  # security.quarantine and the quarantine NetworkPolicies
        elif choice < 0.7 and "tier" in labels:
            labels["tier"] = rng.choice(
                sorted({"frontend", "backend", "worker", "cache", "db", "queue"} - {labels["tier"]})
            )
        elif others and "app" in labels:
            labels["app"] = rng.choice(others)
        else:
            labels["quarantine"] = "true"
        clock.bump(after["metadata"])
        return Change(kind, before, after)
    if kind == "namespace-relabelled":
        key = ("", rng.choice(cluster.team_namespaces))
        before = cluster.namespaces[key]
        after = copy.deepcopy(before)
        labels = after["metadata"]["labels"]
        if rng.random() < 0.6:
            labels["env"] = rng.choice([e for e in ENVS if e != labels["env"]])
        else:
            labels["team"] = rng.choice([t for t in TEAMS if t != labels["team"]])
        clock.bump(after["metadata"])
        return Change(kind, before, after)
    if kind == "networkpolicy-added":
        namespace = rng.choice(cluster.team_namespaces)
        for variant in range(1, 1000):
            name, spec = _policy_shape(cluster, rng, namespace, rng.choice(POLICY_SHAPES), variant)
            if spec is not None and (namespace, name) not in cluster.network_policies:
                return Change(kind, None, _netpol(cluster, namespace, name, spec))
        raise RuntimeError(f"no free NetworkPolicy name in {namespace}")
    if kind == "networkpolicy-changed":
        before = _pick(cluster.network_policies, rng)
        after = copy.deepcopy(before)
        _edit_policy(cluster, rng, after)
        clock.bump(after["metadata"])
        return Change(kind, before, after)
    if kind == "networkpolicy-deleted":
        return Change(kind, _pick(cluster.network_policies, rng), None)
    raise ValueError(f"unknown change kind {kind!r}: one of {', '.join(CHANGE_KINDS)}")


def _pick(objects: dict[tuple[str, str], dict], rng: random.Random) -> dict:
    if not objects:
        raise ValueError("nothing left to change")
    # random access into an insertion-ordered dict without copying its keys each time
    return next(itertools.islice(objects.values(), rng.randrange(len(objects)), None))


def _edit_policy(cluster: Cluster, rng: random.Random, policy: dict) -> None:
    """A small edit as a person makes one: another client allowed, a rule dropped, a port
    changed, or a default deny that starts covering egress too."""
    spec = policy["spec"]
    ns = policy["metadata"]["namespace"]
    apps = [a.name for a in _apps_of(cluster, ns) if not a.host_network]
    rules = spec.get("ingress") or []
    edit = rng.random()
    if rules and edit < 0.4:
        rule = rng.choice(rules)
        rule.setdefault("from", []).append({"podSelector": {"matchLabels": {"app": rng.choice(apps)}}})
    elif len(rules) > 1 and edit < 0.6:
        rules.pop(rng.randrange(len(rules)))
    elif rules and edit < 0.85:
        rule = rng.choice(rules)
        ports = [{"port": p, "protocol": TCP} for p in ("http", "grpc", "metrics", 8080, 9090)]
        rule["ports"] = [rng.choice([p for p in ports if [p] != rule.get("ports")])]
    elif "Egress" not in spec.get("policyTypes", []):
        spec["policyTypes"] = list(spec.get("policyTypes", ["Ingress"])) + ["Egress"]
    else:
        spec["podSelector"] = {"matchLabels": {"app": rng.choice(apps)}}


_CHANGE_STORE = {"pod": "pods", "namespace": "namespaces", "networkpolicy": "network_policies"}


def adversarial_policy(rules: int, cidrs: int, port_ranges: int, name: str = "adversarial") -> dict:
    """A Calico GlobalNetworkPolicy (``all()``) built to stress the engine's compiled programs:
    ``rules`` ingress rules, each allowing ``cidrs`` distinct source CIDRs to ``port_ranges``
    distinct TCP port ranges (``rules=1``: thousands of CIDRs crossed with thousands of port
    ranges in one rule; ``rules`` in the thousands with one of each: a distinct address and port
    atom per rule). Deterministic; the CIDRs are /32s in 100.64.0.0/10, the ranges 10 ports
    wide."""
    spec_rules = []
    for r in range(rules):
        nets = [str(IPv4Address(int(IPv4Address("100.64.0.0")) + r * cidrs + i)) + "/32" for i in range(cidrs)]
        ports = [
            f"{1024 + 10 * ((r * port_ranges + i) % 6000)}:{1024 + 10 * ((r * port_ranges + i) % 6000) + 9}"
            for i in range(port_ranges)
        ]
        spec_rules.append(
            {"action": "Allow", "protocol": "TCP", "source": {"nets": nets}, "destination": {"ports": ports}}
        )
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": name},
        "spec": {"selector": "all()", "types": ["Ingress"], "ingress": spec_rules},
    }


def apply_change(cluster: Cluster, change: Change) -> None:
    """Put ``change`` into ``cluster``: the object is added, replaced or removed."""
    store = getattr(cluster, _CHANGE_STORE[change.kind.split("-")[0]])
    obj = change.after if change.after is not None else change.before
    meta = obj["metadata"]
    key = (meta.get("namespace", ""), meta["name"])
    if change.after is None:
        del store[key]
        return
    store[key] = change.after
    if change.kind == "pod-added":
        # Keep the address allocation and the app's pod count in step with the new pod.
        labels = meta["labels"]
        app = cluster.apps[(meta["namespace"], labels.get("app") or _app_by_k8s_app(cluster, meta))]
        app.pods += 1
        ip = int(IPv4Address(change.after["status"]["podIP"]))
        for slot in cluster.node_slots:
            if slot.pod_base <= ip < slot.pod_base + 256:
                slot.next_host = max(slot.next_host, ip - slot.pod_base + 1)


def _app_by_k8s_app(cluster: Cluster, meta: dict) -> str:
    value = meta["labels"].get("k8s-app")
    return next(
        a.name
        for (ns, _), a in cluster.apps.items()
        if ns == meta["namespace"] and a.extra_labels.get("k8s-app") == value
    )


def mutations(
    cluster: Cluster, rng: random.Random, count: int, kinds: tuple[str, ...] = CHANGE_KINDS
) -> Iterator[Change]:
    """``count`` changes, each applied to ``cluster`` before it is yielded, so a sequence stays
    consistent (a deleted pod is not relabelled later). Kinds are drawn from ``kinds``."""
    for _ in range(count):
        # Only kinds that have something to act on (every policy may have been deleted).
        possible = [k for k in kinds if _applicable(cluster, k)]
        change = random_change(cluster, rng, rng.choice(possible))
        apply_change(cluster, change)
        yield change


def _applicable(cluster: Cluster, kind: str) -> bool:
    if kind in ("pod-deleted", "pod-relabelled"):
        return bool(cluster.pods)
    if kind in ("networkpolicy-changed", "networkpolicy-deleted"):
        return bool(cluster.network_policies)
    return True


# --- the command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="directory: one subdirectory per format")
    parser.add_argument(
        "--formats",
        default=",".join(DEFAULT_FORMATS),
        help="comma-separated, each into a directory of its own: " + ",".join(WRITERS),
    )
    parser.add_argument(
        "--detail",
        choices=DETAILS,
        default="full",
        help="full: as the API server prints objects; policy: only what policy reads",
    )
    parser.add_argument("--packets", type=int, default=0, help="also write capture/cluster.pcap")
    parser.add_argument("--flows", type=int, default=0, help="connections in the capture (default packets/50)")
    parser.add_argument(
        "--snaplen",
        type=int,
        default=DEFAULT_SNAPLEN,
        help="bytes kept of each frame, as tcpdump -s (e.g. 96: headers only, a smaller file)",
    )
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}: choose from {', '.join(WRITERS)}")
    if args.packets and not args.flows:
        args.flows = max(1, args.packets // 50)
    t0 = time.perf_counter()
    cluster = generate(args.pods, args.seed)
    print(
        f"generated {args.pods} pods in {time.perf_counter() - t0:.2f} s: "
        + ", ".join(f"{n} {k}" for k, n in cluster.counts().items())
    )
    for fmt in formats:
        writer, filename = WRITERS[fmt]
        target = args.out / fmt
        target.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        path = writer(cluster, target / filename, args.detail)
        print(f"{fmt}: {path} {path.stat().st_size / 1e6:.2f} MB in {time.perf_counter() - t0:.2f} s")
    if args.packets:
        target = args.out / "capture"
        target.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        flows = write_capture(cluster, target / "cluster.pcap", args.packets, args.flows, args.seed, args.snaplen)
        write_flows(flows, target / "flows.tsv")
        size = (target / "cluster.pcap").stat().st_size
        print(
            f"capture: {target / 'cluster.pcap'} {args.packets} packets in {len(flows)} flows, "
            f"{size / 1e6:.2f} MB in {time.perf_counter() - t0:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
