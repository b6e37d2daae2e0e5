"""`pyclassify render`: the compiled tables of one endpoint, applied as first-match tables to
flows, give the same verdict as the reference evaluator (what `explain --engine reference`
prints) for that endpoint's side."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyclassify.cli.render import render_command
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.reference import Flow, FlowEnd, evaluate
from pyclassify.render import Table, render_tables

DEMO = str(Path(__file__).resolve().parent.parent / "examples" / "demo")
OUTSIDE = ["203.0.113.7", "8.8.8.8", "192.168.1.10", "10.0.0.1"]
PROBES = [(6, 80), (6, 443), (6, 8080), (6, 5432), (6, 22), (17, 53), (6, 9090), (1, None)]


def _matches(t, flow: Flow) -> bool:
    def port_ok(r, p):
        return (0, 65535) == tuple(r) or (p is not None and r[0] <= p <= r[1])

    return (
        ipaddress.ip_address(flow.src.ip) in ipaddress.ip_network(t.src)
        and ipaddress.ip_address(flow.dst.ip) in ipaddress.ip_network(t.dst)
        and (t.protocol is None or t.protocol == flow.protocol)
        and (flow.protocol not in (6, 17, 132, 136) or (port_ok(t.sport, flow.sport) and port_ok(t.dport, flow.dport)))
        and (flow.protocol in (6, 17, 132, 136) or (tuple(t.sport) == (0, 65535) and tuple(t.dport) == (0, 65535)))
        and (t.icmp_type is None or t.icmp_type == flow.icmp_type)
        and (t.icmp_code is None or t.icmp_code == flow.icmp_code)
    )


def _first_match(tables: list[Table], flow: Flow, has_profiles: bool) -> str | None:
    """The rendered tables as a first-match program: "allow"/"deny", None when no table applies
    (the default decides), "inexact" when a superset tuple would need confirming."""
    for t in tables:
        verdict = None
        for x in t.tuples:
            if not _matches(x, flow):
                continue
            if not x.exact:
                return "inexact"
            if x.action == "Log":
                continue
            verdict = x.action
            break
        if verdict in ("Allow", "Deny"):
            return verdict.lower()
        if verdict == "Pass":
            continue
        if t.tier is not None and t.default != "Pass":
            return t.default.lower()
    if has_profiles:
        return "deny"
    return "default" if tables else None


@pytest.fixture(scope="module")
def project():
    return load_project([DEMO])


def test_rendered_tables_agree_with_reference(project):
    compared, decided = _compare_with_reference(project, OUTSIDE)
    assert compared > 100 and decided > 20, (compared, decided)


NOT_SELECTOR_PROJECT = """\
apiVersion: v1
kind: Namespace
metadata: {name: prod}
---
apiVersion: v1
kind: Pod
metadata: {name: t, namespace: prod, labels: {app: t}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.0.0.9, podIPs: [{ip: 10.0.0.9}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: prod, labels: {app: a}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.0.0.1, podIPs: [{ip: 10.0.0.1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: o, namespace: prod, labels: {app: o}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 10.0.0.2, podIPs: [{ip: 10.0.0.2}]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: bad, labels: {app: a}}
spec: {nets: [192.0.2.0/24]}
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: bad, namespace: prod, labels: {app: a}}
spec: {nets: [198.51.100.0/24]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: not-a-in}
spec:
  selector: app == 't'
  ingress: [{action: Allow, source: {notSelector: app == 'a'}}, {action: Deny}]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: not-a-out, namespace: prod}
spec:
  selector: all()
  egress: [{action: Allow, destination: {notSelector: app == 'a'}}, {action: Deny}]
"""


def test_rendered_not_selector_tables_agree_with_reference(tmp_path):
    """A notSelector-only peer covers everything but what it matches (pods, network sets), and
    in a namespaced policy only its namespace's endpoints: the tables say so exactly."""
    (tmp_path / "p.yaml").write_text(NOT_SELECTOR_PROJECT)
    project = load_project([str(tmp_path)])
    compared, decided = _compare_with_reference(project, ["8.8.8.8", "192.0.2.7", "198.51.100.7", "203.0.113.7"])
    assert compared > 100 and decided > 50, (compared, decided)


def _compare_with_reference(project, outside: list[str]) -> tuple[int, int]:
    """Every pod's rendered tables, as first-match programs, against the reference on flows
    between its addresses and every other address: (flows compared, flows a rule decided)."""
    engine = NativeEngine(project.policy_set, project.inventory)
    pods = [p for p in project.inventory.endpoints if p.ips and not p.host_network]
    assert pods
    addresses = [str(ip) for p in project.inventory.endpoints for ip in p.ips] + outside
    compared = decided = 0
    for ep in pods:
        tables = render_tables(project, ep, engine)
        for direction in ("egress", "ingress"):
            mine = [t for t in tables if t.direction == direction and t.family == 4]
            for ip in (str(i) for i in ep.ips if i.version == 4):
                for other in addresses:
                    if ipaddress.ip_address(other).version != 4:
                        continue
                    for proto, port in PROBES:
                        src, dst = (ip, other) if direction == "egress" else (other, ip)
                        icmp = proto == 1
                        flow = Flow(
                            FlowEnd(None, src),
                            FlowEnd(None, dst),
                            proto,
                            None if icmp else 40000,
                            port,
                            8 if icmp else None,
                            0 if icmp else None,
                        )
                        got = _first_match(mine, flow, bool(ep.profiles))
                        if got == "inexact":
                            continue
                        want = evaluate(project.policy_set, project.inventory, flow)
                        decision = want.egress if direction == "egress" else want.ingress
                        if decision is None or decision.reason == "default":
                            assert got in (None, "default"), (ep.ref, flow, got, decision)
                        else:
                            assert got == decision.verdict, (ep.ref, flow, got, decision)
                            decided += 1
                        compared += 1
    return compared, decided


def test_render_command_text_and_json(project):
    pod = next(p for p in project.inventory.endpoints if p.ips and not p.host_network and p.namespace)
    runner = CliRunner()
    result = runner.invoke(render_command, [DEMO, "--endpoint", pod.ref])
    assert result.exit_code == 0, result.output
    assert f"endpoint {pod.ref}" in result.output
    assert "ingress IPv4" in result.output or "egress IPv4" in result.output
    result = runner.invoke(render_command, [DEMO, "--endpoint", pod.ref, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["endpoint"] == pod.ref
    for table in data["tables"]:
        for rule in table["rules"]:
            assert set(rule) >= {"src", "sport", "dst", "dport", "protocol", "action"}


def test_render_unknown_endpoint_is_a_clear_error():
    result = CliRunner().invoke(render_command, [DEMO, "--endpoint", "nowhere/nothing"])
    assert result.exit_code == 2
    assert "no endpoint" in result.output
