"""``pyclassify replay`` on captures taken in the test: real clients and servers (curl, a
keep-alive HTTP server and client, dnsmasq as the resolver) between network namespaces, with
nothing enforced, captured by tcpdump in the client's namespace, then replayed against policy.

What a capture with nothing enforced shows is the whole of every connection; replay must judge
each connection as policy would have: one whose opening packet policy denies is denied in full,
both ways; one already open when the capture began is judged in the direction its client opened
it (the lower port is the server's); a request of a kept-alive connection is judged by what the
connection's domain rule said when it opened; and only answers to allowed DNS queries teach
addresses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.enforce.netns import PY, Topology, root_reason, sh

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

WEB_PORT = 8081
NAME = "svc.example.test"

INVENTORY = "\n---\n".join(
    [f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}}}" for n in "abcd"]
    + [
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}1, namespace: {n}, labels: {{app: {n}}}}}\n"
        f"spec: {{containers: [{{name: s, image: x}}]}}\nstatus: {{podIP: 10.244.{i}.2}}"
        for i, n in enumerate("abcd", 1)
    ]
)

# b takes TCP 8080 from namespace a and nothing else: a -> b:8081 is denied.
B_FROM_A = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a, namespace: b}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: a}
    ports:
    - {protocol: TCP, port: 8080}
"""

# a asks the resolver in c only, and reaches svc.example.test's web port by name only; b answers
# GET requests on its web port (Calico reads http rules at the destination).
BY_NAME = f"""
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
    destination: {{domains: [{NAME}], ports: [{WEB_PORT}]}}
  - action: Deny
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: b-http-get}}
spec:
  order: 20
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    destination: {{ports: [{WEB_PORT}]}}
    http: {{methods: [GET]}}
  - action: Deny
"""

# An HTTP/1.1 server that keeps connections open and answers each request with 200 "ok"; a
# request for /slow is answered after ``delay`` seconds.
WEB = r"""
import socket, sys, threading, time
ip, port, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def serve(c):
    buf = b""
    with c:
        while True:
            data = c.recv(65536)
            if not data:
                return
            buf += data
            while b"\r\n\r\n" in buf:
                head, buf = buf.split(b"\r\n\r\n", 1)
                if head.split(b" ", 2)[1] == b"/slow":
                    time.sleep(delay)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((ip, port)); s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# Two connections opened before the capture begins: to the first target, a request for /slow
# (its answer comes after the capture began: the server's segment is the first seen); to the
# second, a request answered at once. On "go" from stdin, the second sends another request (the
# client's segment is the first seen), the first reads its answer and sends another; both close.
# Prints the statuses read per connection.
HELD_BEFORE = r"""
import json, socket, sys
first, second, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def ask(c, path, send=True):
    if send:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    buf = b""
    while not buf.endswith(b"\r\n\r\nok"):
        data = c.recv(4096)
        if not data:
            return 0
        buf += data
    return int(buf.split(b" ", 2)[1])
slow = socket.create_connection((first, port), timeout=10)
slow.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
quick = socket.create_connection((second, port), timeout=10)
statuses = {"first": [], "second": [ask(quick, "/one")]}
print("ready", flush=True)
sys.stdin.readline()
statuses["second"].append(ask(quick, "/two"))
statuses["first"] += [ask(slow, "/slow", send=False), ask(slow, "/two")]
slow.close(); quick.close()
print(json.dumps(statuses), flush=True)
"""

# Resolves ``name`` through the namespace's resolv.conf (glibc: a real DNS query), then on one
# kept-alive connection to the answer: a request, ``wait`` seconds, another request.
KEEP_ALIVE = r"""
import http.client, json, socket, sys, time
name, port, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ip = socket.gethostbyname(name)
c = http.client.HTTPConnection(ip, port, timeout=5)
statuses = []
for i, path in enumerate(["/first", "/second"]):
    if i:
        time.sleep(wait)
    c.request("GET", path)
    r = c.getresponse(); r.read(); statuses.append(r.status)
c.close()
print(json.dumps({"ip": ip, "statuses": statuses}))
"""


class Capture:
    """tcpdump writing the IP packets of one interface in namespace ``ns`` to ``path``."""

    def __init__(self, ns: str, path: Path, interface: str = "eth0") -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "tcpdump",
                "-i",
                interface,
                "-n",
                "-U",
                "--immediate-mode",
                "-Z",
                "root",
                "-w",
                str(path),
                "ip",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # "listening on eth0, ..." once the capture runs
        assert "listening on" in line, line + self.proc.stderr.read()

    def stop(self) -> Path:
        time.sleep(0.3)  # the last packets' way through the kernel
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=10)
        return self.path


@pytest.fixture
def topo() -> Iterator[Topology]:
    t = Topology(npods=4)
    try:
        t.up()
        yield t
    finally:
        t.down()


@pytest.fixture
def resolv_conf(topo: Topology) -> Iterator[Any]:
    """``write(pod, nameserver)``: the resolv.conf ``ip netns exec`` gives that pod's processes."""
    made: list[Path] = []

    def write(pod: int, nameserver: str) -> None:
        d = Path("/etc/netns") / topo.pods[pod]
        d.mkdir(parents=True, exist_ok=True)
        made.append(d)
        (d / "resolv.conf").write_text(f"nameserver {nameserver}\noptions timeout:2 attempts:1\n")

    yield write
    for d in made:
        (d / "resolv.conf").unlink(missing_ok=True)
        d.rmdir()


def web(topo: Topology, pod: int, delay: float = 0.0) -> None:
    p = topo.spawn(topo.pods[pod], [PY, "-c", WEB, topo.ips[pod], str(WEB_PORT), str(delay)])
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"


def dnsmasq(topo: Topology, pod: int, answer: str, tmp: Path) -> None:
    """dnsmasq in ``pod``, answering NAME with ``answer`` for one second (its TTL)."""
    ip = topo.ips[pod]
    topo.spawn(
        topo.pods[pod],
        [
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            f"--listen-address={ip}",
            "--user=root",
            f"--pid-file={tmp / f'dnsmasq-{pod}.pid'}",
            f"--address=/{NAME}/{answer}",
            "--local-ttl=1",
        ],
    )
    deadline = time.monotonic() + 10
    while not sh("ip", "netns", "exec", topo.pods[pod], "ss", "-Hlun", "sport = :53").stdout.strip():
        assert time.monotonic() < deadline, "dnsmasq did not start"
        time.sleep(0.05)


def replay(tmp: Path, manifests: list[str], pcap: Path, *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    directory = tmp / "manifests"
    directory.mkdir(exist_ok=True)
    (directory / "00-inventory.yaml").write_text(INVENTORY)
    for i, text in enumerate(manifests, 1):
        (directory / f"{i:02d}-policy.yaml").write_text(text)
    out = tmp / f"out{len(list(tmp.glob('out*.jsonl')))}.jsonl"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify",
            "replay",
            str(directory),
            "--pcap",
            str(pcap),
            "--json",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), [json.loads(line) for line in out.read_text().splitlines()]


def connection(lines: list[dict[str, Any]], ip: str, port: int, proto: str = "TCP") -> list[dict[str, Any]]:
    """The lines of the packets between ``ip``:``port`` and anything, in capture order."""
    return [
        line
        for line in lines
        if line["proto"] == proto
        and ((line["dst"], line["dport"]) == (ip, port) or (line["src"], line["sport"]) == (ip, port))
    ]


def isolated_by_b(line: dict[str, Any]) -> bool:
    """Whether b's ingress denied the line's flow at the end of the default tier (b's
    NetworkPolicy opens no rule to it)."""
    ingress = line["ingress"] or {}
    return (ingress.get("verdict"), ingress.get("tier"), ingress.get("reason")) == ("deny", "default", "end-of-tier")


def test_every_packet_of_a_connection_its_opening_denied_is_denied(topo: Topology, tmp_path: Path) -> None:
    web(topo, 1)
    cap = Capture(topo.pods[0], tmp_path / "denied.pcap")
    url = f"http://{topo.ips[1]}:{WEB_PORT}"
    for path in ("/one", "/two"):  # two connections to a port b's policy does not open
        got = sh(
            "ip",
            "netns",
            "exec",
            topo.pods[0],
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
            url + path,
        ).stdout
        assert got == "200"  # nothing enforced: the capture holds the whole exchange
    assert topo.reach(0, 1, "TCP")  # and a connection to the port it opens
    summary, lines = replay(tmp_path, [B_FROM_A], cap.stop())

    denied = connection(lines, topo.ips[1], WEB_PORT)
    syns = [line for line in denied if line["reason"] == "policy"]
    assert len(syns) == 2 and len(denied) >= 16, denied
    assert all(line["verdict"] == "deny" for line in denied), [
        (line["src"], line["sport"], line["verdict"], line["reason"]) for line in denied if line["verdict"] != "deny"
    ]
    for syn in syns:  # each connection's opening packet, by b's NetworkPolicy (no rule opens 8081)
        assert syn["dst"] == topo.ips[1] and isolated_by_b(syn), syn
    # the rest, either way, as packets of a denied connection
    assert {line["reason"] for line in denied if line not in syns} == {"denied-connection"}
    assert any(line["src"] == topo.ips[1] for line in denied)  # the server's side too
    allowed = connection(lines, topo.ips[1], Topology.TCP_PORT)
    assert allowed and all(line["verdict"] == "allow" for line in allowed)
    assert summary["denied_connection"] == len(denied) - 2
    assert summary["allowed"] == len(allowed)


def test_a_connection_open_before_the_capture_is_judged_as_its_client_opened_it(topo: Topology, tmp_path: Path) -> None:
    web(topo, 1, delay=3.0)
    web(topo, 2)
    client = topo.spawn(topo.pods[0], [PY, "-c", HELD_BEFORE, topo.ips[1], topo.ips[2], str(WEB_PORT)], stdin=True)
    assert client.stdout is not None and client.stdin is not None
    assert client.stdout.readline().strip() == "ready"
    cap = Capture(topo.pods[0], tmp_path / "midstream.pcap")
    client.stdin.write("go\n")
    client.stdin.flush()
    assert json.loads(client.stdout.readline()) == {"first": [200, 200], "second": [200, 200]}
    summary, lines = replay(tmp_path, [B_FROM_A], cap.stop())

    # a -> b:8081, b's answer the first packet seen: judged as a's connection to b:8081, which
    # b's policy denies; then every packet of it, both ways
    to_b = connection(lines, topo.ips[1], WEB_PORT)
    first, rest = to_b[0], to_b[1:]
    assert first["src"] == topo.ips[1] and first["sport"] == WEB_PORT, first
    assert (first["verdict"], first["reason"], first["pickup"], first["opened_by"]) == (
        "deny",
        "policy",
        "mid-stream",
        "dst",
    ), first
    assert isolated_by_b(first), first
    assert rest and {(line["verdict"], line["reason"]) for line in rest} == {("deny", "denied-connection")}
    assert all("pickup" not in line for line in rest)
    # a -> c:8081, a's request the first packet seen: judged as a's connection, allowed
    to_c = connection(lines, topo.ips[2], WEB_PORT)
    first = to_c[0]
    assert first["src"] == topo.ips[0] and (first["pickup"], first["opened_by"]) == ("mid-stream", "src"), first
    assert all(line["verdict"] == "allow" for line in to_c)
    assert summary["pickups"] == 2 and summary["conntrack"]["pickups"] == 2


def test_a_kept_alive_request_after_the_ttl_is_judged_by_the_domain_rule_as_it_opened(
    topo: Topology, tmp_path: Path, resolv_conf: Any
) -> None:
    dnsmasq(topo, 2, topo.ips[1], tmp_path)
    resolv_conf(0, topo.ips[2])
    web(topo, 1)
    cap = Capture(topo.pods[0], tmp_path / "keepalive.pcap")
    got = json.loads(sh("ip", "netns", "exec", topo.pods[0], PY, "-c", KEEP_ALIVE, NAME, str(WEB_PORT), "2.5").stdout)
    assert got == {"ip": topo.ips[1], "statuses": [200, 200]}
    summary, lines = replay(tmp_path, [BY_NAME], cap.stop())

    assert summary["dns"]["learned"] == 1, summary["dns"]
    conn = connection(lines, topo.ips[1], WEB_PORT)
    syn = conn[0]
    assert syn["egress"]["policy"] == "GlobalNetworkPolicy/a-egress-by-name" and syn["egress"]["rule"] == 1
    requests = [line for line in conn if line.get("http") == "request"]
    assert len(requests) == 2
    # the second request came 2.5 s after the connection opened, past the answer's 1 s TTL:
    # the domain rule is read as the connection opened, the http rule on the request
    assert requests[1]["ts"] - syn["ts"] > 2, (syn["ts"], requests[1]["ts"])
    assert all(r["verdict"] == "allow" and r["egress"]["rule"] == 1 for r in requests), requests
    assert all(line["verdict"] == "allow" for line in conn), [
        (line["index"], line["verdict"], line["reason"], line.get("http")) for line in conn
    ]
    assert summary["http"]["requests_allowed"] == 2 and summary["http"]["requests_denied"] == 0


@pytest.mark.parametrize("conntrack", [True, False], ids=["conntrack", "no-conntrack"])
def test_an_answer_from_a_resolver_policy_denies_teaches_nothing(
    topo: Topology, tmp_path: Path, resolv_conf: Any, conntrack: bool
) -> None:
    # d's resolver, which a may not ask, names c's address
    dnsmasq(topo, 3, topo.ips[2], tmp_path)
    resolv_conf(0, topo.ips[3])
    web(topo, 2)
    cap = Capture(topo.pods[0], tmp_path / "resolver.pcap")
    got = json.loads(sh("ip", "netns", "exec", topo.pods[0], PY, "-c", KEEP_ALIVE, NAME, str(WEB_PORT), "0").stdout)
    assert got == {"ip": topo.ips[2], "statuses": [200, 200]}
    summary, lines = replay(tmp_path, [BY_NAME], cap.stop(), *([] if conntrack else ["--no-conntrack"]))

    dns = connection(lines, topo.ips[3], 53, "UDP")
    query, answer = dns[0], dns[-1]
    assert (query["dst"], query["verdict"], query["egress"]["rule"]) == (topo.ips[3], "deny", 2)
    assert answer["src"] == topo.ips[3]
    if conntrack:  # without tracking, the answer is judged alone (a takes anything in)
        assert (answer["verdict"], answer["reason"]) == ("deny", "denied-connection"), answer
    assert summary["dns"]["learned"] == 0 and summary["dns"]["facts"] == 0, summary["dns"]
    assert summary["dns"]["denied"] >= 1
    # so c's address is nobody's name: the connection to it is denied by a's last rule
    conn = connection(lines, topo.ips[2], WEB_PORT)
    opening = conn[0]
    assert (opening["verdict"], opening["egress"]["rule"]) == ("deny", 2), opening
    if conntrack:
        assert all(line["verdict"] == "deny" for line in conn)
