"""``pyclassify render PATH... --endpoint ns/pod``: the compiled rule tables of one endpoint.

The native engine compiles each endpoint's policy program into classifier tables (per direction,
address family and tier, then its profiles). This prints them as 6-tuples
``(src, sport, dst, dport, protocol, action)`` in evaluation order — as Contiv/VPP renders
Kubernetes policy into ACLs — with, for each, the policy rule it comes from. Reading one stage:
the first tuple matching a packet decides (``Allow``/``Deny``), leaves the tier (``Pass``) or is
recorded and skipped (``Log``); a tier in which nothing matched ends with its default action.
Tuples marked inexact are supersets that the engine confirms against the rule itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyclassify.documents import shown
from pyclassify.engine import NativeEngine
from pyclassify.inventory import Endpoint
from pyclassify.ir import Direction
from pyclassify.kinds.common import protocol_name
from pyclassify.project import Project, load_project


class NoSuchEndpoint(LookupError):
    """The endpoint to render is not in the project."""


@dataclass
class Tuple6:
    src: str
    sport: tuple[int, int]
    dst: str
    dport: tuple[int, int]
    protocol: int | None
    icmp_type: int | None
    icmp_code: int | None
    action: str
    policy: str
    rule: Any
    exact: bool

    def ports_text(self, r: tuple[int, int]) -> str:
        return "*" if r == (0, 65535) else (str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}")

    def protocol_text(self) -> str:
        if self.protocol is None:
            return "ANY"
        text = protocol_name(self.protocol)
        if self.icmp_type is not None:
            text += f" type {self.icmp_type}"
        if self.icmp_code is not None:
            text += f" code {self.icmp_code}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "sport": list(self.sport),
            "dst": self.dst,
            "dport": list(self.dport),
            "protocol": self.protocol,
            "icmp_type": self.icmp_type,
            "icmp_code": self.icmp_code,
            "action": self.action,
            "policy": self.policy,
            "rule": self.rule,
            "exact": self.exact,
        }


@dataclass
class Table:
    direction: str
    family: int
    tier: str | None  # None for a profile
    profile: str | None
    default: str | None  # the tier's default action
    tuples: list[Tuple6] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "family": self.family,
            "tier": self.tier,
            "profile": self.profile,
            "default": self.default,
            "rules": [t.to_json() for t in self.tuples],
        }


def render_tables(project: Project, endpoint: Endpoint, engine: NativeEngine | None = None) -> list[Table]:
    """The compiled tables of ``endpoint``: egress then ingress, IPv4 then IPv6 (the families of
    its addresses), stages in evaluation order."""
    return list(iter_tables(project, endpoint, engine))


def iter_tables(project: Project, endpoint: Endpoint, engine: NativeEngine | None = None) -> Iterator[Table]:
    """``render_tables`` one table at a time: a caller that lets each go holds one direction's
    listing at most (a table's rows are every network times every port of its rules)."""
    engine = engine or NativeEngine(project.policy_set, project.inventory)
    tiers = [t.name for t in project.policy_set.tiers]
    families = sorted({ip.version for ip in endpoint.ips})
    for direction in (Direction.EGRESS, Direction.INGRESS):
        for family in families:
            stages = engine.compiled_listing(endpoint, direction, family)
            while stages:
                tier, profile, default, rules, entries = stages.pop(0)
                table = Table(
                    direction.value,
                    family,
                    None if tier is None else tiers[tier],
                    None if profile is None else project.policy_set.profiles[profile].name,
                    default,
                )
                for src, sport, dst, dport, proto, itype, icode, pos, exact in entries:
                    action, source, rule = rules[pos]
                    ref, label = engine._source(source, rule, direction)
                    table.tuples.append(
                        Tuple6(
                            src, tuple(sport), dst, tuple(dport), proto, itype, icode, action, ref or "", label, exact
                        )
                    )
                del entries
                yield table


def run_render(paths: tuple[str, ...], endpoint_ref: str, as_json: bool, project: Project | None = None) -> str:
    """The tables of ``endpoint_ref`` in ``project`` (default: the manifests under ``paths``)."""
    return ("" if as_json else "\n").join(render_lines(paths, endpoint_ref, as_json, project))


def render_lines(
    paths: tuple[str, ...], endpoint_ref: str, as_json: bool, project: Project | None = None
) -> Iterator[str]:
    """``run_render``'s text a line at a time (with ``as_json``: pieces of the document, a table
    each, to join with nothing between them): printed as it comes, never held whole."""
    project = project if project is not None else load_project(list(paths))
    endpoint = project.find_endpoint(endpoint_ref)
    if endpoint is None:
        raise NoSuchEndpoint(f"no endpoint {shown(endpoint_ref)} in the manifests")
    tables = iter_tables(project, endpoint)
    if as_json:
        # as json.dumps(..., indent=2) prints the whole document, a table at a time (the pieces
        # join with nothing between them)
        yield f'{{\n  "endpoint": {json.dumps(endpoint.ref)},\n  "tables": ['
        count = 0
        for t in tables:
            yield (",\n    " if count else "\n    ") + json.dumps(t.to_json(), indent=2).replace("\n", "\n    ")
            count += 1
        yield "\n  ]\n}" if count else "]\n}"
        return
    yield f"endpoint {endpoint.ref} ({', '.join(str(ip) for ip in endpoint.ips) or 'no IP'})"
    if not endpoint.ips:
        yield "  no address: nothing is compiled (flows by endpoint are interpreted)"
    for t in tables:
        stage = f"tier {t.tier} (default {t.default})" if t.tier is not None else f"profile {t.profile}"
        yield f"{t.direction} IPv{t.family} {stage}:"
        for x in t.tuples:
            mark = "" if x.exact else "  [inexact: confirmed against the rule]"
            yield (
                f"  ({x.src}, {x.ports_text(x.sport)}, {x.dst}, {x.ports_text(x.dport)}, "
                f"{x.protocol_text()}, {x.action})  # {x.policy} rule {x.rule}{mark}"
            )
        if not t.tuples:
            yield "  (no rule applies to this family)"
