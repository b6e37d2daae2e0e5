"""A name or value with a trailing newline is invalid everywhere (a pattern anchored with "$"
and used with ``re.match`` lets one in). The values arrive as JSON strings, where a newline is
one escape away."""

from __future__ import annotations

import json

import pytest

from pyclassify.documents import Problems
from pyclassify.loader import load_text
from pyclassify.project import build_project

CASES = [
    (
        {"apiVersion": "projectcalico.org/v3", "kind": "Tier", "metadata": {"name": "sec\n"}, "spec": {"order": 1}},
        "metadata.name",
    ),
    (
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "g\n"},
            "spec": {"selector": "all()", "types": ["Ingress"]},
        },
        "metadata.name",
    ),
    (
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "NetworkPolicy",
            "metadata": {"name": "n\n", "namespace": "a"},
            "spec": {"selector": "all()", "types": ["Ingress"]},
        },
        "metadata.name",
    ),
    (
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "g"},
            "spec": {
                "selector": "all()",
                "types": ["Ingress"],
                "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": ["80:90\n"]}}],
            },
        },
        "spec.ingress[0].destination.ports[0]",
    ),
    (
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "g"},
            "spec": {"selector": "all()", "types": ["Ingress"], "tier": "sec\n"},
        },
        "spec.tier",
    ),
    (
        {
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "a"},
            "spec": {
                "priority": 1,
                "subject": {"namespaces": {}},
                "egress": [{"action": "Allow", "to": [{"domainNames": ["example.com\n"]}]}],
            },
        },
        "spec.egress[0].to[0].domainNames[0]",
    ),
    (
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http\n"}]}]},
        },
        "spec.containers[0].ports[0].name",
    ),
]


@pytest.mark.parametrize("obj,path", CASES, ids=[f"{o['kind']}:{p}" for o, p in CASES])
def test_trailing_newline_is_an_error(obj, path):
    problems = Problems()
    docs = load_text(json.dumps(obj), "t.json", problems)
    build_project(docs, problems)
    assert any(p.path.startswith(path) for p in problems.errors), [str(p) for p in problems.errors]
