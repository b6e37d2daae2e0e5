"""Domain rules on a live node: a DNS server (one the test starts, in pod c's namespace) answers
a pod's query; the answer passes through pyclassify's DNS loop, which learns the address before
letting it through, so the pod's very next connection to the name is judged by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import PY, Daemon, Topology, iptables_rules, root_reason, sh

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0
NAME = "svc.example.test"

# A one-answer DNS server: every A query gets ``answer`` with a 30 s TTL.
DNS_SERVER = r"""
import socket, struct, sys
ip, answer = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((ip, 53))
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(512)
    end = 12
    while q[end]:
        end += q[end] + 1
    end += 5  # the root label, QTYPE, QCLASS
    answer_rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(answer)
    s.sendto(q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) + q[12:end] + answer_rr, peer)
"""

# Connects to ``target`` (before resolving), resolves ``name`` at ``dns``, connects to what
# the answer says at once: {"before", "resolved", "after"}.
CLIENT = r"""
import json, socket, struct, sys
dns, name, target, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def connect(ip):
    try:
        c = socket.create_connection((ip, port), timeout=1.0); c.settimeout(1.0)
        c.sendall(b"hi"); ok = c.recv(16) == b"hi"; c.close(); return ok
    except OSError:
        return False
out = {"before": connect(target)}
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2.0); u.sendto(q, (dns, 53))
out["resolved"] = socket.inet_ntoa(u.recv(512)[-4:])
out["after"] = connect(out["resolved"])
print(json.dumps(out))
"""

POLICY = f"""
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: a-egress-by-name}}
spec:
  order: 10
  selector: app == 'a'
  types: [Egress]
  egress:
  - action: Allow
    protocol: UDP
    destination: {{nets: [10.244.3.2/32], ports: [53]}}
  - action: Allow
    protocol: TCP
    destination: {{domains: [{NAME}], ports: [8080]}}
  - action: Deny
"""


def test_the_first_connection_after_an_answer_is_judged_by_it(topo: Topology, tmp_path: Path) -> None:
    manifests.write(tmp_path)
    (tmp_path / "60-by-name.yaml").write_text(POLICY)
    server = topo.spawn(topo.pods[2], [PY, "-c", DNS_SERVER, topo.ips[2], topo.ips[1]])
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    daemon = Daemon(topo, [str(tmp_path)], QUEUE, extra=("--metrics", "127.0.0.1:9464"))
    start = daemon.wait_event("start")
    assert start["dns_queue"] == 1
    assert "--sport 53" in iptables_rules(topo.node)
    out = sh(
        "ip", "netns", "exec", topo.pods[0], PY, "-c", CLIENT, topo.ips[2], NAME, topo.ips[1], str(Topology.TCP_PORT)
    ).stdout
    got = json.loads(out)
    # b's address is nobody's name before the answer; right after it, it is svc.example.test's
    assert got == {"before": False, "resolved": topo.ips[1], "after": True}, got
    denied = daemon.wait_event("deny")
    assert denied["egress"]["policy"] == "GlobalNetworkPolicy/a-egress-by-name" and denied["egress"]["rule"] == 2
    status, text = topo.get("http://127.0.0.1:9464/metrics")
    assert status == 200
    figures = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("pyclassify_dns_") and not line.startswith("#")
    }
    assert figures["pyclassify_dns_answers_total"] >= 1 and figures["pyclassify_dns_facts_learned_total"] == 1
    assert figures["pyclassify_dns_facts"] == 1
    assert daemon.terminate() == 0
