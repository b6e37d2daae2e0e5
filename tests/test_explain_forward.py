"""explain for traffic the host routes by a host endpoint's interface (``--in-via``/``--out-via``):
applyOnForward policy judges it with the host endpoint as the subject of that side, on both
evaluators; traffic to or from the host itself is not routed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")

FORWARD = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: edge-forward}
spec:
  order: 5
  selector: host-endpoint == 'true'
  applyOnForward: true
  types: [Ingress, Egress]
  ingress:
  - action: Deny
    protocol: TCP
    source: {nets: [203.0.113.0/24]}
    destination: {ports: [8080]}
  egress:
  - action: Deny
    protocol: TCP
    destination: {nets: [192.0.2.0/24], ports: [443]}
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("forward")
    (d / "edge-forward.yaml").write_text(FORWARD)
    return str(d)


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_forward_policy_of_the_interface_judges_routed_traffic(policy: str, engine: str) -> None:
    inbound = [
        "explain",
        DEMO,
        policy,
        "--from",
        "203.0.113.9",
        "--to",
        "frontend/web",
        "--port",
        "8080",
        "--engine",
        engine,
        "--json",
    ]
    assert json.loads(cli(*inbound).stdout)["verdict"] == "allow"  # the pod's own policy allows it
    doc = json.loads(cli(*inbound, "--in-via", "node1-eth0").stdout)
    assert doc["verdict"] == "deny"
    (fwd,) = doc["forward"]
    assert (fwd["via"], fwd["direction"], fwd["verdict"]) == ("node1-eth0", "ingress", "deny")
    decision = fwd["hooks"][-1]
    assert (decision["hook"], decision["decision"]["policy"], decision["decision"]["rule"]) == (
        "forward",
        "GlobalNetworkPolicy/edge-forward",
        0,
    )
    # another port: the forward policy's tier ends without a rule: denied there too (felix)
    other = json.loads(cli(*inbound[:7], "--port", "80", "--engine", engine, "--json", "--in-via", "node1-eth0").stdout)
    assert other["forward"][0]["hooks"][-1]["decision"]["reason"] == "end-of-tier"
    # out by the interface: its egress rules
    outbound = [
        "explain",
        DEMO,
        policy,
        "--from",
        "frontend/web",
        "--to",
        "192.0.2.9",
        "--port",
        "443",
        "--engine",
        engine,
        "--json",
        "--out-via",
        "node1-eth0",
    ]
    doc = json.loads(cli(*outbound).stdout)
    assert doc["forward"][0]["direction"] == "egress" and doc["forward"][0]["verdict"] == "deny"
    assert "routed in by host endpoint node1-eth0: deny" in cli(*inbound[:-1], "--in-via", "node1-eth0").stdout


def test_via_must_be_a_host_endpoint_that_routes(policy: str) -> None:
    base = ["explain", DEMO, policy, "--from", "203.0.113.9", "--port", "8080"]
    r = cli(*base, "--to", "frontend/web", "--in-via", "frontend/web")
    assert r.returncode == 2 and "--in-via" in r.stderr and "is not a host endpoint" in r.stderr
    r = cli(*base, "--to", "node1-eth0", "--in-via", "node1-eth0")
    assert r.returncode == 2 and "is an end of the flow" in r.stderr
