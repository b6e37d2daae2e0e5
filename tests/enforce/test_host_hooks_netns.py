"""Host-endpoint policy at its own hooks, on real packets: preDNAT policy in mangle PREROUTING
(before the nat table's DNAT, so it sees the destination port the client asked for) and
doNotTrack policy in raw PREROUTING/OUTPUT (before connection tracking: stateless, so a
flow passes both ways only with a rule for each way). The node namespace is the host; its
gateway addresses are a Calico HostEndpoint; a server listens on the node itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import HOLD, PROBE, PY, REPO, SERVER, Daemon, Topology, iptables_rules, root_reason, sh

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0
WEB, REDIRECTED, ECHO = 80, 8081, 9999

HOST = """
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-gw, labels: {host-endpoint: "true"}}
spec: {node: node1, interfaceName: "*", expectedIPs: [10.244.1.1, 10.244.2.1, 10.244.3.1]}
"""

# Normal host policy: the node's web port for pod b only.
HOST_WEB = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: host-web}
spec:
  selector: has(host-endpoint)
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, source: {nets: [10.244.2.0/24]}, destination: {ports: [80]}}
"""

# preDNAT: pod a may use the redirected port (judged on 8081, before the DNAT to 80).
PRE_DNAT = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: host-redirect}
spec:
  selector: has(host-endpoint)
  preDNAT: true
  applyOnForward: true
  ingress:
  - {action: Allow, protocol: TCP, source: {nets: [10.244.1.0/24]}, destination: {ports: [8081]}}
"""


def untracked(both_ways: bool) -> str:
    egress = (
        """
  egress:
  - {action: Allow, protocol: UDP, source: {ports: [9999]}, destination: {nets: [10.244.1.0/24]}}"""
        if both_ways
        else ""
    )
    return f"""
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: host-echo}}
spec:
  selector: has(host-endpoint)
  doNotTrack: true
  applyOnForward: true
  types: [Ingress, Egress]
  ingress:
  - {{action: Allow, protocol: UDP, source: {{nets: [10.244.1.0/24]}}, destination: {{ports: [9999]}}}}{egress}
"""


def reach(topo: Topology, pod: int, proto: str, port: int) -> bool:
    """From pod ``pod`` to its gateway (the node) on ``port``."""
    spec = {"x": (f"10.244.{pod + 1}.1", proto, port)}
    out = sh("ip", "netns", "exec", topo.pods[pod], PY, "-c", PROBE, json.dumps(spec), "1.0")
    return json.loads(out.stdout)["x"]


@pytest.fixture
def host_topo(topo: Topology) -> Topology:
    server = topo.spawn(topo.node, [PY, "-c", SERVER, "0.0.0.0", str(WEB), str(ECHO)])
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    sh(
        "ip",
        "netns",
        "exec",
        topo.node,
        "iptables",
        "-w",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-p",
        "tcp",
        "--dport",
        str(REDIRECTED),
        "-j",
        "REDIRECT",
        "--to-ports",
        str(WEB),
    )
    return topo


def explain(path: Path, src: str, port: int, pre: str | None = None) -> dict:
    args = [
        PY,
        "-m",
        "pyclassify",
        "explain",
        str(path),
        "--from",
        src,
        "--to",
        "node-gw",
        "--proto",
        "TCP",
        "--port",
        str(port),
        "--json",
    ]
    if pre:
        args += ["--pre-dnat", pre]
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_pre_dnat_policy_judges_the_destination_before_the_dnat(host_topo: Topology, tmp_path: Path) -> None:
    topo = host_topo
    manifests.write(tmp_path)
    (tmp_path / "60-host.yaml").write_text(HOST + "---" + HOST_WEB + "---" + PRE_DNAT)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    start = daemon.wait_event("start")
    assert start["hook_queues"] == {"pre-dnat": 1}
    assert "PYCLASSIFY-PREROUTING" in iptables_rules(topo.node, "mangle")
    # a: its redirected port is allowed before the DNAT, and normal host policy is skipped
    # (it would deny a on 80); its direct port 80 meets normal host policy alone, and is denied
    assert reach(topo, 0, "TCP", REDIRECTED)
    assert not reach(topo, 0, "TCP", WEB)
    # b: no pre-DNAT rule for it; normal policy judges the translated port (80), and allows
    assert reach(topo, 1, "TCP", WEB) and reach(topo, 1, "TCP", REDIRECTED)
    # c: neither
    assert not reach(topo, 2, "TCP", REDIRECTED) and not reach(topo, 2, "TCP", WEB)
    # explain says the same, hook by hook
    got = explain(tmp_path, "a/a1", WEB, pre=f"10.244.1.1:{REDIRECTED}")
    assert got["verdict"] == "allow" and got["host_path"]["hooks"][1]["hook"] == "pre-dnat"
    assert got["host_path"]["hooks"][1]["decision"]["policy"] == "GlobalNetworkPolicy/host-redirect"
    assert explain(tmp_path, "a/a1", WEB)["verdict"] == "deny"
    assert explain(tmp_path, "b/b1", WEB, pre=f"10.244.2.1:{REDIRECTED}")["verdict"] == "allow"
    assert daemon.terminate() == 0
    assert "PYCLASSIFY-PREROUTING" in iptables_rules(topo.node, "mangle")  # kept for the next daemon


def test_a_change_to_pre_dnat_policy_judges_the_connections_it_let_on(host_topo: Topology, tmp_path: Path) -> None:
    """Connections to the redirected port: a's was allowed by the pre-DNAT rule (normal host
    policy skipped), b's by normal host policy (no pre-DNAT rule for b). The pre-DNAT rule
    moves to c: a's connection is judged by normal host policy now, which denies it, and is cut;
    b's stays."""
    topo = host_topo
    manifests.write(tmp_path)
    host = tmp_path / "60-host.yaml"
    host.write_text(HOST + "---" + HOST_WEB + "---" + PRE_DNAT)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    daemon.wait_event("start")

    def hold(pod: int) -> subprocess.Popen[str]:
        p = topo.spawn(topo.pods[pod], [PY, "-c", HOLD, f"10.244.{pod + 1}.1", str(REDIRECTED), "0.3"], stdin=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "connected"
        return p

    def ping(p: subprocess.Popen[str]) -> bool:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("x\n")
        p.stdin.flush()
        return p.stdout.readline().strip() == "ok"

    a, b = hold(0), hold(1)
    assert ping(a) and ping(b)
    manifests.replace(host, HOST + "---" + HOST_WEB + "---" + PRE_DNAT.replace("10.244.1.0/24", "10.244.3.0/24"))
    assert daemon.wait_event("reload")["revoked"] == 1
    assert not ping(a) and ping(b)
    revoke = daemon.wait_event("revoke")
    assert (revoke["src"], revoke["dport"]) == ("10.244.1.2", REDIRECTED)  # the original tuple
    assert daemon.terminate() == 0


def test_untracked_flow_passes_both_ways_only_with_a_rule_each_way(host_topo: Topology, tmp_path: Path) -> None:
    topo = host_topo
    manifests.write(tmp_path)
    host = tmp_path / "60-host.yaml"
    host.write_text(HOST + "---" + untracked(both_ways=True))
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    start = daemon.wait_event("start")
    assert start["hook_queues"] == {"untracked": 1}
    raw = iptables_rules(topo.node, "raw")
    assert "PYCLASSIFY-PREROUTING" in raw and "PYCLASSIFY-OUTPUT" in raw and "--notrack" in raw
    assert reach(topo, 0, "UDP", ECHO)  # the datagram in, by the ingress rule; the answer out, by the egress rule
    assert not reach(topo, 1, "UDP", ECHO)  # no untracked rule for b: normal host policy denies it
    # Without the rule for the answer, it is no longer judged by the untracked hook: tracked
    # now, a new connection from the host, which normal host policy denies.
    manifests.replace(host, HOST + "---" + untracked(both_ways=False))
    daemon.wait_event("reload")
    assert not reach(topo, 0, "UDP", ECHO)
    answers = []
    while not answers:  # the answer, denied on its way out (b's datagram was denied before)
        deny = daemon.wait_event("deny")
        answers = [deny] if (deny["src"], deny["dst"]) == ("10.244.1.1", "10.244.1.2") else []
    assert answers[0]["egress"]["policy"] is None and answers[0]["sport"] == ECHO
    assert daemon.terminate() == 0
    assert "PYCLASSIFY-PREROUTING" in iptables_rules(topo.node, "raw")  # kept for the next daemon


def test_a_reload_that_brings_the_first_untracked_policy_adds_its_hook(host_topo: Topology, tmp_path: Path) -> None:
    """No doNotTrack policy at start: no raw chain. A change brings one: its queue, chains and
    the filter chains' rules for untracked packets are added in place, and it is enforced."""
    topo = host_topo
    manifests.write(tmp_path)
    host = tmp_path / "60-host.yaml"
    host.write_text(HOST)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    start = daemon.wait_event("start")
    assert "hook_queues" not in start and "PYCLASSIFY-" not in iptables_rules(topo.node, "raw")
    assert not reach(topo, 0, "UDP", ECHO)  # normal host policy: nothing allows it
    manifests.replace(host, HOST + "---" + untracked(both_ways=True))
    added = daemon.wait_event("hooks-added")
    assert added["hook_queues"] == {"untracked": 1}
    reload = daemon.wait_event("reload")
    assert "hooks_need_restart" not in reload
    assert "--notrack" in iptables_rules(topo.node, "raw")
    assert "UNTRACKED" in iptables_rules(topo.node)
    assert reach(topo, 0, "UDP", ECHO)
    assert daemon.terminate() == 0
