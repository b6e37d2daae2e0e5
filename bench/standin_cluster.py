"""STAND-IN for ``bench.cluster`` (issue 11, item 1), which is being written on another branch.

Just enough of a cluster to measure the loader: ``n`` pods in ``n // 100`` namespaces and
``n // 10`` NetworkPolicies, shaped as ``kubectl get -o yaml`` / ``-o json`` prints them (sorted
keys, a ``kind: List`` whose ``kind`` comes after its items). Seeded and deterministic. When
``bench.cluster`` lands, the loading benchmark should take its files instead and this module goes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml


def standin_objects(n_pods: int, seed: int = 11) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    n_ns = max(1, n_pods // 100)
    objects: list[dict[str, Any]] = []
    for ns in range(n_ns):
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": f"ns-{ns}", "labels": {"kubernetes.io/metadata.name": f"ns-{ns}",
                                                                    "team": f"t{ns % 7}"}}})
    for i in range(n_pods):
        ns, app = f"ns-{i % n_ns}", f"app-{i % 37}"
        # Hashes start with a letter, so no YAML 1.1 writer leaves one unquoted that YAML 1.2 reads
        # as a number (kubectl's writer quotes them; PyYAML's, used here, would not).
        rs = f"{app}-{rng.choice('bcdfghjkl')}{rng.getrandbits(32):08x}"
        name = f"{rs}-{rng.getrandbits(25):05x}"
        ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        objects.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "creationTimestamp": "2026-05-01T10:00:00Z",
                "generateName": rs + "-",
                "labels": {"app": app, "pod-template-hash": rs.rsplit("-", 1)[1], "tier": rng.choice(["web", "api", "db"])},
                "name": name, "namespace": ns,
                "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": True, "controller": True,
                                     "kind": "ReplicaSet", "name": rs}],
                "resourceVersion": str(100000 + i), "uid": f"{rng.getrandbits(128):032x}",
            },
            "spec": {
                "containers": [{"image": f"registry.example/{app}:1.{i % 9}", "imagePullPolicy": "IfNotPresent",
                                "name": app,
                                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                                "resources": {}}],
                "nodeName": f"node-{i % 50}", "serviceAccountName": f"sa-{i % 5}",
            },
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
        })
    for p in range(n_pods // 10):
        ns = f"ns-{p % n_ns}"
        objects.append({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"np-{p}", "namespace": ns},
            "spec": {
                "podSelector": {"matchLabels": {"app": f"app-{p % 37}"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": "web"}}},
                                      {"namespaceSelector": {"matchLabels": {"team": f"t{p % 7}"}}},
                                      {"ipBlock": {"cidr": "10.0.0.0/8", "except": [f"10.{p % 250}.0.0/16"]}}],
                             "ports": [{"port": "http", "protocol": "TCP"}, {"port": 9000, "endPort": 9100}]}],
                "egress": [{"to": [{"podSelector": {}}], "ports": [{"port": 53, "protocol": "UDP"}]}],
            },
        })
    return objects


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {"resourceVersion": ""}}


def write_yaml(path: Path, objects: list[dict[str, Any]]) -> Path:
    """Namespaces as documents of their own, then the pods and the policies each as a ``kind: List``
    document (items before kind, as kubectl prints them)."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    docs = [*namespaces, as_list(pods), as_list(policies)]
    with open(path, "w") as f:
        yaml.dump_all(docs, f, Dumper=yaml.CSafeDumper, default_flow_style=False, sort_keys=True,
                      explicit_start=True)
    return path


def write_json(path: Path, objects: list[dict[str, Any]], indent: int | None) -> Path:
    """One ``kind: List`` of every object: indented (``kubectl get -o json``) or on one line."""
    with open(path, "w") as f:
        json.dump(as_list(objects), f, indent=indent, sort_keys=True)
    return path
