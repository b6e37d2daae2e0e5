"""Failsafe ports of host endpoints (issue 18, item 9): Calico's default lists, open whatever the
policy says, configurable through FelixConfiguration ``default``, held alike by the reference
evaluator and the native engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyclassify.analysis import explain
from pyclassify.failsafe import DEFAULT_INBOUND, DEFAULT_OUTBOUND
from pyclassify.project import load_project

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
ENGINES = ["native", "reference"]

HOST = """apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0, labels: {role: node}}
spec: {node: node1, interfaceName: eth0, expectedIPs: [192.168.1.10]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: deny-everything}
spec:
  order: 1
  selector: all()
  types: [Ingress, Egress]
  ingress: [{action: Deny}]
  egress: [{action: Deny}]
"""


def _project(tmp_path: Path, extra: str = "") -> object:
    f = tmp_path / "m.yaml"
    f.write_text(HOST + extra)
    project = load_project([str(f)])
    assert not project.problems.errors, [str(p) for p in project.problems.errors]
    return project


def test_calico_default_lists():
    # docs.tigera.io/calico/latest/reference/host-endpoints/failsafe
    assert [e.label for e in DEFAULT_INBOUND] == [
        "tcp:22",
        "udp:68",
        "tcp:179",
        "tcp:2379",
        "tcp:2380",
        "tcp:5473",
        "tcp:6443",
        "tcp:6666",
        "tcp:6667",
    ]
    assert [e.label for e in DEFAULT_OUTBOUND] == [
        "udp:53",
        "udp:67",
        "tcp:179",
        "tcp:2379",
        "tcp:2380",
        "tcp:5473",
        "tcp:6443",
        "tcp:6666",
        "tcp:6667",
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_failsafe_ports_stay_open_under_a_deny_everything_policy(tmp_path, engine):
    project = _project(tmp_path)
    for entry in DEFAULT_INBOUND:
        r = explain(project, "8.8.8.8", "node1-eth0", entry.protocol, entry.port, engine=engine)
        assert r.verdict.allowed, entry
        d = r.verdict.ingress
        assert (d.tier, d.policy, d.rule) == ("failsafe", "Failsafe/inbound", entry.label)
    for entry in DEFAULT_OUTBOUND:
        r = explain(project, "node1-eth0", "8.8.8.8", entry.protocol, entry.port, engine=engine)
        assert r.verdict.allowed and r.verdict.egress.policy == "Failsafe/outbound", entry
    # Not failsafe: the policy decides.
    for proto, port in ((6, 23), (17, 22), (6, 68), (17, 6443)):
        r = explain(project, "8.8.8.8", "node1-eth0", proto, port, engine=engine)
        assert not r.verdict.allowed and r.verdict.ingress.policy == "GlobalNetworkPolicy/deny-everything"
    # Outbound lists are about the destination port: SSH out of the host is not failsafe.
    assert not explain(project, "node1-eth0", "8.8.8.8", 6, 22, engine=engine).verdict.allowed


CONFIG = """---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  failsafeInboundHostPorts: [{protocol: TCP, port: 2222, net: 10.0.0.0/8}, {port: 8443}]
  failsafeOutboundHostPorts: []
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_felix_configuration_sets_the_lists(tmp_path, engine):
    project = _project(tmp_path, CONFIG)
    allowed = lambda src, dst, proto, port: explain(project, src, dst, proto, port, engine=engine).verdict.allowed  # noqa: E731
    assert allowed("10.1.2.3", "node1-eth0", 6, 2222)
    assert not allowed("8.8.8.8", "node1-eth0", 6, 2222)  # not from the net
    assert allowed("8.8.8.8", "node1-eth0", 6, 8443)  # protocol left out: TCP, as Felix
    assert not allowed("8.8.8.8", "node1-eth0", 6, 22)  # the defaults are replaced
    assert not allowed("node1-eth0", "8.8.8.8", 17, 53)  # outbound turned off


def test_felix_configuration_errors_name_the_field(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(HOST + CONFIG.replace("port: 8443", "port: 70000").replace("protocol: TCP", "protocol: ICMP"))
    project = load_project([str(f)])
    errors = {p.path: p.message for p in project.problems.errors}
    assert "must be TCP, UDP or SCTP" in errors["spec.failsafeInboundHostPorts[0].protocol"]
    assert "0-65535" in errors["spec.failsafeInboundHostPorts[1].port"]


def test_engines_agree_on_every_port_of_the_lists(tmp_path):
    project = _project(tmp_path, "")
    ports = sorted({e.port for e in (*DEFAULT_INBOUND, *DEFAULT_OUTBOUND)} | {1, 23, 80, 443, 65535})
    for proto in (6, 17, 132):
        for port in ports:
            for src, dst in (("8.8.8.8", "node1-eth0"), ("node1-eth0", "8.8.8.8")):
                a, b = (explain(project, src, dst, proto, port, engine=e).to_json() for e in ENGINES)
                assert a == b, (proto, port, src, dst)


def test_explain_cli_on_the_demo_ssh_to_the_node():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify",
            "explain",
            DEMO,
            "--from",
            "8.8.8.8",
            "--to",
            "node1-eth0",
            "--port",
            "22",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "allow" and doc["ingress"]["policy"] == "Failsafe/inbound"


def test_enforce_policy_source_holds_failsafe_ports_across_reloads(tmp_path):
    # What `enforce` runs: its policy source builds the engine the NFQUEUE and bridge loops judge with.
    from pyclassify.enforce.file_source import PolicySource
    from pyclassify.reference import Flow, FlowEnd

    (tmp_path / "m.yaml").write_text(HOST)
    source = PolicySource([str(tmp_path)])
    loaded = source.load()
    host = loaded.project.find_endpoint("node1-eth0")
    ssh = Flow(FlowEnd(None, "8.8.8.8"), FlowEnd(host, "192.168.1.10"), 6, 40000, 22)
    telnet = Flow(FlowEnd(None, "8.8.8.8"), FlowEnd(host, "192.168.1.10"), 6, 40000, 23)
    assert loaded.engine.evaluate(ssh).allowed and not loaded.engine.evaluate(telnet).allowed
    (tmp_path / "felix.yaml").write_text(CONFIG)  # inbound: 2222 from 10/8 and 8443 only
    loaded = source.load()
    host = loaded.project.find_endpoint("node1-eth0")
    to_host = lambda port: Flow(FlowEnd(None, "8.8.8.8"), FlowEnd(host, "192.168.1.10"), 6, 40000, port)  # noqa: E731
    assert not loaded.engine.evaluate(to_host(22)).allowed
    assert loaded.engine.evaluate(to_host(8443)).allowed
