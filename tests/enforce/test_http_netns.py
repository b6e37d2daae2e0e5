"""http rules on a live node, without a proxy: a real HTTP server in pod c's namespace and a
client in pod a's. A connection to the server is admitted up to its first request; the HTTP
loop reads each request (pipelined ones too) and lets it through, or cuts the connection with a
TCP reset to both ends: the client sees its connection reset, the server sees it reset too and
never receives the denied request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import PY, Daemon, Topology, iptables_rules, root_reason, sh

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0
PORT = 8081

# An HTTP/1.1 server that answers every request head with 200 and keeps the connection open;
# prints one JSON line per event: {"request": "GET /x"}, {"reset": true} (recv failed with
# ECONNRESET), {"closed": true}.
SERVER = r"""
import json, socket, sys, threading
ip, port = sys.argv[1], int(sys.argv[2])
lock = threading.Lock()
def say(**event):
    with lock:
        print(json.dumps(event), flush=True)
def serve(c):
    buf = b""
    try:
        while True:
            data = c.recv(65536)
            if not data:
                say(closed=True); return
            buf += data
            while b"\r\n\r\n" in buf:
                head, buf = buf.split(b"\r\n\r\n", 1)
                line = head.split(b"\r\n", 1)[0].decode()
                method, path, _ = line.split(" ", 2)
                length = 0
                for h in head.split(b"\r\n")[1:]:
                    name, _, value = h.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += c.recv(65536)
                buf = buf[length:]
                say(request=f"{method} {path}")
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except ConnectionResetError:
        say(reset=True)
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((ip, port)); s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# Sends each list of requests on a connection of its own, one after the other (each after the
# answer to the one before: a connection kept alive), and reads the answers: per connection,
# the statuses read and how it ended ("ok", "reset", "closed", "timeout").
CLIENT = r"""
import json, socket, sys
ip, port, plans = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
out = []
for requests in plans:
    got = {"statuses": [], "end": "ok"}
    try:
        c = socket.create_connection((ip, port), timeout=2.0)
        for m, p, b in requests:
            c.sendall(f"{m} {p} HTTP/1.1\r\nHost: c\r\nContent-Length: {len(b)}\r\n\r\n{b}".encode())
            buf = b""
            while not buf.endswith(b"\r\n\r\nok"):
                data = c.recv(65536)
                if not data:
                    raise EOFError
                buf += data
            got["statuses"].append(int(buf.split(b" ", 2)[1]))
        c.close()
    except ConnectionResetError:
        got["end"] = "reset"
    except EOFError:
        got["end"] = "closed"
    except socket.timeout:
        got["end"] = "timeout"
    out.append(got)
print(json.dumps(out))
"""

POLICY = f"""
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {{name: c-http, namespace: c}}
spec:
  order: 10
  selector: app == 'c'
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    source: {{selector: app == 'a', namespaceSelector: all()}}
    destination: {{ports: [{PORT}]}}
    http:
      methods: [GET]
      paths: [{{prefix: /public}}, {{exact: /healthz}}]
  - action: Allow
    protocol: TCP
    source: {{selector: app == 'a', namespaceSelector: all()}}
    destination: {{ports: [{PORT}]}}
    http: {{methods: [POST], paths: [{{exact: /orders}}]}}
  - action: Deny
    protocol: TCP
    destination: {{ports: [{PORT}]}}
"""


# Per connection: its requests, and how it ends (``ok``: each answered 200; ``reset``: cut).
PLANS = [
    [["GET", "/public/index.html", ""]],  # allowed by rule 0 (a path prefix)
    [["POST", "/public/index.html", "x=1"]],  # denied: GET only on /public
    [["GET", "/healthz", ""]],  # allowed by rule 0 (exact)
    [["GET", "/healthz/more", ""]],  # denied: exact, not prefix
    [["POST", "/orders", "{}"]],  # allowed by rule 1
    [["GET", "/public/a", ""], ["GET", "/admin", ""]],  # a later request on the connection: cut
]
ENDS = ["ok", "reset", "ok", "reset", "ok", "reset"]
STATUSES = [[200], [], [200], [], [200], [200]]


def assert_server_saw_the_allowed_requests_only(server: subprocess.Popen[str]) -> None:
    """The server never received a denied request, and saw each cut connection reset."""
    server.kill()
    assert server.stdout is not None
    events = [json.loads(line) for line in server.stdout.read().splitlines() if line.startswith("{")]
    requests = [e["request"] for e in events if "request" in e]
    assert sorted(requests) == sorted(["GET /public/index.html", "GET /healthz", "POST /orders", "GET /public/a"])
    assert sum("reset" in e for e in events) == 3, json.dumps(events)


def start_server(topo: Topology) -> subprocess.Popen[str]:
    server = topo.spawn(topo.pods[2], [PY, "-c", SERVER, topo.ips[2], str(PORT)])
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    return server


def client(topo: Topology, plans: list) -> list[dict]:
    out = sh("ip", "netns", "exec", topo.pods[0], PY, "-c", CLIENT, topo.ips[2], str(PORT), json.dumps(plans)).stdout
    return json.loads(out)


def test_requests_are_judged_and_denied_ones_reset_both_ends(topo: Topology, tmp_path: Path) -> None:
    (tmp_path / "00-inventory.yaml").write_text(manifests.INVENTORY)
    (tmp_path / "10-http.yaml").write_text(POLICY)
    server = start_server(topo)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE, extra=("--metrics", "127.0.0.1:9465"))
    start = daemon.wait_event("start")
    assert start["http_queue"] == 1
    assert "--ctdir ORIGINAL" in iptables_rules(topo.node)
    got = client(topo, PLANS)
    assert [g["end"] for g in got] == ENDS, got
    assert [g["statuses"] for g in got] == STATUSES, got
    # The server saw the allowed requests only, and the cut connections reset.
    status, text = topo.get("http://127.0.0.1:9465/metrics")
    assert status == 200
    figures = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("pyclassify_http_") and not line.startswith("#")
    }
    assert figures['pyclassify_http_requests_total{verdict="allow"}'] == 4, figures
    assert figures['pyclassify_http_requests_total{verdict="deny"}'] == 3, figures
    assert figures["pyclassify_http_provisional_total"] == 6, figures
    assert figures["pyclassify_http_resets_total"] == 6, figures  # two per cut connection
    assert figures['pyclassify_http_unjudgeable_total{reason="table_full"}'] == 0, figures
    denied = daemon.wait_event("deny")
    assert denied["ingress"]["policy"] == "NetworkPolicy/c/c-http" and denied["ingress"]["rule"] == 2
    assert denied["http"] == "request"
    # Nothing is left open on the server: the allowed connections closed, the cut ones reset.
    established = sh(
        "ip", "netns", "exec", topo.pods[2], "ss", "-Htn", "state", "established", f"( sport = :{PORT} )"
    ).stdout
    assert not established.strip(), established
    assert daemon.terminate() == 0
    assert_server_saw_the_allowed_requests_only(server)


def test_a_reload_that_brings_the_first_http_rule_adds_the_http_queue(topo: Topology, tmp_path: Path) -> None:
    """No http rule at start: no HTTP queue. A change brings one: its loop and rules are added in
    place, and the next connections are judged by their requests."""
    (tmp_path / "00-inventory.yaml").write_text(manifests.INVENTORY)
    policy = tmp_path / "10-http.yaml"
    policy.write_text(POLICY.split("    http:")[0].replace("c-http", "c-plain"))  # rule 0 without http
    start_server(topo)
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    assert "http_queue" not in daemon.wait_event("start")
    assert client(topo, [[["POST", "/anything", ""]]])[0]["end"] == "ok"
    manifests.replace(policy, POLICY)
    added = daemon.wait_event("hooks-added")
    assert added["http_queue"] == 1
    assert "hooks_need_restart" not in daemon.wait_event("reload")
    got = client(topo, [[["GET", "/healthz", ""]], [["POST", "/anything", ""]]])
    assert [g["end"] for g in got] == ["ok", "reset"], got
    assert daemon.terminate() == 0


def test_the_bridge_judges_requests_and_cuts_denied_connections(tmp_path: Path) -> None:
    """The same requests across the AF_PACKET bridge (``enforce --bridge``): its own tracker
    admits a connection up to its request, the frames carrying the request are read in line,
    and a denied one is dropped and its connection cut by an RST frame out of each side."""
    from tests.enforce.soak import BridgedPods, inventory

    topo = BridgedPods()
    try:
        topo.up()
        (tmp_path / "00-inventory.yaml").write_text(inventory(topo.ips))
        (tmp_path / "10-http.yaml").write_text(
            POLICY.replace("c-http, namespace: c", "b-http, namespace: b").replace("app == 'c'", "app == 'b'")
        )
        server = topo.spawn(topo.pods[1], [PY, "-c", SERVER, topo.ips[1], str(PORT)])
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        daemon = Daemon(
            topo, [str(tmp_path)], None, extra=("--bridge", BridgedPods.BRIDGE, "--metrics", "127.0.0.1:9466")
        )
        daemon.wait_event("start")
        out = sh(
            "ip", "netns", "exec", topo.pods[0], PY, "-c", CLIENT, topo.ips[1], str(PORT), json.dumps(PLANS)
        ).stdout
        got = json.loads(out)
        assert [g["end"] for g in got] == ENDS, got
        assert [g["statuses"] for g in got] == STATUSES, got
        status, text = topo.get("http://127.0.0.1:9466/metrics")
        assert status == 200
        figures = {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line.startswith("pyclassify_bridge_http") and not line.startswith("#")
        }
        assert figures == {
            f'pyclassify_bridge_http_total{{event="{k}"}}': v
            for k, v in (("provisional", 6), ("allowed", 4), ("denied", 3), ("unjudgeable", 0), ("resets", 6))
        }, figures
        assert daemon.terminate() == 0
        assert_server_saw_the_allowed_requests_only(server)
    finally:
        topo.down()
