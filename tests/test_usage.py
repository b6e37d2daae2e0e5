"""``pyclassify usage``: rules counted by what they decided in traffic; shadowed rules and
redundant policies found from the policy alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pyclassify.project import load_project
from pyclassify.usage import redundant_policies, shadowed_rules

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
TRAFFIC = ROOT / "examples" / "traffic"

NAMESPACE = """apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {containers: [{name: c, image: nginx}]}
status: {podIP: 10.9.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec: {containers: [{name: c, image: pg}]}
status: {podIP: 10.9.0.2}
"""
POLICIES = """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-in, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 5000, endPort: 6000}]
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 5432}]
  - from: [{podSelector: {matchLabels: {app: other}}}]
    ports: [{protocol: TCP, port: 5432}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-in-again, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 5432}]
"""


def test_shadowed_and_redundant(tmp_path):
    (tmp_path / "inv.yaml").write_text(NAMESPACE)
    (tmp_path / "pol.yaml").write_text(POLICIES)
    project = load_project([tmp_path])
    shadowed = shadowed_rules(project.policy_set)
    assert [(s.policy, s.rule, s.by) for s in shadowed] == [("NetworkPolicy/shop/db-in", 1, 0)]
    redundant = redundant_policies(project.policy_set, project.inventory)
    assert [r.policy for r in redundant] == ["NetworkPolicy/shop/db-in-again"]
    assert redundant[0].instead and "db-in rule 0" in redundant[0].instead[0]


def test_usage_counts_traffic_per_rule():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify.cli",
            "usage",
            str(DEMO),
            "--traffic",
            str(TRAFFIC / "hubble.jsonl"),
            "--json",
            "--no-redundant",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    used = {(x["policy"], x["direction"], str(x["rule"])): x["flows"] for x in doc["rules"]}
    assert used[("NetworkPolicy/backend/allow-api-to-db", "ingress", "0")] == 2
    assert doc["unused"], "some rule decided nothing in the sample"
    assert sum(x["records"] for x in doc["rules"]) + sum(x["records"] for x in doc["other_decisions"]) > 0


LOGGED = """apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: log-db}
spec:
  selector: app == 'db'
  types: [Ingress]
  ingress:
  - action: Log
    protocol: TCP
    destination: {ports: [5432]}
  - action: Allow
"""


def _hubble(src: str, dst: str, sport: int, dport: int) -> str:
    return json.dumps(
        {
            "flow": {
                "time": "2024-05-01T10:00:00Z",
                "verdict": "FORWARDED",
                "IP": {"source": src, "destination": dst, "ipVersion": "IPv4"},
                "l4": {"TCP": {"source_port": sport, "destination_port": dport}},
                "is_reply": False,
            }
        }
    )


def test_log_rules_count_what_they_logged(tmp_path):
    (tmp_path / "inv.yaml").write_text(NAMESPACE)
    (tmp_path / "pol.yaml").write_text(LOGGED)
    traffic = tmp_path / "flows.jsonl"
    traffic.write_text(
        "\n".join(
            [
                _hubble("10.9.0.1", "10.9.0.2", 40000, 5432),
                _hubble("10.9.0.1", "10.9.0.2", 40001, 5432),
                _hubble("10.9.0.1", "10.9.0.2", 40002, 80),
            ]
        )
        + "\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify.cli",
            "usage",
            str(tmp_path / "inv.yaml"),
            str(tmp_path / "pol.yaml"),
            "--traffic",
            str(traffic),
            "--json",
            "--no-redundant",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    rules = {(x["policy"], x["direction"], str(x["rule"])): x for x in json.loads(r.stdout)["rules"]}
    log, allow = (
        rules[("GlobalNetworkPolicy/log-db", "ingress", "0")],
        rules[("GlobalNetworkPolicy/log-db", "ingress", "1")],
    )
    assert log["action"] == "Log" and log["counted"] and log["records"] == 2
    assert allow["records"] == 3
