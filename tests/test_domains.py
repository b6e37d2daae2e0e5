"""Domains from DNS (pyclassify.domains): the addresses DNS answers teach, matched by Calico
``domains`` and AdminNetworkPolicy ``domainNames`` rules, in replay (answers in the capture, in
capture order, for their TTL) and in explain (``--resolve``), by both evaluators."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyclassify import domains
from pyclassify.analysis import explain
from pyclassify.project import load_project

REPO = Path(__file__).resolve().parents[1]
DEMO, DOMAINS = str(REPO / "examples" / "demo"), str(REPO / "examples" / "domains")
PCAP = str(REPO / "pcaps" / "domains.pcap")
RULE = "GlobalNetworkPolicy/web-egress-by-name"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


def test_resolve_option() -> None:
    assert domains.resolve_option("API.example.com.=93.184.216.34, b.org=::1") == [
        ("api.example.com", "93.184.216.34"),
        ("b.org", "::1"),
    ]
    for bad in ("", "x", "a.com=", "a.com=999.1.1.1", "=1.2.3.4"):
        with pytest.raises(ValueError):
            domains.resolve_option(bad)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[dict, list[dict]]:
    out = tmp_path_factory.mktemp("domains") / "out.jsonl"
    r = cli("replay", DEMO, DOMAINS, "--pcap", PCAP, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), [json.loads(line) for line in out.read_text().splitlines()]


def test_replay_learns_in_capture_order_for_the_ttl(replayed) -> None:
    summary, lines = replayed
    syns = [
        (line["dst"], line["verdict"], (line["egress"] or {}).get("rule"))
        for line in lines
        if line["proto"] == "TCP" and line["dport"] == 443
    ]
    assert syns == [
        ("93.184.216.34", "deny", 3),  # before any answer
        ("93.184.216.34", "allow", 2),  # after api.example.com's answer
        ("192.0.2.80", "allow", 2),  # www.example.org through its CNAME chain (*.example.org)
        ("93.184.216.34", "deny", 3),  # 40 s later: the TTL ran out
        ("192.0.2.80", "deny", 3),
        ("93.184.216.34", "allow", 2),  # taught again, over TCP
        ("203.0.113.66", "deny", 3),  # a malformed answer teaches nothing
    ]
    assert all(line["egress"]["policy"] == RULE for line in lines if line["proto"] == "TCP" and line["dport"] == 443)
    dns = summary["dns"]
    # four messages: three taught three (name, address) facts, the TCP one refreshed one of them
    assert dns["answers"] == 4 and dns["learned"] == 3 and dns["facts"] == 3, dns
    assert dns["errors"] == {"truncated": 1}


def test_replay_without_domain_rules_learns_nothing() -> None:
    r = cli("replay", DEMO, "--pcap", PCAP, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["dns"] is None


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_explain_resolve_by_both_evaluators(engine: str) -> None:
    def verdict(dst: str, resolve: str | None) -> tuple[str, object]:
        project = load_project([DEMO, DOMAINS])
        if resolve:
            project.inventory.domains = domains.new_facts()
            for name, ip in domains.resolve_option(resolve):
                project.inventory.domains.learn(name, ip, 0, 0)
        v = explain(project, "frontend/web", dst, 6, 443, engine=engine).verdict
        return v.verdict, v.egress.rule

    ip = "93.184.216.34"
    assert verdict(ip, None) == ("deny", 3)
    assert verdict(ip, f"api.example.com={ip}") == ("allow", 2)
    assert verdict(ip, f"www.example.org={ip}") == ("allow", 2)  # one label under *.example.org
    assert verdict(ip, f"a.b.example.org={ip}") == ("allow", 2)  # or more
    assert verdict(ip, f"example.org={ip}") == ("deny", 3)  # not the bare domain
    assert verdict(ip, f"api.example.com.evil.net={ip}") == ("deny", 3)
    assert verdict(ip, "api.example.com=93.184.216.35") == ("deny", 3)
    # names that share an address share what is allowed (Calico: "allowing A allows B and C")
    assert verdict(ip, f"other.example.net={ip},api.example.com={ip}") == ("allow", 2)


def test_explain_resolve_on_the_command_line() -> None:
    args = ["explain", DEMO, DOMAINS, "--from", "frontend/web", "--to", "93.184.216.34", "--port", "443"]
    r = cli(*args, "--resolve", "api.example.com=93.184.216.34", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "allow" and doc["egress"]["policy"] == RULE and doc["egress"]["rule"] == 2
    assert json.loads(cli(*args, "--json").stdout)["verdict"] == "deny"
    r = cli(*args, "--resolve", "api.example.com")
    assert r.returncode == 2 and "--resolve" in r.stderr and "NAME=ADDRESS" in r.stderr


def test_admin_network_policy_domain_names() -> None:
    args = ["explain", DEMO, DOMAINS, "--from", "monitoring/prometheus", "--to", "192.0.2.9", "--port", "443", "--json"]
    allowed = json.loads(cli(*args, "--resolve", "alerts.example.net=192.0.2.9").stdout)
    assert allowed["verdict"] == "allow"
    assert allowed["egress"]["policy"] == "AdminNetworkPolicy/monitoring-egress-by-name"
    assert json.loads(cli(*args).stdout)["egress"]["policy"] != "AdminNetworkPolicy/monitoring-egress-by-name"


def test_domain_rules_are_enforceable() -> None:
    r = cli("check", DEMO, DOMAINS, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["unenforceable"] == []


# --- many answers: each learned right after its packet, in every lane of the native judge ----


# Staged: web's egress by api.example.com alone (the enforced policy also allows *.example.org).
STAGED_NARROWER = """apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: web-egress-by-api-name}
spec:
  order: 10
  selector: app == 'web'
  types: [Egress]
  egress:
  - {action: Allow, protocol: UDP, destination: {ports: [53]}}
  - {action: Allow, protocol: TCP, destination: {domains: [api.example.com], ports: [443]}}
  - {action: Deny}
"""


@pytest.mark.parametrize("setup", ["direct", "kube-dns-service", "staged"])
def test_replay_of_many_answers_matches_their_ttls(setup, tmp_path) -> None:
    """Thousands of answers across several batches (three captures), each SYN's verdict against
    a model of the answers before it: learned in the one native judge call per batch, also when
    the answers come from a Service's virtual address (judged in a lane per backend) and beside
    staged policies (lanes of their own, reading the same facts)."""
    from bench.captures import DNS_NAMES_ALLOWED, KUBE_DNS_SERVICE, syns_allowed, write_dns_capture

    extra = []
    if setup != "direct":
        extra.append(tmp_path / "extra.yaml")
        extra[0].write_text(KUBE_DNS_SERVICE if setup == "kube-dns-service" else STAGED_NARROWER)
    server = "10.96.0.10" if setup == "kube-dns-service" else "10.0.9.53"
    paths = [tmp_path / f"part{i}.pcap" for i in range(3)]
    answers, syns = write_dns_capture(paths, 6000, server=server)  # 24,000 packets
    out = tmp_path / "out.jsonl"
    pcaps = [a for p in paths for a in ("--pcap", str(p))]
    r = cli("replay", DEMO, DOMAINS, *map(str, extra), *pcaps, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    syn_lines = [x for x in lines if x["proto"] == "TCP" and x["dport"] == 443]
    expected = syns_allowed(answers, syns, DNS_NAMES_ALLOWED)
    assert [x["verdict"] == "allow" for x in syn_lines] == expected
    assert 0 < sum(expected) < len(expected)
    summary = json.loads(r.stdout)
    assert summary["dns"]["answers"] == len(answers) and summary["dns"]["errors"] == {}
    # every query and answer passes (through the Service: both backends allow it)
    dns_lines = [x for x in lines if x["proto"] == "UDP"]
    assert len(dns_lines) == 2 * len(answers) and all(x["verdict"] == "allow" for x in dns_lines)
    if setup == "kube-dns-service":
        assert all(x["service"]["name"] == "kube-system/kube-dns" for x in dns_lines)
    if setup == "staged":
        staged = syns_allowed(answers, syns, ("api.example.com",))
        assert [x["staged"]["verdict"] == "allow" for x in syn_lines] == staged
        assert staged != expected
