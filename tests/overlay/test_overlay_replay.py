"""``pyclassify replay`` on a capture taken on a node's uplink, where the pods' traffic crosses an
overlay tunnel (root only): web talks to db on 8080 (allowed) and on 5432 (denied by db's
NetworkPolicy) through a real VXLAN, Geneve, IP-in-IP, GRE or GRE-tap tunnel between two node
namespaces; tcpdump records the underlay. Replay must judge the pods' flows inside the tunnel —
the 5432 connection denied by policy — and show both headers on each line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.overlay.netns import DB_IP, MANIFESTS, NODE_A, NODE_B, SERVER, VNI, WEB_IP, kernel_has, overlay

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tcpdump need root")

# (tunnel, its UDP port, replay's options, the encapsulation replay names)
TUNNELS = [
    ("vxlan", 4789, (), "vxlan"),  # Calico's VXLAN
    ("vxlan", 8472, (), "vxlan"),  # Linux's default port, as Flannel and Cilium use it
    ("vxlan", 9999, ("--vxlan-port", "9999"), "vxlan"),  # a port configured elsewhere: said on the command line
    ("geneve", 6081, (), "geneve"),  # Cilium's Geneve
    ("ipip", 0, (), "ipip"),  # Calico's IPIP
    ("gre", 0, (), "gre"),
    ("gretap", 0, (), "gre"),  # Ethernet in GRE (0x6558)
]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("overlay") / "cluster.yaml"
    path.write_text(MANIFESTS)
    return path


def web_to_db(lines: list[dict], dport: int) -> list[dict]:
    return [line for line in lines if (line["src"], line["dst"], line["dport"]) == (WEB_IP, DB_IP, dport)]


@root_only
@pytest.mark.parametrize(
    ("kind", "port", "options", "encap"), TUNNELS, ids=[f"{k}-{p}" if p else k for k, p, _, _ in TUNNELS]
)
def test_replay_judges_the_pods_flows_inside_the_tunnel(
    tmp_path: Path, manifests: Path, kind: str, port: int, options: tuple[str, ...], encap: str
) -> None:
    if not kernel_has(kind) and not os.path.exists("/dev/net/tun"):
        pytest.skip(f"neither a {kind} device in this kernel nor /dev/net/tun for a user-space endpoint")
    pcap = tmp_path / "uplink.pcap"
    with overlay(kind, port) as net:
        net.run(net.db, SERVER, "8080", "5432")
        with net.capture(pcap):
            # nothing enforces on these nodes: the capture holds both conversations whole
            assert net.connect(8080) == "ok"
            assert net.connect(5432) == "ok"
        how = "the kernel's device" if net.kernel else "a user-space tunnel endpoint"
    out = tmp_path / "verdicts.jsonl"
    r = cli("replay", str(manifests), "--pcap", str(pcap), "--out", str(out), "--json", *options)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    lines = [json.loads(line) for line in out.read_text().splitlines()]

    # every frame on the uplink is the tunnel's, and each was judged by the packet inside
    assert summary["packets"] == len(lines) >= 10, how
    assert summary["tunnels"]["decapsulated"] == {encap: summary["packets"]}
    assert summary["not_judged"] == summary["malformed"] == 0
    for line in lines:
        assert {line["src"], line["dst"]} == {WEB_IP, DB_IP}, line
        outer = line["outer"]
        assert outer["encap"] == encap
        assert {outer["src"], outer["dst"]} == {NODE_A, NODE_B}
        assert (outer["src"] == NODE_A) == (line["src"] == WEB_IP), "the tunnel runs the way its packet does"
        if encap in ("vxlan", "geneve"):
            assert outer["proto"] == "UDP" and outer["dport"] == port and outer["vni"] == VNI
        else:
            assert outer["proto"] == {"ipip": "IPv4", "gre": "GRE"}[encap]
            assert outer["sport"] is None and outer["dport"] is None

    # web -> db:5432: the SYN judged by db's policy (db-ingress isolates db), denied at its end of tier
    denied = web_to_db(lines, 5432)
    syn = denied[0]
    assert syn["verdict"] == "deny" and syn["reason"] == "policy", syn
    assert syn["src_endpoint"] == "shop/web" and syn["dst_endpoint"] == "data/db"
    assert syn["ingress"]["verdict"] == "deny" and syn["ingress"]["reason"] == "end-of-tier"
    assert syn["ingress"]["tier"] == "default"
    assert not any(line["verdict"] == "allow" and line["reason"] == "policy" for line in denied)
    # web -> db:8080: allowed by the rule, its replies by connection tracking
    allowed = web_to_db(lines, 8080)
    assert allowed[0]["verdict"] == "allow" and allowed[0]["reason"] == "policy"
    assert allowed[0]["ingress"]["rule"] == 0
    replies = [line for line in lines if line["src"] == DB_IP and line["sport"] == 8080]
    assert replies and all(line["verdict"] == "allow" for line in replies)
    rows = {(row["direction"], row["reason"], row["verdict"]) for row in summary["by_rule"]}
    assert ("ingress", "end-of-tier", "deny") in rows and ("ingress", "rule", "allow") in rows

    # the summary as a person reads it says what the tunnel carried
    r = cli("replay", str(manifests), "--pcap", str(pcap), *options)
    assert r.returncode == 0, r.stderr
    assert f"tunnels: {summary['packets']} {encap} packets judged by the packet inside" in r.stdout


@root_only
def test_tunnels_on_other_ports_are_judged_by_their_outer_header_unless_named(tmp_path: Path, manifests: Path) -> None:
    """A VXLAN port replay was not told of is just UDP between the nodes: judged as that, with
    no "outer" (no policy applies to the nodes' addresses); ``--vxlan-port`` names it."""
    if not kernel_has("vxlan") and not os.path.exists("/dev/net/tun"):
        pytest.skip("neither a vxlan device in this kernel nor /dev/net/tun for a user-space endpoint")
    pcap = tmp_path / "uplink.pcap"
    with overlay("vxlan", 9999) as net:
        net.run(net.db, SERVER, "5432")
        with net.capture(pcap):
            assert net.connect(5432) == "ok"
    out = tmp_path / "verdicts.jsonl"
    r = cli("replay", str(manifests), "--pcap", str(pcap), "--json", "--out", str(out))
    summary = json.loads(r.stdout)
    assert summary["tunnels"]["decapsulated"] == {} and summary["tunnels"]["vxlan_ports"] == [4789, 8472]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and all("outer" not in line and (line["proto"], line["dport"]) == ("UDP", 9999) for line in lines)
    r = cli("replay", str(manifests), "--pcap", str(pcap), "--json", "--vxlan-port", "9999")
    summary = json.loads(r.stdout)
    assert summary["tunnels"]["decapsulated"] == {"vxlan": summary["packets"]}
    assert summary["denied"] >= 1
    r = cli("replay", str(manifests), "--pcap", str(pcap), "--vxlan-port", "9999", "--no-decap")
    assert r.returncode == 2 and "--no-decap" in r.stderr
