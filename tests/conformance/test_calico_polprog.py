"""Calico's BPF policy-program cases (../shared/cases/calico_polprog.json) through the IR and the
reference evaluator.

The cases are written in felix's internal rule form (``polprog.Rule``: SrcNet, DstIpSetIds,
named-port IP sets, ...), not YAML. A small adapter below turns each case into IR tiers,
policies and profiles: IP sets become nets (AND/OR as ``semantics_notes.rule_match`` says),
named-port IP sets become named ports of endpoints at the members' addresses, and felix's
FilterRuleToIPVersion is applied as felix applies it before building the program. The program
is the ingress policy of one workload (``W``); the packet's verdict is W's ingress decision,
with felix's implicit Deny when nothing decides.
"""

from __future__ import annotations

import ipaddress
import json

import pytest

from pyclassify.hostpath import HookSets, host_path
from pyclassify.inventory import ContainerPort, Endpoint, Inventory
from pyclassify.ir import (
    PROTO_ICMP,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    Hook,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Profile,
    Rule,
    Subject,
    Tier,
)
from pyclassify.reference import Flow, FlowEnd
from pyclassify.selector import Selector
from tests.shared_data import SHARED, shared_path

CASES_FILE = SHARED / "cases" / "calico_polprog.json"

# Host-endpoint programs (pre-DNAT, forward and normal host tiers, host profiles, "from/to host"
# packet flags) and XDP programs (untracked host policy, NoMatch) are judged hook by hook
# (pyclassify.hostpath), each program stage's tiers the policy set of its hook.
SKIPPED_TABLES: dict[str, str] = {}

_ACTIONS = {
    "allow": Action.ALLOW,
    "deny": Action.DENY,
    "pass": Action.PASS,
    "next-tier": Action.PASS,
    "log": Action.LOG,
}
_PROTOCOL_NAMES = {"tcp": PROTO_TCP, "udp": PROTO_UDP, "icmp": PROTO_ICMP, "sctp": PROTO_SCTP}
_NAMED_PORT_PROTOCOLS = {"tcp": PROTO_TCP, "udp": PROTO_UDP}
# Matches no address: "a member of a set that has no members".
_NOWHERE = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
_SUBJECT_LABELS = {"polprog": "subject"}
_SUBJECT = Subject(Selector("polprog == 'subject'"), frozenset({EndpointKind.POD}))


def _load() -> dict:
    return json.loads(shared_path("cases", CASES_FILE.name, what="Calico's policy-program cases").read_text())


def _cases() -> list[dict]:
    if not CASES_FILE.exists():
        return []
    return json.loads(CASES_FILE.read_text())["cases"]


def _skip_reason(case: dict) -> str | None:
    return SKIPPED_TABLES.get(case["table"])


def _is_host_program(case: dict) -> bool:
    pol = case["policy"]
    return bool(
        pol["ForXDP"]
        or pol["ForHostInterface"]
        or any(pol[k] for k in ("HostPreDnatTiers", "HostForwardTiers", "HostNormalTiers", "HostProfiles"))
    )


# --- the adapter: felix rules -> IR -----------------------------------------------------------


class _IpSets:
    """A case's IP sets: plain CIDR members, and named-port members (ip, protocol, port)."""

    def __init__(self, sets: dict[str, list[str]], family: int) -> None:
        self.cidrs: dict[str, list] = {}
        self.named: dict[str, list[tuple]] = {}
        for set_id, members in sets.items():
            self.cidrs[set_id] = []
            self.named[set_id] = []
            for member in members:
                addr, _, port_part = member.partition(",")
                net = ipaddress.ip_network(addr, strict=False)
                if net.version != family:
                    continue  # loaded into the other family's map: never seen by this program
                if port_part:
                    proto, _, port = port_part.partition(":")
                    self.named[set_id].append((net.network_address, _NAMED_PORT_PROTOCOLS[proto], int(port)))
                else:
                    self.cidrs[set_id].append(net)

    def ports_at(self, ip) -> tuple[ContainerPort, ...]:
        """Named-port members at ``ip`` as container ports named by their set ID."""
        return tuple(
            ContainerPort(port, proto, set_id)
            for set_id, members in self.named.items()
            for addr, proto, port in members
            if addr == ip
        )


def _intersect(a: list | None, b: list) -> list:
    """Addresses in both CIDR lists (None: no constraint yet)."""
    if a is None:
        return list(b)
    out = []
    for x in a:
        for y in b:
            if x.version == y.version and x.overlaps(y):
                out.append(x if x.prefixlen >= y.prefixlen else y)
    return out


def _protocol(p: dict | None) -> int | None:
    if p is None:
        return None
    if "Number" in p:
        return p["Number"]
    return _PROTOCOL_NAMES.get(p["Name"].lower(), 0)  # felix: other names become 0


def _icmp(m: dict | None) -> IcmpMatch | None:
    if m is None:
        return None
    for key in ("IcmpType", "NotIcmpType"):
        if key in m:
            return IcmpMatch(m[key], None)
    for key in ("IcmpTypeCode", "NotIcmpTypeCode"):
        if key in m:
            return IcmpMatch(m[key]["Type"], m[key]["Code"])
    raise AssertionError(f"unknown ICMP match {m}")


def _filter_to_family(r: dict, family: int) -> dict | None:
    """felix/rules FilterRuleToIPVersion: the rule as this program's family sees it, or None."""
    if r.get("IpVersion") and r["IpVersion"] != family:
        return None
    r = dict(r)
    for key in ("SrcNet", "NotSrcNet", "DstNet", "NotDstNet"):
        nets = [ipaddress.ip_network(n, strict=False) for n in r.get(key) or []]
        if not nets:
            continue
        kept = [n for n in nets if n.version == family]
        if not kept:
            return None
        if key.startswith("Not") and any(n.prefixlen == 0 for n in kept):
            return None  # a negated catch-all can never match
        r[key] = kept
    return r


def _entity(r: dict, side: str, sets: _IpSets) -> EntityMatch | None:
    nets: list | None = None
    not_nets: list = []
    if r.get(f"{side}Net"):
        nets = list(r[f"{side}Net"])
    not_nets += r.get(f"Not{side}Net") or []
    set_ids = r.get(f"{side}IpSetIds") or []
    if set_ids:
        if side == "Src":  # member of every listed set
            for set_id in set_ids:
                nets = _intersect(nets, sets.cidrs[set_id])
        else:  # member of any listed set
            nets = _intersect(nets, [n for s in set_ids for n in sets.cidrs[s]])
    for set_id in r.get(f"Not{side}IpSetIds") or []:
        not_nets += sets.cidrs[set_id]
    if nets is not None and not nets:
        not_nets += _NOWHERE  # a constraint no address meets
        nets = None

    def ports(prefix: str) -> tuple[PortMatch, ...]:
        ranges = [PortMatch(None, PortRange(p["First"], p["Last"])) for p in r.get(f"{prefix}{side}Ports") or []]
        named = [PortMatch(None, NamedPort(s)) for s in r.get(f"{prefix}{side}NamedPortIpSetIds") or []]
        return tuple(ranges + named)

    match = EntityMatch(nets=tuple(nets or ()), not_nets=tuple(not_nets), ports=ports(""), not_ports=ports("Not"))
    return None if match == EntityMatch() else match


def _rule(r: dict, index: int, sets: _IpSets, family: int) -> Rule | None:
    r = _filter_to_family(r, family)
    if r is None:
        return None
    src, dst = _entity(r, "Src", sets), _entity(r, "Dst", sets)
    protocol = _protocol(r.get("Protocol"))
    not_protocol = _protocol(r.get("NotProtocol"))
    return Rule(
        action=_ACTIONS[r["Action"].lower()],
        index=index,
        protocols=frozenset({protocol}) if protocol is not None else None,
        not_protocols=frozenset({not_protocol}) if not_protocol is not None else frozenset(),
        icmp=_icmp(r.get("Icmp")),
        not_icmp=_icmp(r.get("NotIcmp")),
        sources=(src,) if src else (),
        destinations=(dst,) if dst else (),
    )


def _rules(rules: list[dict], sets: _IpSets, family: int) -> tuple[Rule, ...]:
    out = (_rule(r["Rule"], i, sets, family) for i, r in enumerate(rules))
    return tuple(r for r in out if r is not None)


def _tiers(given: list[dict], prefix: str, subject: Subject, sets: _IpSets, family: int) -> tuple[list, list]:
    """A program stage's tiers as IR tiers (named ``prefix`` + position + name) and policies."""
    tiers, policies = [], []
    for i, t in enumerate(given):
        tier_name = f"{prefix}t{i}-{t['Name']}"
        end = Action.PASS if t["EndAction"].lower() in ("pass", "next-tier") else Action.DENY
        tiers.append(Tier(tier_name, float(i), end))
        # The program holds every tier given to it, with its end action even when no policy is
        # in it; in the IR a tier takes part when a policy applies, so give it an empty one.
        for j, p in enumerate(t["Policies"] or [{"Name": "(empty tier)", "Rules": []}]):
            policies.append(
                Policy(
                    "GlobalNetworkPolicy",
                    None,
                    f"{j}-{p['Name']}",
                    tier_name,
                    float(j),
                    subject,
                    frozenset({Direction.INGRESS}),
                    ingress=_rules(p.get("Rules") or [], sets, family),
                )
            )
    return tiers, policies


def _profiles(given: list[dict], prefix: str, sets: _IpSets, family: int) -> list[Profile]:
    return [
        Profile(f"{prefix}p{i}-{p['Name']}", ingress=_rules(p.get("Rules") or [], sets, family))
        for i, p in enumerate(given)
    ]


def policy_set_of(case: dict) -> tuple[PolicySet, _IpSets, tuple[str, ...]]:
    family = 6 if case["for_ipv6"] else 4
    sets = _IpSets(case["ip_sets"], family)
    tiers, policies = _tiers(case["policy"]["Tiers"], "", _SUBJECT, sets, family)
    profiles = _profiles(case["policy"]["Profiles"], "", sets, family)
    return PolicySet.build(policies, tiers, profiles), sets, tuple(p.name for p in profiles)


_HOST_LABELS = {"polprog": "host"}
_HOST_SUBJECT = Subject(Selector("polprog == 'host'"), frozenset({EndpointKind.HOST}))


def host_program_of(case: dict) -> tuple[HookSets, _IpSets, tuple[str, ...], tuple[str, ...]]:
    """A host-endpoint (or XDP) program: each stage's tiers the policy set of its hook
    (XDP's HostNormalTiers are untracked policy); the workload's tiers and the host's normal
    tiers share the normal hook, apart by subject (the host endpoint H, the workload W)."""
    family = 6 if case["for_ipv6"] else 4
    sets = _IpSets(case["ip_sets"], family)
    pol = case["policy"]
    normal_tiers, normal_policies = _tiers(pol["Tiers"], "workload/", _SUBJECT, sets, family)
    host_tiers, host_policies = _tiers(pol["HostNormalTiers"], "host/", _HOST_SUBJECT, sets, family)
    hooks = {}
    if pol["ForXDP"]:
        hooks[Hook.UNTRACKED] = PolicySet.build(host_policies, host_tiers)
        host_tiers, host_policies = [], []
    else:
        hooks[Hook.UNTRACKED] = PolicySet.build([])
    for hook, key in ((Hook.PRE_DNAT, "HostPreDnatTiers"), (Hook.FORWARD, "HostForwardTiers")):
        hooks[hook] = PolicySet.build(*reversed(_tiers(pol[key], f"{hook.value}/", _HOST_SUBJECT, sets, family)))
    profiles = _profiles(pol["Profiles"], "workload/", sets, family)
    host_profiles = _profiles(pol["HostProfiles"], "host/", sets, family)
    hooks[Hook.NORMAL] = PolicySet.build(
        normal_policies + host_policies, normal_tiers + host_tiers, profiles + host_profiles
    )
    return HookSets(sets=hooks), sets, tuple(p.name for p in profiles), tuple(p.name for p in host_profiles)


def host_program_verdict(case: dict, pkt: dict, evaluate) -> str:
    """The program's verdict on one packet: felix's stages as ``pyclassify.hostpath`` composes
    them, the host endpoint H the subject of every host stage (the program's tiers are already
    those of its interface and direction, so the packet is judged as ingress throughout)."""
    hooks, sets, profiles, host_profiles = host_program_of(case)
    pol = case["policy"]
    src_ip, dst_ip = ipaddress.ip_address(pkt["src"]), ipaddress.ip_address(pkt["dst"])
    pre_ip = ipaddress.ip_address(pkt.get("pre_nat_dst", pkt["dst"]))
    pre_port = pkt.get("pre_nat_dport", pkt["dport"]) if pkt["proto"] != PROTO_ICMP else 0
    peer = Endpoint(EndpointKind.POD, "peer", "polprog", {}, (src_ip,), sets.ports_at(src_ip))
    host = Endpoint(
        EndpointKind.HOST, "H", None, _HOST_LABELS, (dst_ip,), sets.ports_at(dst_ip), profiles=host_profiles
    )
    workload = Endpoint(
        EndpointKind.POD, "W", "polprog", _SUBJECT_LABELS, (dst_ip,), sets.ports_at(dst_ip), profiles=profiles
    )

    def flow(dst: Endpoint, ip, port) -> Flow:
        return Flow(
            FlowEnd(peer, src_ip),
            FlowEnd(dst, ip),
            pkt["proto"],
            pkt["sport"],
            port,
            pkt.get("icmp_type"),
            pkt.get("icmp_code"),
        )

    def workload_stage():
        d = evaluate(
            hooks.sets[Hook.NORMAL], Inventory(), flow(workload, dst_ip, pkt["dport"]), default_pod="deny"
        ).ingress
        return (d.verdict if d is not None else "deny"), d  # felix's implicit Deny

    path = host_path(
        evaluate,
        hooks,
        Inventory(),
        pre=flow(host, pre_ip, pre_port),
        post=flow(host, dst_ip, pkt["dport"]),
        side=Direction.INGRESS,
        host_traffic=bool(pkt.get("from_host") or pkt.get("to_host")),
        suppress_normal=pol["SuppressNormalHostPolicy"],
        untracked_only=pol["ForXDP"],
        then=None if pol["ForHostInterface"] else workload_stage,
    )
    return path.verdict


def program_verdict(pset: PolicySet, sets: _IpSets, profiles: tuple[str, ...], pkt: dict, evaluate) -> str:
    src_ip, dst_ip = ipaddress.ip_address(pkt["src"]), ipaddress.ip_address(pkt["dst"])
    workload = Endpoint(
        EndpointKind.POD, "W", "polprog", _SUBJECT_LABELS, (dst_ip,), sets.ports_at(dst_ip), profiles=profiles
    )
    peer = Endpoint(EndpointKind.POD, "peer", "polprog", {}, (src_ip,), sets.ports_at(src_ip))
    flow = Flow(
        FlowEnd(peer, src_ip),
        FlowEnd(workload, dst_ip),
        pkt["proto"],
        pkt["sport"],
        pkt["dport"],
        pkt.get("icmp_type"),
        pkt.get("icmp_code"),
    )
    decision = evaluate(pset, Inventory(), flow, default_pod="deny").ingress
    return decision.verdict if decision is not None else "deny"  # felix's implicit Deny


# --- the tests ------------------------------------------------------------------------------


def _params():
    out = []
    for case in _cases():
        marks = []
        reason = _skip_reason(case)
        if reason:
            marks.append(pytest.mark.skip(reason=reason))
        out.append(pytest.param(case, id=f"{case['table']}[{case['index']}]", marks=marks))
    return out or [pytest.param(None, id="no-cases")]


@pytest.mark.parametrize("case", _params())
def test_polprog_case(case, evaluate):
    if case is None:
        _load()  # skips with the reason
    if _is_host_program(case):
        verdict = lambda pkt: host_program_verdict(case, pkt, evaluate)  # noqa: E731
    else:
        pset, sets, profiles = policy_set_of(case)
        verdict = lambda pkt: program_verdict(pset, sets, profiles, pkt, evaluate)  # noqa: E731
    wrong = []
    for expected, key in (
        ("allow", "allowed_packets"),
        ("deny", "dropped_packets"),
        ("unmatched", "unmatched_packets"),
    ):
        for pkt in case.get(key) or []:
            got = verdict(pkt)
            if got != expected:
                wrong.append((pkt, expected, got))
    assert not wrong, f"{case['name']}: {wrong}"


def test_host_and_xdp_programs_are_all_run():
    data = _load()
    host = [c for c in data["cases"] if c["table"] in ("hostPolProgramTests", "xdpPolProgramTests")]
    assert len(host) == data["counts"]["hostPolProgramTests"] + data["counts"]["xdpPolProgramTests"] == 12
    assert all(_is_host_program(c) and _skip_reason(c) is None for c in host)


def test_workload_cases_are_all_run():
    data = _load()
    run = [c for c in data["cases"] if _skip_reason(c) is None]
    workload = [c for c in data["cases"] if c["table"] == "polProgramTests"]
    assert len(workload) == data["counts"]["polProgramTests"]
    assert all(_skip_reason(c) is None for c in workload)
    assert sum(len(c["allowed_packets"]) + len(c["dropped_packets"]) for c in run) > 400


def test_adapter_is_not_vacuous(evaluate):
    """Both verdicts occur, so a broken adapter that denies everything cannot pass."""
    data = _load()
    verdicts = set()
    for case in data["cases"][:30]:
        if _skip_reason(case):
            continue
        pset, sets, profiles = policy_set_of(case)
        for pkt in case["allowed_packets"][:1] + case["dropped_packets"][:1]:
            verdicts.add(program_verdict(pset, sets, profiles, pkt, evaluate))
    assert verdicts == {"allow", "deny"}


def _with_large_prefixed_tier(case: dict) -> dict:
    """semantics_notes.expanded_runs: an 'extra tier' of 250 x 50 rules that can never match
    (their source set is never populated) ending in a bare Pass, put before the case's tiers."""
    policies = []
    for p in range(250):
        rules = []
        for k in range(50):
            n = p * 50 + k
            ports = [{"First": 1, "Last": 1 + n % 8000}]
            if n % 1000 == 0:
                ports += [{"First": 10000 + 2 * q, "Last": 10001 + 2 * q} for q in range(2000)]
            rules.append(
                {
                    "Rule": {
                        "Action": ["allow", "deny", "pass"][n % 3],
                        "Protocol": {"Name": "tcp"},
                        "SrcIpSetIds": ["setNoOp"],
                        "DstPorts": ports,
                    }
                }
            )
        policies.append({"Name": f"pol-{p}", "Rules": rules})
    policies[-1]["Rules"].append({"Rule": {"Action": "pass"}})
    expanded = json.loads(json.dumps(case))
    expanded["policy"]["Tiers"].insert(0, {"Name": "extra tier", "Policies": policies, "EndAction": ""})
    expanded["ip_sets"]["setNoOp"] = []
    return expanded


# A few of the expanded runs (each walks 12,501 rules per packet in pure Python; the verdicts
# must not change). Bounded to keep the suite fast.
EXPANDED_SAMPLE = 2


def test_expanded_runs_with_a_large_prefixed_tier(evaluate):
    data = _load()
    sample = [
        c
        for c in data["cases"]
        if c.get("also_run_expanded") == "WithLargePrefixedTier" and c["allowed_packets"] and c["dropped_packets"]
    ][:EXPANDED_SAMPLE]
    assert len(sample) == EXPANDED_SAMPLE
    for case in sample:
        pset, sets, profiles = policy_set_of(_with_large_prefixed_tier(case))
        assert sum(len(p.ingress) for p in pset.policies if p.tier == "t0-extra tier") == 12_501
        for expected, key in (("allow", "allowed_packets"), ("deny", "dropped_packets")):
            for pkt in case[key]:
                assert program_verdict(pset, sets, profiles, pkt, evaluate) == expected, (case["name"], pkt)
