"""Offline questions about a project: one flow (``explain``) and all pod pairs (``matrix``).

The CLI formats what these return; the answers come from the reference evaluator.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from pyclassify.flow import Flow, FlowEnd, Verdict
from pyclassify.inventory import Endpoint
from pyclassify.ir import PROTO_ICMP, PROTO_ICMPV6
from pyclassify.kinds.common import PROTOCOL_NUMBERS, protocol_name
from pyclassify.project import Project
from pyclassify.reference import evaluate


class UnknownEnd(ValueError):
    """A ``--from``/``--to`` that names nothing in the inventory and is not an IP address."""


def parse_protocol(text: str) -> int:
    """``TCP``/``udp``/``ICMPv6``/... or an IP protocol number 0-255."""
    number = PROTOCOL_NUMBERS.get(text.upper())
    if number is not None:
        return number
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"unknown protocol {text!r} (a name like TCP, UDP, SCTP, ICMP, ICMPv6, or 0-255)") from None
    if not 0 <= value <= 255:
        raise ValueError(f"protocol number {value} is outside 0-255")
    return value


def resolve_end(project: Project, text: str) -> FlowEnd:
    """A flow end from what a person types: ``ns/pod``, a workload, a host endpoint name or an IP.

    An IP that no endpoint owns is an outside address (no policy of its own)."""
    endpoint = project.find_endpoint(text)
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if endpoint is None and ip is None:
        raise UnknownEnd(f"{text!r} is not a pod (ns/name), workload, host endpoint or IP address in the inventory")
    return FlowEnd(endpoint, ip)


@dataclass
class Explanation:
    flow: Flow
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        doc = self.verdict.to_json()
        doc["flow"] = flow_json(self.flow)
        return doc


def end_json(end: FlowEnd) -> dict[str, Any]:
    ep = end.endpoint
    return {
        "endpoint": ep.ref if ep is not None else None,
        "kind": ep.kind.value if ep is not None else "outside",
        "ip": str(end.address) if end.address is not None else None,
    }


def flow_json(flow: Flow) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "src": end_json(flow.src),
        "dst": end_json(flow.dst),
        "protocol": protocol_name(flow.protocol),
        "sport": flow.sport,
        "dport": flow.dport,
    }
    if flow.protocol in (PROTO_ICMP, PROTO_ICMPV6):
        doc["icmp_type"] = flow.icmp_type
        doc["icmp_code"] = flow.icmp_code
    return doc


ENGINES = ("native", "reference")


class _Judge:
    """Answers flows with the native engine (compiled once) or the reference evaluator."""

    def __init__(self, project: Project, engine: str, default: str | None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}")
        self.project = project
        self.defaults = {} if default is None else {"default_pod": default, "default_host": default}
        self.native = None
        if engine == "native":
            from pyclassify.engine import NativeEngine

            self.native = NativeEngine(project.policy_set, project.inventory)

    def __call__(self, flow: Flow) -> Verdict:
        if self.native is not None:
            return self.native.evaluate(flow, **self.defaults)
        return evaluate(self.project.policy_set, self.project.inventory, flow, **self.defaults)


def explain(project: Project, src: str, dst: str, protocol: int, dport: int | None,
            sport: int | None = None, icmp_type: int | None = None, icmp_code: int | None = None,
            default: str | None = None, engine: str = "native") -> Explanation:
    flow = Flow(resolve_end(project, src), resolve_end(project, dst), protocol, sport, dport, icmp_type, icmp_code)
    return Explanation(flow, _Judge(project, engine, default)(flow))


@dataclass
class Matrix:
    pods: list[Endpoint]
    protocol: int
    port: int | None
    allowed: list[list[bool]]
    verdicts: list[list[Verdict]]

    def to_json(self) -> dict[str, Any]:
        return {
            "pods": [p.ref for p in self.pods],
            "protocol": protocol_name(self.protocol),
            "port": self.port,
            "matrix": self.allowed,
        }


def matrix(project: Project, protocol: int, port: int | None, default: str | None = None,
           engine: str = "native") -> Matrix:
    """Reachability among every pod (sorted by ``ns/name``): ``allowed[i][j]`` is traffic from
    pod i to pod j. Host-network pods are the node's traffic and are left out."""
    judge = _Judge(project, engine, default)
    pods = sorted((p for p in project.inventory.pods() if not p.host_network), key=lambda p: p.ref)
    verdicts = [[judge(Flow(FlowEnd(a), FlowEnd(b), protocol, None, port)) for b in pods] for a in pods]
    allowed = [[v.allowed for v in row] for row in verdicts]
    return Matrix(pods, protocol, port, allowed, verdicts)
