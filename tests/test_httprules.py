"""http rules offline: replay of pcaps/http.pcap (each request judged at the packet that completes
its head, pipelined ones too, a stream that is not HTTP denied), explain --request, requests
split over many tiny segments or not fitting the bounded buffer, and the reference evaluator
and the native engine agreeing on random requests (the live path: tests/enforce/test_http_netns.py)."""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pyclassify.flow import Flow, FlowEnd, HttpRequest
from pyclassify.project import load_project
from tests.evaluators import EVALUATORS

REPO = Path(__file__).resolve().parents[1]
DEMO, HTTP = str(REPO / "examples" / "demo"), str(REPO / "examples" / "http")
PCAP = str(REPO / "pcaps" / "http.pcap")
POLICY = "NetworkPolicy/backend/api-http"
WEB, API = "10.0.1.10", "10.0.2.20"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


def replay(pcap: str, out: Path) -> tuple[dict, list[dict]]:
    r = cli("replay", DEMO, HTTP, "--pcap", pcap, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[dict, list[dict]]:
    return replay(PCAP, tmp_path_factory.mktemp("http") / "out.jsonl")


def test_each_request_is_judged_where_its_head_completes(replayed) -> None:
    summary, lines = replayed
    # pcaps/README.md lists the connections: (packet, verdict, rule of api-http) per request
    judged = {
        3: ("allow", 0),
        11: ("allow", 0),
        19: ("allow", 1),
        27: ("deny", 2),
        31: ("deny", 2),
        35: ("allow", 0),
        36: ("deny", 2),
        72: ("allow", 0),
        81: ("allow", 1),
        86: ("allow", 0),
    }
    for k, (verdict, rule) in judged.items():
        line = lines[k]
        assert (line["http"], line["verdict"], line["ingress"]["policy"], line["ingress"]["rule"]) == (
            "request",
            verdict,
            POLICY,
            rule,
        ), line
    # every connection was admitted provisionally at its SYN: denied only for want of its request
    syns = [0, 8, 16, 24, 28, 32, 37, 78, 91]
    for k in syns:
        line = lines[k]
        assert (line["http"], line["verdict"], line["ingress"]["awaits_request"]) == ("provisional", "allow", True)
    # the 3-byte segments of connection g before its head completes pass provisionally
    assert all(lines[k]["http"] == "provisional" and lines[k]["verdict"] == "allow" for k in range(40, 72, 2))
    # a stream that is not HTTP is denied at its first segment
    assert (lines[94]["verdict"], lines[94]["http"]) == ("deny", "not_http")
    assert [k for k, line in enumerate(lines) if line["verdict"] == "deny"] == [27, 31, 36, 94]
    assert summary["http"] == {
        "provisional": 9,
        "requests_allowed": 7,
        "requests_denied": 3,
        "held": 0,
        "table_full": 0,
        "errors": {"not_http": 1},
        "read": True,
    }


def test_flow_records_say_what_the_requests_decided(tmp_path: Path) -> None:
    out = tmp_path / "flows.jsonl"
    r = cli("replay", DEMO, HTTP, "--pcap", PCAP, "--out", str(out), "--flows")
    assert r.returncode == 0, r.stderr
    flows = {f["sport"]: f for f in map(json.loads, out.read_text().splitlines())}
    verdicts = {port: (f["verdict"], f.get("http")) for port, f in flows.items()}
    assert verdicts == {
        45001: ("allow", "request"),
        45002: ("allow", "request"),
        45003: ("allow", "request"),
        45004: ("deny", "request"),
        45005: ("deny", "request"),
        45006: ("deny", "request"),
        45007: ("allow", "request"),
        45008: ("allow", "request"),
        45009: ("deny", "not_http"),
    }
    assert "admitted provisionally" in cli("replay", DEMO, HTTP, "--pcap", PCAP).stdout


def test_without_http_rules_nothing_is_read() -> None:
    r = cli("replay", DEMO, "--pcap", PCAP, "--json")
    doc = json.loads(r.stdout)
    assert doc["http"] is None and doc["denied"] == 0
    # without connection tracking no request is read: fail closed, and said so
    doc = json.loads(cli("replay", DEMO, HTTP, "--pcap", PCAP, "--json", "--no-conntrack").stdout)
    assert doc["http"]["read"] is False and doc["http"]["requests_allowed"] == 0
    assert {row["verdict"] for row in doc["by_rule"] if row["policy"] == POLICY} == {"deny"}
    assert "no request is read" in cli("replay", DEMO, HTTP, "--pcap", PCAP, "--no-conntrack").stdout


def _capture(tmp_path: Path, segments: list[bytes], sport: int = 46000) -> str:
    """web -> api:8080: a handshake, then the client's ``segments`` in order (each acked by the
    server), written as a pcap."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    cseq, sseq, t = 1000, 9000, 1767225600.0
    pkts = []

    def add(p):
        nonlocal t
        t += 0.0001
        p.time = t
        pkts.append(p)

    up = lambda flags, seq, ack, data=b"": (  # noqa: E731
        Ether() / IP(src=WEB, dst=API) / TCP(sport=sport, dport=8080, flags=flags, seq=seq, ack=ack) / data
    )
    down = lambda flags, seq, ack: (  # noqa: E731
        Ether() / IP(src=API, dst=WEB) / TCP(sport=8080, dport=sport, flags=flags, seq=seq, ack=ack)
    )
    add(up("S", cseq, 0))
    add(down("SA", sseq, cseq + 1))
    cseq += 1
    add(up("A", cseq, sseq + 1))
    for data in segments:
        add(up("PA", cseq, sseq + 1, data))
        cseq += len(data)
        add(down("A", sseq + 1, cseq))
    path = tmp_path / f"c{sport}.pcap"
    wrpcap(str(path), pkts)
    return str(path)


def test_a_request_over_many_tiny_segments_is_judged_within_bounds(tmp_path: Path) -> None:
    head = b"GET /public/split HTTP/1.1\r\nHost: api.backend\r\n\r\n"
    ok = _capture(tmp_path, [head[i : i + 1] for i in range(len(head))])  # a byte a segment
    _, lines = replay(ok, tmp_path / "ok.jsonl")
    assert (lines[-2]["http"], lines[-2]["verdict"], lines[-2]["ingress"]["rule"]) == ("request", "allow", 0)
    assert {line.get("http") for line in lines[3:-2:2]} == {"provisional"}  # each byte before it
    # more segments than the bound before the head completes: denied, counted, never held on to
    many = _capture(tmp_path, [b"GET /public/x HTTP/1.1\r\n"] + [b"X: y\r\n"] * 70 + [b"\r\n"], sport=46001)
    summary, lines = replay(many, tmp_path / "many.jsonl")
    assert summary["http"]["errors"] == {"too_many_segments": 1}
    denied = [k for k, line in enumerate(lines) if line["verdict"] == "deny"]
    assert lines[denied[0]]["http"] == "too_many_segments"
    assert all(lines[k]["reason"] == "invalid" for k in denied[1:])  # the connection is cut both ways
    # a head larger than the buffer: denied
    big = _capture(tmp_path, [b"GET /public/x HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n"], sport=46002)
    summary, _ = replay(big, tmp_path / "big.jsonl")
    assert summary["http"]["errors"] == {"too_long": 1}


def test_retransmissions_and_gaps(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap, wrpcap

    head = b"DELETE /api/orders HTTP/1.1\r\n\r\n"
    path = _capture(tmp_path, [head[:10], head[10:]], sport=46003)
    pkts = list(rdpcap(path))
    # the first data segment retransmitted after the second: read once, the request denied once
    pkts.insert(7, pkts[3].copy())
    # a segment ahead of the client's first byte (a gap) before them: held back (dropped), not read
    gap = (
        Ether() / IP(src=WEB, dst=API) / TCP(sport=46003, dport=8080, flags="PA", seq=50000, ack=9001) / b"GET /public/"
    )
    gap.time = pkts[3].time - 0.00005
    pkts.insert(3, gap)
    wrpcap(path, pkts)
    summary, lines = replay(path, tmp_path / "r.jsonl")
    assert (lines[3]["verdict"], lines[3]["http"]) == ("deny", "held")
    assert summary["http"]["held"] == 1
    assert summary["http"]["requests_denied"] == 1 and summary["http"]["requests_allowed"] == 0
    denied = [line for line in lines if line["verdict"] == "deny" and line.get("http") == "request"]
    assert len(denied) == 1 and denied[0]["ingress"]["rule"] == 2


def test_explain_request(tmp_path: Path) -> None:
    args = ["explain", DEMO, HTTP, "--from", "frontend/web", "--to", "backend/api", "--port", "8080"]
    r = cli(*args, "--json")
    doc = json.loads(r.stdout)
    assert (doc["verdict"], doc["awaits_request"], doc["ingress"]["awaits_request"]) == ("deny", True, True)
    assert "admitted provisionally" in cli(*args).stdout
    for request, verdict, rule in (
        ("GET /public/a?x=1", "allow", 0),
        ("POST /api/orders", "allow", 1),
        ("POST /public/a", "deny", 2),
        ("GET /healthz/x", "deny", 2),
    ):
        doc = json.loads(cli(*args, "--request", request, "--json").stdout)
        assert (doc["verdict"], doc["ingress"]["rule"], "awaits_request" in doc) == (verdict, rule, False), request
        assert doc["flow"]["request"]["method"] == request.split()[0]
    for bad in ("GET", "GET nopath", "GET /a b c"):
        r = cli(*args, "--request", bad)
        assert r.returncode == 2 and "--request" in r.stderr, bad
    r = cli(
        "explain",
        DEMO,
        HTTP,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--proto",
        "UDP",
        "--port",
        "8080",
        "--request",
        "GET /",
    )
    assert r.returncode == 2 and "--request needs --proto TCP" in r.stderr


def test_http_rules_are_enforceable() -> None:
    r = cli("check", DEMO, HTTP, str(REPO / "examples" / "domains"), str(REPO / "examples" / "staged"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unenforceable"] == []


@pytest.mark.parametrize("seed", range(4))
def test_evaluators_agree_on_requests(seed: int, tmp_path: Path) -> None:
    """Random requests against random http rules: the reference and the engine give the same
    verdicts, decisions and awaits_request."""
    rng = random.Random(seed)
    methods, paths = ["GET", "POST", "PUT", "get"], ["/", "/a", "/a/b", "/ab", "/b", "/a?x"]
    rules = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["allow-http", "allow-http", "deny", "pass", "allow"])
        port = rng.choice(["", "destination: {ports: [8080]}"])
        if kind == "allow-http":
            ms = rng.sample(methods[:3], rng.randint(0, 2))
            ps = [{rng.choice(["exact", "prefix"]): rng.choice(paths[:5])} for _ in range(rng.randint(0, 2))]
            rules.append(
                f"- {{action: Allow, protocol: TCP, {port and port + ','} http: "
                f"{{methods: {json.dumps(ms)}, paths: {json.dumps(ps)}}}}}"
            )
        else:
            rules.append(f"- {{action: {kind.capitalize()}, protocol: TCP{port and ', ' + port}}}")
    manifest = f"""
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {{name: r, namespace: backend}}
spec:
  order: 1
  selector: app == 'api'
  types: [Ingress]
  ingress:
{chr(10).join("  " + r for r in rules)}
"""
    policy = tmp_path / "p.yaml"
    policy.write_text(manifest)
    project = load_project([DEMO, str(policy)])
    assert not project.problems.errors, [str(e) for e in project.problems.errors]
    inv, ps = project.inventory, project.policy_set
    web, api = (inv.owner_of(ipaddress.ip_address(a)) for a in (WEB, API))
    base = Flow(FlowEnd(web), FlowEnd(api), 6, 40000, 8080)
    for request in [None] + [HttpRequest.parse(f"{m} {p}") for m in methods for p in paths]:
        for flow in (replace(base, request=request), replace(base, request=request, dport=9090)):
            ref, nat = (EVALUATORS[e](ps, inv, flow) for e in ("reference", "native"))
            assert ref.to_json() == nat.to_json(), (rules, request, flow.dport)


def test_a_connection_picked_up_mid_stream_is_not_admitted(tmp_path: Path) -> None:
    """Only a SYN is admitted up to its request: a connection whose first packet seen carries
    bytes (the capture started mid-stream) could hide a request before them: denied."""
    from scapy.utils import rdpcap, wrpcap

    path = _capture(tmp_path, [b"GET /public/ok HTTP/1.1\r\n\r\n"], sport=46004)
    wrpcap(path, list(rdpcap(path))[3:])  # no handshake: the request first
    summary, lines = replay(path, tmp_path / "m.jsonl")
    assert lines[0]["verdict"] == "deny" and lines[0]["ingress"]["awaits_request"] is True
    assert summary["http"]["provisional"] == 0 and summary["http"]["requests_allowed"] == 0
