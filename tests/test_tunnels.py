"""Overlay tunnels in replay (pyclassify.tunnels), without root: the bundled captures re-played
inside VXLAN give the verdicts they give bare — DNS answers learned and http requests read inside
the tunnel, on the default port and on one named with ``--vxlan-port`` — and each line shows the
tunnel; what cannot be read is "not-judged" in the lines and the summary.

The real captures (tcpdump on a node's uplink, kernel tunnels between network namespaces) are
in tests/overlay/."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench.captures import PCAP_HEADER, VXLAN_NODES, vxlan_frame
from pyclassify.capture import open_capture
from pyclassify.tunnels import DEFAULT_TUNNELS, TunnelPorts

REPO = Path(__file__).resolve().parents[1]
DEMO, DOMAINS, HTTP, STAGED = (str(REPO / "examples" / d) for d in ("demo", "domains", "http", "staged"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


def tunnelled(source: Path, dest: Path, dport: int) -> Path:
    """``source`` (an Ethernet pcap) with every frame inside VXLAN to ``dport``."""
    records = []
    with open_capture(str(source), tunnels=TunnelPorts(decapsulate=False)) as cap:
        for batch in cap:
            for i in range(len(batch)):
                frame = vxlan_frame(batch.packet(i), sport=40000 + i, dport=dport)
                ts = int(batch.headers["ts_ns"][i])
                records.append(struct.pack("<IIII", ts // 10**9, ts % 10**9 // 1000, len(frame), len(frame)) + frame)
    dest.write_bytes(PCAP_HEADER + b"".join(records))
    return dest


def replay(*args: str, out: Path) -> tuple[dict, list[dict]]:
    r = cli("replay", *args, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), [json.loads(line) for line in out.read_text().splitlines()]


def verdicts(lines: list[dict]) -> list[tuple]:
    keep = ("src", "dst", "proto", "sport", "dport", "verdict", "reason", "egress", "ingress", "http", "staged")
    return [tuple(json.dumps(line.get(k)) for k in keep) for line in lines]


@pytest.mark.parametrize(
    ("manifests", "pcap"),
    [
        ((DEMO,), "demo.pcap"),
        ((DEMO, DOMAINS), "domains.pcap"),
        ((DEMO, HTTP), "http.pcap"),
        ((DEMO, STAGED), "demo.pcap"),
    ],
    ids=["demo", "domains", "http", "staged"],
)
@pytest.mark.parametrize("port", [4789, 9472])
def test_a_capture_inside_vxlan_gets_the_verdicts_it_gets_bare(
    tmp_path: Path, manifests: tuple[str, ...], pcap: str, port: int
) -> None:
    bare, bare_lines = replay(*manifests, "--pcap", str(REPO / "pcaps" / pcap), out=tmp_path / "bare.jsonl")
    inside = tunnelled(REPO / "pcaps" / pcap, tmp_path / "vxlan.pcap", port)
    options = () if port in DEFAULT_TUNNELS.vxlan else ("--vxlan-port", str(port))
    summary, lines = replay(*manifests, "--pcap", str(inside), *options, out=tmp_path / "vxlan.jsonl")
    assert verdicts(lines) == verdicts(bare_lines)
    assert summary["tunnels"]["decapsulated"] == {"vxlan": bare["packets"]}
    for key in ("allowed", "denied", "policy", "established", "invalid", "by_rule", "dns", "http", "staged"):
        assert summary[key] == bare[key], key
    assert summary["malformed"] == bare["malformed"] and summary["not_judged"] == 0
    nodes = [".".join(map(str, n)) for n in VXLAN_NODES]
    assert all(
        line["outer"]
        == {
            "src": nodes[0],
            "dst": nodes[1],
            "proto": "UDP",
            "sport": 40000 + line["index"],
            "dport": port,
            "encap": "vxlan",
            "vni": 4096,
        }
        for line in lines
    )
    if pcap == "domains.pcap":
        assert summary["dns"]["learned"] == 3  # the answers inside the tunnel taught their names
    if pcap == "http.pcap":
        assert summary["http"]["requests_allowed"] + summary["http"]["requests_denied"] > 0


def test_flow_records_carry_the_outer_header(tmp_path: Path) -> None:
    inside = tunnelled(REPO / "pcaps" / "demo.pcap", tmp_path / "vxlan.pcap", 4789)
    out = tmp_path / "flows.jsonl"
    r = cli("replay", DEMO, "--pcap", str(inside), "--flows", "--out", str(out))
    assert r.returncode == 0, r.stderr
    flows = [json.loads(line) for line in out.read_text().splitlines()]
    assert flows and all(f["outer"]["encap"] == "vxlan" for f in flows)


def test_unreadable_tunnels_are_counted_apart_and_never_allowed(tmp_path: Path) -> None:
    """A VXLAN packet whose VNI flag is clear and one cut inside the pod's header, beside a good
    one: lines say "not-judged" and why, the summary counts them, the good one is judged."""
    with open_capture(str(REPO / "pcaps" / "demo.pcap")) as cap:
        inner = next(iter(cap)).packet(0)  # web asks kube-dns: allowed
    good = vxlan_frame(inner)
    no_vni = good[:42] + b"\x00" + good[43:]
    frames = [(good, len(good)), (no_vni, len(no_vni)), (good[: 14 + 20 + 8 + 8 + 14 + 20 + 4], len(good))]
    path = tmp_path / "vxlan.pcap"
    path.write_bytes(
        PCAP_HEADER
        + b"".join(struct.pack("<IIII", 1767225600, i, len(f), wire) + f for i, (f, wire) in enumerate(frames))
    )
    summary, lines = replay(DEMO, "--pcap", str(path), out=tmp_path / "out.jsonl")
    assert [line["reason"] for line in lines] == ["policy", "not-judged", "not-judged"]
    assert [line["verdict"] for line in lines] == ["allow", "deny", "deny"]
    assert [line.get("error") for line in lines] == [None, "tunnel_unsupported", "truncated_l4"]
    assert lines[1]["src"] is None and lines[1]["outer"]["vni"] is None and lines[2]["outer"]["vni"] == 4096
    assert summary["not_judged"] == 2 and summary["malformed"] == 0 and summary["denied"] == 2
    assert summary["tunnels"]["not_judged"] == {"vxlan": {"truncated_l4": 1, "tunnel_unsupported": 1}}
    assert summary["tunnels"]["decapsulated"] == {"vxlan": 1}
    text = cli("replay", DEMO, "--pcap", str(path)).stdout
    assert "2 denied as not judged (inside a tunnel that could not be read)" in text
    assert "tunnels: vxlan packets not judged: 1 truncated_l4, 1 tunnel_unsupported" in text
    # --no-decap: the same packets are UDP between the two nodes, which no policy covers
    r = cli("replay", DEMO, "--pcap", str(path), "--json", "--no-decap")
    off = json.loads(r.stdout)
    assert off["not_judged"] == 0 and off["tunnels"]["decapsulated"] == {} and off["tunnels"]["decapsulate"] is False
