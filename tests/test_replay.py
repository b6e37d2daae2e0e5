"""``pyclassify replay``: bundled captures, the JSON contracts, split captures, and the end-to-end
agreement of replayed verdicts with ``pyclassify matrix`` for the same manifests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pyclassify.capture import read_all
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.replay import Replay

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
PCAP = str(REPO / "pcaps" / "demo.pcap")
PCAPNG = str(REPO / "pcaps" / "demo.pcapng")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def demo_summary() -> dict:
    r = cli("replay", DEMO, "--pcap", PCAP, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_summary_contract(demo_summary):
    s = demo_summary
    assert {"packets", "allowed", "denied", "malformed", "flows", "by_rule"} <= set(s)
    assert s["packets"] == 48 and s["allowed"] + s["denied"] == 48
    assert s["malformed"] == 0 and s["flows"] > 10
    for row in s["by_rule"]:
        assert {"tier", "policy", "rule", "verdict", "packets"} <= set(row)


def _rule(summary: dict, policy: str, rule) -> dict:
    return next(r for r in summary["by_rule"] if r["policy"] == policy and r["rule"] == rule)


def test_bundled_capture_verdicts_by_policy(demo_summary):
    s = demo_summary
    # web -> db:5432 SYN and its retransmission: the ANP denies them by name.
    assert _rule(s, "AdminNetworkPolicy/protect-db", "deny-from-frontend") == {
        "direction": "ingress",
        "tier": "kube-admin",
        "policy": "AdminNetworkPolicy/protect-db",
        "rule": "deny-from-frontend",
        "verdict": "deny",
        "reason": "rule",
        "packets": 2,
    }
    assert _rule(s, "NetworkPolicy/backend/allow-frontend-to-api", 0)["verdict"] == "allow"
    assert _rule(s, "AdminNetworkPolicy/allow-monitoring", "scrape-from-monitoring")["verdict"] == "allow"
    assert _rule(s, "GlobalNetworkPolicy/security.block-known-bad", 1)["verdict"] == "deny"
    assert _rule(s, "BaselineAdminNetworkPolicy/default", "deny-all-ingress")["verdict"] == "deny"
    # Replies and the rest of allowed conversations pass by connection tracking, not policy.
    assert s["established"] >= 20


def test_terminal_summary_names_policies():
    r = cli("replay", DEMO, "--pcap", PCAP)
    assert r.returncode == 0, r.stderr
    assert "48 packets" in r.stdout
    assert "ingress deny  by AdminNetworkPolicy/protect-db rule deny-from-frontend in tier kube-admin" in r.stdout


def test_out_jsonl_contract_and_split_captures(tmp_path):
    out, allowed, denied = tmp_path / "v.jsonl", tmp_path / "a.pcap", tmp_path / "d.pcap"
    r = cli("replay", DEMO, "--pcap", PCAP, "--out", str(out), "--allowed", str(allowed), "--denied", str(denied))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(48))
    keys = {"index", "ts", "src", "dst", "proto", "sport", "dport", "verdict", "reason", "egress", "ingress"}
    assert all(keys <= set(line) for line in lines)
    assert {line["reason"] for line in lines} <= {"policy", "established", "malformed", "invalid", "denied-connection"}
    # db's answers to api's denied UDP and SCTP openings (an ICMP port unreachable, an INIT-ACK)
    answers = [line for line in lines if line["reason"] == "denied-connection"]
    assert [(line["src"], line["proto"], line["verdict"]) for line in answers] == [
        ("10.0.2.30", "ICMP", "deny"),
        ("10.0.2.30", "SCTP", "deny"),
    ]
    first = lines[0]
    assert (first["src"], first["dst"], first["proto"], first["dport"]) == ("10.0.1.10", "10.96.0.10", "UDP", 53)
    icmp = [line for line in lines if line["proto"] == "ICMP"]
    assert icmp and all(line["sport"] is None and line["dport"] is None for line in icmp)
    n_allowed = sum(line["verdict"] == "allow" for line in lines)
    a_headers = read_all(str(allowed))[0]
    d_headers = read_all(str(denied))[0]
    assert len(a_headers) == n_allowed and len(d_headers) == 48 - n_allowed
    # Unchanged packets: the denied capture's packets are byte-identical to the originals.
    original = read_all(PCAP)[0]
    denied_ts = set(d_headers["ts_ns"].tolist())
    assert denied_ts == {int(h["ts_ns"]) for h, line in zip(original, lines) if line["verdict"] == "deny"}


def test_no_conntrack_judges_every_packet():
    r = cli("replay", DEMO, "--pcap", PCAP, "--no-conntrack", "--json")
    s = json.loads(r.stdout)
    assert s["established"] == 0 and s["conntrack"] is None
    # Without tracking, replies into default-deny namespaces are judged as new traffic.
    with_ct = json.loads(cli("replay", DEMO, "--pcap", PCAP, "--json").stdout)
    assert s["denied"] > with_ct["denied"]


def test_bad_capture_is_an_error_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    r = cli("replay", DEMO, "--pcap", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "error" in r.stderr


def test_malformed_packets_are_counted_and_denied(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    good = Ether() / IP(src="10.0.1.10", dst="10.0.2.20") / TCP(sport=40000, dport=8080, flags="S")
    cut = bytes(good)[:20]  # ends inside the IP header
    path = tmp_path / "m.pcap"
    wrpcap(str(path), [good, Ether(cut)])
    s = json.loads(cli("replay", DEMO, "--pcap", str(path), "--json").stdout)
    assert s["packets"] == 2 and s["malformed"] == 1 and s["allowed"] == 1


def test_replay_equals_matrix_end_to_end(tmp_path):
    """A SYN between every pair of pods, replayed without conntrack, gets matrix's verdicts."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    doc = json.loads(cli("matrix", DEMO, "--proto", "TCP", "--port", "8080", "--json").stdout)
    project = load_project([DEMO])
    ips = {ref: str(project.find_endpoint(ref).ips[0]) for ref in doc["pods"]}
    packets, expected = [], []
    for i, a in enumerate(doc["pods"]):
        for j, b in enumerate(doc["pods"]):
            packets.append(Ether() / IP(src=ips[a], dst=ips[b]) / TCP(sport=40000 + i, dport=8080, flags="S"))
            expected.append("allow" if doc["matrix"][i][j] else "deny")
    path = tmp_path / "pairs.pcap"
    wrpcap(str(path), packets)
    out = tmp_path / "v.jsonl"
    assert cli("replay", DEMO, "--pcap", str(path), "--no-conntrack", "--out", str(out)).returncode == 0
    got = [json.loads(line)["verdict"] for line in out.read_text().splitlines()]
    assert got == expected


def test_python_api_replay_and_interrupt_summary(monkeypatch):
    project = load_project([DEMO])
    replay = Replay(NativeEngine(project.policy_set, project.inventory))
    calls = []

    def stop_after_first_batch(n: int) -> None:
        calls.append(n)
        raise KeyboardInterrupt

    summary = replay.run([PCAP, PCAPNG], progress=stop_after_first_batch)
    assert summary.interrupted and summary.packets == calls[0] == 48
    assert replay.summary_json()["interrupted"] is True


def test_flows_output_one_line_per_connection(tmp_path):
    out = tmp_path / "flows.jsonl"
    r = cli("replay", DEMO, "--pcap", PCAP, "--out", str(out), "--flows", "--json")
    summary = json.loads(r.stdout)
    flows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(flows) == summary["flows"]
    assert sum(f["packets"] for f in flows) == 48
    api = next(f for f in flows if f["dst"] == "10.0.2.20" and f["dport"] == 8080 and f["src"] == "10.0.1.10")
    assert (api["src_endpoint"], api["dst_endpoint"]) == ("frontend/web", "backend/api")
    assert api["verdict"] == "allow" and api["packets"] == 8 and api["denied"] == 0
    assert api["ingress"]["policy"] == "NetworkPolicy/backend/allow-frontend-to-api"
    syn = next(f for f in flows if f["dst"] == "10.0.2.30" and f["dport"] == 5432 and f["src"] == "10.0.1.10")
    assert syn["verdict"] == "deny" and syn["packets"] == 2 == syn["denied"]


STAGED = str(REPO / "examples" / "staged")


def test_staged_policies_are_judged_beside_and_change_no_verdict(tmp_path, demo_summary):
    out = tmp_path / "out.jsonl"
    r = cli("replay", DEMO, STAGED, "--pcap", PCAP, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert demo_summary["staged"] is None
    for key in ("packets", "allowed", "denied", "by_rule", "policy", "established"):
        assert s[key] == demo_summary[key], key
    staged = s["staged"]
    assert staged["allowed"] + staged["denied"] == s["packets"]
    # allowed now, denied staged: every packet of frontend -> api:8080 (its connection is never
    # made, so its replies are judged too and denied); nothing denied now is allowed staged
    assert staged["would_deny"] > 0 and staged["would_allow"] == 0
    assert staged["allowed"] == s["allowed"] - staged["would_deny"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all("staged" in line for line in lines)
    first = next(line for line in lines if line["dst_endpoint"] == "backend/api" and line["dport"] == 8080)
    assert first["verdict"] == "allow" and first["staged"]["verdict"] == "deny"
    assert first["staged"]["summary"] == "would deny at the end of tier default (ingress)"
    r = cli("replay", DEMO, STAGED, "--pcap", PCAP)
    assert f"{staged['would_deny']} packets allowed now would be denied" in r.stdout


def test_staged_per_flow_lines(tmp_path):
    out = tmp_path / "flows.jsonl"
    r = cli("replay", DEMO, STAGED, "--pcap", PCAP, "--out", str(out), "--flows")
    assert r.returncode == 0, r.stderr
    flows = [json.loads(line) for line in out.read_text().splitlines()]
    api = [f for f in flows if f["dst_endpoint"] == "backend/api" and f["dport"] == 8080]
    assert api and all(f["verdict"] == "allow" and f["staged"]["verdict"] == "deny" for f in api)


# --- frames that are not IP --------------------------------------------------------------------------


def test_frames_that_are_not_ip_pass_and_are_counted_apart(tmp_path):
    """ARP (and LLDP, any ethertype that is not IP) is what a firewall of IP traffic passes: counted
    as not IP, never as malformed, in the summary, --json and --out."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import ARP, Ether
    from scapy.utils import wrpcap

    syn = Ether() / IP(src="10.0.1.10", dst="10.0.2.20") / TCP(sport=40000, dport=8080, flags="S")
    arp = Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="10.0.1.10", pdst="10.0.2.20")
    lldp = Ether(dst="01:80:c2:00:00:0e", type=0x88CC) / (b"\x02\x07\x04" + b"\x00" * 20)
    path, out = tmp_path / "arp.pcap", tmp_path / "out.jsonl"
    wrpcap(str(path), [arp, syn, lldp, arp])
    r = cli("replay", DEMO, "--pcap", str(path), "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["packets"], s["not_ip"], s["malformed"], s["policy"]) == (4, 3, 0, 1)
    assert s["denied"] == 0 and s["allowed"] == 4 and s["flows"] == 1
    assert "unknown_ethertype" not in s["decode_errors"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["reason"] for x in lines] == ["not-ip", "policy", "not-ip", "not-ip"]
    r = cli("replay", DEMO, "--pcap", str(path))
    assert "3 passed as not IP" in r.stdout and "0 denied as malformed" in r.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"), reason="needs root and tcpdump")
def test_a_capture_between_namespaces_holds_arp_counted_as_not_ip(tmp_path):
    """Two network namespaces on one link, as web and api of the demo; tcpdump captures a TCP
    connection and the ARP exchange before it. Replayed: ARP is not IP, nothing malformed."""
    tag = uuid.uuid4().hex[:6]
    web, api = f"pcw{tag}", f"pca{tag}"
    sh = lambda *a: subprocess.run(a, check=True, capture_output=True, text=True)  # noqa: E731
    capture = tmp_path / "link.pcap"
    started: list[subprocess.Popen] = []
    try:
        sh("ip", "netns", "add", web)
        sh("ip", "netns", "add", api)
        sh("ip", "link", "add", f"w{tag}", "netns", web, "type", "veth", "peer", "name", f"a{tag}", "netns", api)
        sh("ip", "-n", web, "addr", "add", "10.0.1.10/16", "dev", f"w{tag}")
        sh("ip", "-n", api, "addr", "add", "10.0.2.20/16", "dev", f"a{tag}")
        for ns, dev in ((web, f"w{tag}"), (api, f"a{tag}")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                api,
                sys.executable,
                "-c",
                "import socket; s = socket.socket(); s.bind(('10.0.2.20', 8080)); s.listen(4);"
                " print('ready', flush=True); c, _ = s.accept(); c.close()",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(server)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        dump = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                web,
                "tcpdump",
                "-Z",
                "root",
                "--immediate-mode",
                "-i",
                f"w{tag}",
                "-U",
                "-w",
                str(capture),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(dump)
        assert dump.stderr is not None and "listening on" in dump.stderr.readline()
        sh(
            "ip",
            "netns",
            "exec",
            web,
            sys.executable,
            "-c",
            "import socket; socket.create_connection(('10.0.2.20', 8080), timeout=5).close()",
        )
        server.wait(timeout=10)
        time.sleep(0.5)
        dump.terminate()
        dump.wait(timeout=10)
    finally:
        for p in started:  # a failed step leaves none of them running
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in (web, api):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    r = cli("replay", DEMO, "--pcap", str(capture), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["not_ip"] >= 2, s  # who-has and is-at, at least
    assert s["malformed"] == 0 and s["packets"] == (
        s["not_ip"] + s["policy"] + s["established"] + s["invalid"] + s["denied_connection"]
    )
