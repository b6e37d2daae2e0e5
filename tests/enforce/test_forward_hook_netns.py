"""A host endpoint's applyOnForward policy on the traffic the node routes, on real packets: the
node namespace routes between three namespaces; the interfaces toward the second and third are
Calico HostEndpoints (``gw-2`` on veth2, ``gw-3`` on veth3), the first holds pod a1 and no host
endpoint. Routed traffic entering by a host endpoint's interface is judged by its ingress
forward policy, traffic leaving by one by its egress forward policy, each with the host
endpoint as the subject and the packet's own addresses; host policy without applyOnForward does
not touch routed traffic; and the workload's own policy still judges what the hook lets on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import PY, REPO, Daemon, Held, Topology, iptables_rules, root_reason, sh

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0

# Pod a1 at 10.244.1.2 (behind veth1); 10.244.2.2 and 10.244.3.2 are machines outside the
# cluster, reached by the node's host endpoint interfaces.
POD_A = """
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
apiVersion: v1
kind: Pod
metadata: {name: a1, namespace: a, labels: {app: a}}
spec: {containers: [{name: s, image: x}]}
status: {podIP: 10.244.1.2}
"""

INVENTORY = (
    POD_A
    + """---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: gw-2, labels: {edge: in}}
spec: {node: node1, interfaceName: veth2}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: gw-3, labels: {edge: out}}
spec: {node: node1, interfaceName: veth3}
"""
)

# Host policy without applyOnForward: it denies what reaches the node by veth3, never what the
# node routes.
HOST_ONLY = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: gw3-host-only}
spec:
  selector: edge == 'out'
  types: [Ingress]
  ingress:
  - action: Deny
"""

# Routed in by gw-2: TCP 8080 only (the tier's end denies the rest). Routed out by gw-3: not TCP
# 8080 from the pod network, everything else.
FORWARD = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: fwd-in}
spec:
  selector: edge == 'in'
  applyOnForward: true
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, destination: {ports: [8080]}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: fwd-out}
spec:
  selector: edge == 'out'
  applyOnForward: true
  types: [Egress]
  egress:
  - {action: Deny, protocol: TCP, source: {nets: [10.244.1.0/24]}, destination: {ports: [8080]}}
  - {action: Allow}
"""

A, TWO, THREE = 0, 1, 2  # topology indices: pod a1, and the two outside machines


def explain(path: Path, src: str, dst: str, proto: str, port: int, *via: str) -> str:
    out = subprocess.run(
        [
            PY,
            "-m",
            "pyclassify",
            "explain",
            str(path),
            "--from",
            src,
            "--to",
            dst,
            "--proto",
            proto,
            "--port",
            str(port),
            *via,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["verdict"]


def expect_forward_policy(topo: Topology) -> None:
    assert topo.probe(TWO, {"tcp": (THREE, "TCP"), "udp": (THREE, "UDP")}) == {"tcp": True, "udp": False}
    # in by veth3 (gw-3 has no ingress forward policy: its host-only policy does not apply),
    # out by veth2 (gw-2's forward policy is ingress only): both pass
    assert topo.probe(THREE, {"tcp": (TWO, "TCP"), "udp": (TWO, "UDP")}) == {"tcp": True, "udp": True}
    # from the pod: out by gw-3, whose egress forward policy denies TCP 8080 from pods
    assert topo.probe(A, {"tcp": (THREE, "TCP"), "udp": (THREE, "UDP"), "two": (TWO, "TCP")}) == {
        "tcp": False,
        "udp": True,
        "two": True,
    }


def test_forward_policy_judges_routed_traffic_by_interface(topo: Topology, tmp_path: Path) -> None:
    (tmp_path / "00-inventory.yaml").write_text(INVENTORY)
    (tmp_path / "10-host.yaml").write_text(HOST_ONLY + "---" + FORWARD)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    start = daemon.wait_event("start")
    assert start["forward_queues"] == {"veth2": {"in": 1, "out": 2}, "veth3": {"in": 3, "out": 4}}
    rules = iptables_rules(topo.node)
    assert "-i veth2" in rules and "-o veth3" in rules
    expect_forward_policy(topo)
    by_hook: dict = {}
    while len(by_hook) < 2:  # the two denials, as the log says them (other lines may come between)
        e = daemon.wait_event("deny")
        if e.get("hook") == "forward":
            by_hook[(e["via"], e["proto"], e["src"])] = e
    udp_in = by_hook[("veth2", "UDP", "10.244.2.2")]
    assert (udp_in["ingress"]["tier"], udp_in["ingress"]["reason"]) == ("default", "end-of-tier")
    tcp_out = by_hook[("veth3", "TCP", "10.244.1.2")]
    assert (tcp_out["egress"]["policy"], tcp_out["egress"]["rule"]) == ("GlobalNetworkPolicy/fwd-out", 0)
    # explain says the same of each routed flow
    assert explain(tmp_path, "10.244.2.2", "10.244.3.2", "UDP", 5353, "--in-via", "gw-2", "--out-via", "gw-3") == "deny"
    assert (
        explain(tmp_path, "10.244.2.2", "10.244.3.2", "TCP", 8080, "--in-via", "gw-2", "--out-via", "gw-3") == "allow"
    )
    assert explain(tmp_path, "a/a1", "10.244.3.2", "TCP", 8080, "--out-via", "gw-3") == "deny"
    assert (
        explain(tmp_path, "10.244.3.2", "10.244.2.2", "UDP", 5353, "--in-via", "gw-3", "--out-via", "gw-2") == "allow"
    )
    assert daemon.terminate() == 0


def test_the_workload_policy_still_judges_what_the_forward_hook_lets_on(topo: Topology, tmp_path: Path) -> None:
    """Pod a1 takes no TCP from outside by its own policy: the forward hook of gw-2 lets TCP
    8080 on, and the pod's policy (the main queue, after the hook) denies it."""
    (tmp_path / "00-inventory.yaml").write_text(INVENTORY)
    (tmp_path / "10-host.yaml").write_text(FORWARD)
    (tmp_path / "20-pod.yaml").write_text("""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-pods-only, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from: [{ipBlock: {cidr: 10.244.1.0/24}}]
""")
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    daemon.wait_event("start")
    assert not topo.reach(TWO, A, "TCP")
    deny = daemon.wait_event("deny")
    # by the main queue (the workload's policy), not the hook's
    assert (deny["queue"], deny["dst_endpoint"], deny["ingress"]["verdict"]) == (
        0,
        "a/a1",
        "deny",
    ) and "hook" not in deny
    assert topo.reach(THREE, TWO, "TCP")
    assert daemon.terminate() == 0


def test_a_change_to_forward_policy_cuts_the_connections_it_now_denies(topo: Topology, tmp_path: Path) -> None:
    """A connection gw-2's forward hook let on is judged by that hook again when its policy
    changes, and cut once denied; one no hook decided (in by gw-3, out by gw-2) stays."""
    (tmp_path / "00-inventory.yaml").write_text(INVENTORY)
    host = tmp_path / "10-host.yaml"
    host.write_text(FORWARD)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    daemon.wait_event("start")
    cut, kept = Held(topo, "b", "c", "TCP"), Held(topo, "c", "b", "TCP")
    assert cut.ping() and kept.ping()
    manifests.replace(host, FORWARD.replace("ports: [8080]}}", "ports: [9999]}}", 1))
    assert daemon.wait_event("reload")["revoked"] == 1
    assert cut.cut_within(2.0) is not None
    assert kept.ping()
    revoke = daemon.wait_event("revoke")
    assert (revoke["src"], revoke["dst"], revoke["dport"]) == ("10.244.2.2", "10.244.3.2", Topology.TCP_PORT)
    assert daemon.terminate() == 0


def test_a_reload_that_brings_forward_policy_adds_the_interfaces(topo: Topology, tmp_path: Path) -> None:
    """No applyOnForward policy at start: no forward queues, routed traffic passes. A change
    brings it: the interfaces' loops and rules are added in place, and it is enforced."""
    (tmp_path / "00-inventory.yaml").write_text(INVENTORY)
    host = tmp_path / "10-host.yaml"
    host.write_text(HOST_ONLY)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    start = daemon.wait_event("start")
    assert "forward_queues" not in start and "veth2" not in iptables_rules(topo.node)
    assert topo.probe(TWO, {"tcp": (THREE, "TCP"), "udp": (THREE, "UDP")}) == {"tcp": True, "udp": True}
    manifests.replace(host, HOST_ONLY + "---" + FORWARD)
    added = daemon.wait_event("hooks-added")
    assert added["forward_queues"] == {"veth2": {"in": 1, "out": 2}, "veth3": {"in": 3, "out": 4}}
    assert "hooks_need_restart" not in daemon.wait_event("reload")
    expect_forward_policy(topo)
    # the host endpoints go away: their interfaces' loops let everything on (no host policy)
    manifests.replace(tmp_path / "00-inventory.yaml", POD_A)
    daemon.wait_event("reload")
    assert topo.probe(TWO, {"udp": (THREE, "UDP")}) == {"udp": True}
    assert daemon.terminate() == 0


# An all-interfaces host endpoint (as Calico's automatic ones are): its forward hook judges what
# the node routes by any interface but a workload's.
ALL_INTERFACES = (
    POD_A
    + """---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-auto, labels: {auto: "true"}}
spec: {node: node1, interfaceName: "*"}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: auto-forward}
spec:
  selector: auto == 'true'
  applyOnForward: true
  types: [Egress]
  egress:
  - {action: Deny, protocol: TCP, destination: {nets: [10.244.3.0/24], ports: [8080]}}
  - {action: Allow}
"""
)


def test_an_all_interfaces_host_endpoint_judges_every_non_workload_interface(topo: Topology, tmp_path: Path) -> None:
    """The node's interface toward 10.244.3.0/24 is renamed ext3; the others (veth*) are
    workloads' by ``--workload-interface-prefix veth``. Out by ext3 the host endpoint's egress
    forward policy judges; out by veth2 nothing does."""
    for args in (("down",), ("name", "ext3"), ("up",)):
        sh("ip", "-n", topo.node, "link", "set", "ext3" if args == ("up",) else "veth3", *args)
    (tmp_path / "00-all.yaml").write_text(ALL_INTERFACES)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE, extra=("--workload-interface-prefix", "veth"))
    assert daemon.wait_event("start")["forward_queues"] == {"*": {"in": 1, "out": 2}}
    assert "! -o veth+" in iptables_rules(topo.node)
    assert topo.probe(A, {"tcp": (THREE, "TCP"), "udp": (THREE, "UDP"), "two": (TWO, "TCP")}) == {
        "tcp": False,
        "udp": True,
        "two": True,
    }
    assert topo.reach(THREE, A, "TCP")  # in by ext3: no ingress forward policy
    deny = daemon.wait_event("deny")
    assert (deny["hook"], deny["via"], deny["egress"]["policy"]) == ("forward", "*", "GlobalNetworkPolicy/auto-forward")
    assert daemon.terminate() == 0
