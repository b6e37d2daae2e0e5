"""np-guard netpol-analyzer: the allowed connections between workloads (and IP ranges) of each
scenario, computed with the project loader and the reference evaluator.

Workload-to-workload connections are compared as whole sets (a pair we allow that np-guard does
not list fails too). Lines with an IP-range side are checked per line: np-guard cuts the address
space into atoms of uniform verdict, so each listed atom must carry exactly the listed
connections at its first and last address. Connections are computed per protocol (TCP, UDP,
SCTP, the ones np-guard models) by evaluating one port per interval between every port boundary
any policy or the destination's container ports mention, so results are exact without probing
65,535 ports.
"""

from __future__ import annotations

import ipaddress
import json

import pytest

from pyclassify.documents import Problems
from pyclassify.inventory import Endpoint
from pyclassify.ir import PROTO_SCTP, PROTO_TCP, PROTO_UDP, PortRange
from pyclassify.kinds.inventory_kinds import InventoryBuilder
from pyclassify.loader import documents_of
from pyclassify.project import Project, build_project
from pyclassify.reference import Flow, FlowEnd
from tests.conftest import CASES
from tests.shared_data import skip_mark

FILE = CASES / "npguard.json"
PROTOCOLS = {"TCP": PROTO_TCP, "UDP": PROTO_UDP, "SCTP": PROTO_SCTP}
FULL = [[1, 65535]]

# Where pyclassify deliberately differs from np-guard, or a case needs what is not modelled.
# ONE place, with the reason; everything else must match.
SKIPPED_LINES = {
    "{ingress-controller}": "Ingress/Route controllers are not modelled (issue 3: skip these lines)",
}
# np-guard treats hostNetwork pods like any pod (policy selects and isolates them); pyclassify
# follows Kubernetes: their traffic is the node's, not subject to pod policy nor matched by pod
# peers. Lines with such a workload on either side are left out of the comparison.
HOST_NETWORK_DIFFERENCE = "hostNetwork workloads are not subject to pod policy in pyclassify"
FINISHED_DIFFERENCE = (
    "np-guard reports the pods of a finished Job (phase Succeeded) as workloads; they have released "
    "their address, and pyclassify, as Calico and Cilium, makes no endpoint of them"
)
KNOWN_DIFFERENCES: dict[str, str] = {
    "anp_test_named_ports_multiple_peers": "its ANP combines a networks peer with a namedPort; the CRD's validation "
    "rule rejects that (pyclassify reports it as an error), np-guard accepts it and skips the named port for IPs",
}

# Some scenarios' NetworkPolicies carry `status: {}`, as a cluster of Kubernetes 1.24-1.27 printed
# them (NetworkPolicyStatus, alpha then, since removed). The API server of the pinned release
# (v1.34.4) refuses that field (strict decoding: unknown field "status"), and so does pyclassify;
# the empty status says nothing, so it is dropped before loading.
NETWORK_POLICY_STATUS = "NetworkPolicy status (Kubernetes 1.24-1.27) is no field of networking.k8s.io/v1 today"


def served_today(obj: dict) -> dict:
    """``obj`` as today's API server takes it (NETWORK_POLICY_STATUS), the items of a List too."""
    if isinstance(obj.get("items"), list) and str(obj.get("kind", "")).endswith("List"):
        return {**obj, "items": [served_today(i) if isinstance(i, dict) else i for i in obj["items"]]}
    if obj.get("kind") in ("NetworkPolicy", None) and obj.get("status") == {}:
        return {k: v for k, v in obj.items() if k != "status"}
    return obj


def _cases():
    if not FILE.exists():
        return [pytest.param(None, marks=skip_mark(FILE, "np-guard's cases"))]
    data = json.loads(FILE.read_text())
    out = []
    for case in data["cases"]:
        marks = [pytest.mark.skip(reason=KNOWN_DIFFERENCES[case["name"]])] if case["name"] in KNOWN_DIFFERENCES else []
        out.append(pytest.param(case, id=case["name"], marks=marks))
    return out


def workload_name(ep: Endpoint) -> str:
    if ep.workload:
        kind, name = ep.workload.split("/", 1)
        return f"{ep.namespace}/{name}[{kind}]"
    return f"{ep.namespace}/{ep.name}[Pod]"


def _boundaries(project: Project, dst: Endpoint | None) -> list[int]:
    points = {1, 65536}
    for policy in project.policy_set.policies:
        for rule in policy.ingress + policy.egress:
            for entity in rule.sources + rule.destinations:
                for pm in entity.ports + entity.not_ports:
                    if isinstance(pm.port, PortRange):
                        points |= {pm.port.first, pm.port.last + 1}
    if dst is not None:
        for cp in dst.ports:
            points |= {cp.port, cp.port + 1}
    return sorted(p for p in points if 1 <= p <= 65536)


def connections(project: Project, src: FlowEnd, dst: FlowEnd, bounds: list[int], evaluate) -> str | dict:
    """``"all"`` or ``{PROTO: [[lo, hi], ...]}`` as npguard.json's ``conns_parsed``."""
    out: dict[str, list[list[int]]] = {}
    for name, proto in PROTOCOLS.items():
        ranges: list[list[int]] = []
        for lo, nxt in zip(bounds, bounds[1:]):
            flow = Flow(src, dst, proto, 40000, lo)
            if evaluate(project.policy_set, project.inventory, flow).allowed:
                if ranges and ranges[-1][1] == lo - 1:
                    ranges[-1][1] = nxt - 1
                else:
                    ranges.append([lo, nxt - 1])
        if ranges:
            out[name] = ranges
    if all(out.get(p) == FULL for p in PROTOCOLS):
        return "all"
    return out


def _parse_peer(text: str) -> dict:
    """A connlist peer, for lines the converter left unparsed."""
    if "[" in text and not text.endswith("[External]"):
        return {"type": "workload"}
    start, _, end = text.removesuffix("[External]").partition("-")
    return {"type": "ip_ranges", "ranges": [{"start": start, "end": end or start}]}


def _parse_conns(text: str) -> str | dict:
    """``All Connections`` or ``SCTP 1-65535,TCP 1-79,81-65535`` -> conns_parsed form."""
    if text == "All Connections":
        return "all"
    out: dict[str, list[list[int]]] = {}
    proto = None
    for token in text.split(","):
        parts = token.split()
        if parts[0] in PROTOCOLS:
            proto, parts = parts[0], parts[1:]
        for rng in parts:
            lo, _, hi = rng.partition("-")
            out.setdefault(proto, []).append([int(lo), int(hi or lo)])
    return out


def _parsed(line: dict) -> dict:
    line = dict(line)
    line.setdefault("src_parsed", _parse_peer(line["src"]))
    line.setdefault("dst_parsed", _parse_peer(line["dst"]))
    line.setdefault("conns_parsed", _parse_conns(line["conns"]))
    return line


def _ip_end(parsed: dict, which: str) -> FlowEnd:
    return FlowEnd(None, ipaddress.ip_address(parsed["ranges"][0][which]))


@pytest.mark.parametrize("case", _cases())
def test_npguard_case(case, evaluate):
    problems = Problems()
    docs = []
    for i, obj in enumerate(case["manifests"]):
        docs += documents_of(served_today(obj), f"{case['name']}[{i}]", problems)
    project = build_project(docs, problems)

    reps: dict[str, Endpoint] = {}
    for ep in project.inventory.pods():
        reps.setdefault(workload_name(ep), ep)

    host_network = {name for name, ep in reps.items() if ep.host_network}  # HOST_NETWORK_DIFFERENCE
    builder = InventoryBuilder(Problems())
    builder.add_all(d for d in docs if d.kind == "Pod")
    finished = {workload_name(ep) for ep, _ in builder.released} - set(reps)  # FINISHED_DIFFERENCE
    expected_pairs: dict[tuple[str, str], object] = {}
    ip_lines = []
    for line in map(_parsed, case["expected"]["connections"]):
        if any(marker in (line["src"], line["dst"]) for marker in SKIPPED_LINES):
            continue
        if (host_network | finished) & {line["src"], line["dst"]}:
            continue
        if line["src_parsed"]["type"] == "workload" and line["dst_parsed"]["type"] == "workload":
            expected_pairs[(line["src"], line["dst"])] = line["conns_parsed"]
        else:
            ip_lines.append(line)

    ours: dict[tuple[str, str], object] = {}
    for s_name, s in reps.items():
        for d_name, d in reps.items():
            if s_name == d_name or host_network & {s_name, d_name}:
                continue
            conns = connections(project, FlowEnd(s), FlowEnd(d), _boundaries(project, d), evaluate)
            if conns:
                ours[(s_name, d_name)] = conns
    assert ours == expected_pairs, [str(p) for p in problems.errors][:5]

    for line in ip_lines:
        for which in ("start", "end"):
            if line["src_parsed"]["type"] == "ip_ranges":
                if ":" in line["src_parsed"]["ranges"][0]["start"]:
                    continue
                src, dst_ep = _ip_end(line["src_parsed"], which), reps[line["dst"]]
                dst = FlowEnd(dst_ep)
            else:
                if ":" in line["dst_parsed"]["ranges"][0]["start"]:
                    continue
                src, dst_ep = FlowEnd(reps[line["src"]]), None
                dst = _ip_end(line["dst_parsed"], which)
            got = connections(project, src, dst, _boundaries(project, dst_ep), evaluate)
            assert got == line["conns_parsed"], (line["src"], line["dst"], which)
