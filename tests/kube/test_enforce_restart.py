"""A killed ``enforce --kubeconfig`` never locks its node out: on a node that reaches its API
server through a routed interface (as a real node does, not over its loopback), kill -9 leaves
the rules queueing the node's traffic to a queue nobody reads, failing closed. The node's own
traffic passes ahead of the queue all the same: its connections to the API server (the
kubeconfig's address, on a port no failsafe entry names), SSH to it; and the next daemon, whose
first act is to list the cluster through those rules, starts.

The API server listens on the root namespace's loopback; an "API" namespace routed from the node
by a veth pair relays its address to it over a Unix socket (tests/kube/test_enforce_kube.py's
relay); the kubeconfig names that address, with the serving certificate's name for TLS."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.enforce.netns import PY, REPO, Daemon, Topology, iptables_rules, root_reason, sh
from tests.kube.test_enforce_kube import RELAY

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

NODE_SIDE, API_SIDE = "10.253.0.1", "10.253.0.2"

# From the node: the API server's version through the real client.
VERSION = r"""
import sys
from pyclassify.kube import load_client
print(load_client(sys.argv[1], "test").request("GET", "/version")["gitVersion"])
"""


@pytest.fixture
def topo() -> Iterator[Topology]:
    t = Topology()
    try:
        t.up()
        yield t
    finally:
        t.down()


@pytest.fixture
def api_namespace(topo: Topology) -> Iterator[str]:
    ns = f"pca-{uuid.uuid4().hex[:6]}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", topo.node, "link", "add", "vapi", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", topo.node, "addr", "add", f"{NODE_SIDE}/30", "dev", "vapi")
        sh("ip", "-n", topo.node, "link", "set", "vapi", "up")
        sh("ip", "-n", ns, "addr", "add", f"{API_SIDE}/30", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        sh("ip", "netns", "del", ns, check=False)


def test_a_killed_cluster_daemon_never_locks_the_node_out(
    kube_cluster, topo: Topology, api_namespace: str, tmp_path: Path
) -> None:
    sock = str(tmp_path / "apiserver.sock")
    outside = subprocess.Popen(
        [PY, "-c", RELAY, "unix-to-tcp", sock, str(kube_cluster.port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert outside.stdout is not None and outside.stdout.readline().strip() == "ready"
        inside = topo.spawn(api_namespace, [PY, "-c", RELAY, "tcp-to-unix", f"{API_SIDE}:{kube_cluster.port}", sock])
        assert inside.stdout is not None and inside.stdout.readline().strip() == "ready"
        config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{API_SIDE}:{kube_cluster.port}"
        config["clusters"][0]["cluster"]["tls-server-name"] = "localhost"  # the serving certificate's name
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        topo.serve_ssh("10.244.1.1")

        def api_version() -> bool:
            try:
                out = subprocess.run(
                    ["ip", "netns", "exec", topo.node, PY, "-c", VERSION, str(kubeconfig)],
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                    timeout=20,
                )
            except subprocess.TimeoutExpired:
                return False
            return out.returncode == 0 and out.stdout.startswith("v")

        def ssh_banner() -> bool:
            return topo.ssh_banner(0, "10.244.1.1")

        assert api_version() and ssh_banner()
        argv = ("--kubeconfig", str(kubeconfig), "--context", "test", "--node", "node-1")
        daemon = Daemon(topo, [], 0, extra=argv)
        daemon.wait_event("start", timeout=90)
        daemon.kill()
        rules = iptables_rules(topo.node)
        assert "-j PYCLASSIFY-OUTPUT" in rules and "-j PYCLASSIFY-INPUT" in rules, rules
        assert not topo.reach(0, 1)  # failing closed: the pods' new connections wait for a daemon
        assert api_version(), "the node cannot reach its API server while no daemon runs"
        assert ssh_banner(), "SSH to the node is dropped while no daemon runs"
        again = Daemon(topo, [], 0, extra=argv)
        again.wait_event("start", timeout=60)  # its list of the cluster went through the dead daemon's rules
        assert topo.reach(0, 1) and api_version() and ssh_banner()
        assert again.terminate() == 0
    finally:
        outside.kill()
        outside.wait()
