"""Which rules traffic uses, and which can never decide (``pyclassify usage``).

With flow records (``--traffic``): every policy and rule in evaluation order with the records,
flows, packets and bytes it decided (``recordreplay``'s weighted by-rule counts), and those that
decided nothing. Without traffic too:

- **shadowed** rules: a rule an earlier rule of the same policy and direction covers (every
  flow it matches, the earlier one matches first and ends evaluation: Allow, Deny, Pass), named
  with that rule. Covering is decided field by field on the IR, soundly: an earlier rule covers
  a later one when each of its constraints is absent or at most as strict (same peer, a port
  set holding the later one's, the same or no protocol); what cannot be compared (two
  different selectors) is taken as not covering, so a rule reported shadowed is one, and some
  shadowed rules may go unreported.
- **redundant** policies: removing the policy changes no verdict anywhere, as ``diff`` decides
  exactly (every group, address region and flow class); named with what decides their flows
  instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pyclassify.diff import decision_text, diff
from pyclassify.inventory import Inventory
from pyclassify.ir import Action, Direction, EntityMatch, NamedPort, Policy, PolicySet, PortMatch, PortRange, Rule

ENDING = (Action.ALLOW, Action.DENY, Action.PASS)
USAGE_OUTPUTS = ("text", "json", "csv", "md", "dot", "svg", "html")


def _port_covers(a: PortMatch, b: PortMatch) -> bool:
    if a.protocol is not None and a.protocol != b.protocol:
        return False
    if a.port is None:
        return True
    if isinstance(a.port, PortRange) and isinstance(b.port, PortRange):
        return a.port.first <= b.port.first and b.port.last <= a.port.last
    return isinstance(a.port, NamedPort) and a.port == b.port


def _ports_cover(a: tuple[PortMatch, ...], b: tuple[PortMatch, ...]) -> bool:
    """Whether every port ``b`` admits, ``a`` admits (empty: any port)."""
    if not a:
        return True
    if not b:
        return False
    return all(any(_port_covers(x, y) for x in a) for y in b)


def _entity_covers(a: EntityMatch, b: EntityMatch) -> bool:
    """Whether every address and port ``b`` matches, ``a`` matches: the same peer (or none)
    and ports that hold ``b``'s."""
    if a.unresolvable is not None or b.unresolvable is not None:
        return False
    peer_a = dataclasses.replace(a, ports=(), not_ports=())
    peer_b = dataclasses.replace(b, ports=(), not_ports=())
    if peer_a != EntityMatch() and peer_a != peer_b:
        return False
    if a.not_ports and a.not_ports != b.not_ports:
        return False
    return _ports_cover(a.ports, b.ports)


def _side_covers(a: tuple[EntityMatch, ...], b: tuple[EntityMatch, ...]) -> bool:
    """``a`` matches any of its entities (empty: anything); covers when each of ``b``'s is
    covered by one of ``a``'s."""
    if not a:
        return True
    if not b:
        return False
    return all(any(_entity_covers(x, y) for x in a) for y in b)


def covers(earlier: Rule, later: Rule) -> bool:
    """Whether ``earlier`` matches every flow ``later`` matches (and so decides it first)."""
    if earlier.action not in ENDING or earlier.http is not None:
        return False
    if earlier.ip_version is not None and earlier.ip_version != later.ip_version:
        return False
    if earlier.protocols is not None and (later.protocols is None or not later.protocols <= earlier.protocols):
        return False
    if earlier.not_protocols and not earlier.not_protocols <= later.not_protocols:
        return False
    if earlier.icmp is not None and earlier.icmp != later.icmp:
        return False
    if earlier.not_icmp is not None and earlier.not_icmp != later.not_icmp:
        return False
    return _side_covers(earlier.sources, later.sources) and _side_covers(earlier.destinations, later.destinations)


@dataclass
class Shadowed:
    policy: str
    direction: str
    rule: str | int
    by: str | int

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "direction": self.direction, "rule": self.rule, "covered_by": self.by}

    def text(self) -> str:
        return f"{self.policy} {self.direction} rule {self.rule}: never matches, rule {self.by} before it covers it"


def shadowed_rules(policy_set: PolicySet) -> list[Shadowed]:
    found = []
    for p in policy_set.policies:
        for direction in (Direction.EGRESS, Direction.INGRESS):
            rules = p.rules(direction)
            for j, later in enumerate(rules):
                for earlier in rules[:j]:
                    if covers(earlier, later):
                        found.append(Shadowed(p.ref, direction.value, later.label, earlier.label))
                        break
    return found


@dataclass
class Redundant:
    policy: str
    instead: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "decided_instead_by": self.instead}

    def text(self) -> str:
        by = f"; what it matches is decided the same by {', '.join(self.instead)}" if self.instead else ""
        return f"{self.policy}: removing it changes no verdict{by}"


def _without(ps: PolicySet, p: Policy) -> PolicySet:
    return dataclasses.replace(ps, policies=tuple(q for q in ps.policies if q is not p))


def redundant_policies(policy_set: PolicySet, inventory: Inventory, default: str | None = None) -> list[Redundant]:
    """The policies whose removal changes no verdict (``diff`` of the set without each), with
    what decides the flows their rules matched once they are gone."""
    found = []
    for p in policy_set.policies:
        if p.tier == "failsafe":
            continue  # the failsafe ports are kept open by design, whatever else allows them
        if not (p.ingress or p.egress):
            continue  # a policy without rules isolates: removing it opens what it closed, or nothing
        result = diff(policy_set, _without(policy_set, p), inventory, default)
        if result.changes:
            continue
        found.append(Redundant(p.ref, _deciders_instead(policy_set, p, inventory, default)))
    return found


def _deciders_instead(policy_set: PolicySet, p: Policy, inventory: Inventory, default: str | None) -> list[str]:
    """For a redundant policy: what decides the flows its rules match. Those flows are found by
    judging one flow per (group, group, flow class) with the policy alone in force, where one
    of its rules decides; what decides each of them with every other policy in force is named."""
    import numpy as np

    from pyclassify import reachability as reach
    from pyclassify.engine import EngineState

    state = EngineState()
    alone = state.update(dataclasses.replace(policy_set, policies=(p,)), inventory)
    everything = state.update(_without(policy_set, p), inventory)
    engines = (alone, everything)
    groups = reach.endpoint_groups(engines, reach.table_endpoints(inventory)) + reach.outside_groups(engines)
    space = reach.FlowSpace.build(engines)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    names: set[str] = set()
    fam = reach.pair_families(groups, groups)
    for family in (4, 6):
        idx = np.flatnonzero(fam.reshape(-1) == family)
        classes = space.classes[family]
        if not len(idx) or not classes:
            continue
        si, di = np.divmod(idx, len(groups))
        a = reach.judge_pairs(alone, groups, groups, si, di, classes, family, defaults)
        b = reach.judge_pairs(everything, groups, groups, si, di, classes, family, defaults)
        for name, direction in (("egress", Direction.EGRESS), ("ingress", Direction.INGRESS)):
            hits = np.argwhere((a[name]["present"] == 1) & (a[name]["reason"] == 0))
            for row, col in hits:
                d = alone.side_decision(a[row, col][name], direction)
                if d is None or d.policy != p.ref:
                    continue
                names.add(f"{direction.value}: {decision_text(everything.side_decision(b[row, col][name], direction))}")
                if len(names) >= 5:
                    return sorted(names)
    return sorted(names)


def rule_rows(
    policy_set: PolicySet, by_rule: list[dict[str, Any]] | None, logged: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every rule of every policy in evaluation order, with what it decided in ``by_rule``
    (``recordreplay.rule_rows``; None: no traffic given), and for Log rules what they
    logged (``recordreplay.logged_rule_rows``)."""
    counts: dict[tuple[Any, ...], dict[str, int]] = {}
    for row in [*(by_rule or ()), *(logged or ())]:
        if row.get("reason", "rule") != "rule":
            continue
        key = (row["direction"], row["policy"], str(row["rule"]))
        acc = counts.setdefault(key, {"records": 0, "flows": 0, "packets": 0, "bytes": 0})
        for m in acc:
            acc[m] += row[m]
    rows = []
    for p in policy_set.policies:
        for direction in (Direction.EGRESS, Direction.INGRESS):
            for r in p.rules(direction):
                row = {
                    "tier": p.tier,
                    "policy": p.ref,
                    "direction": direction.value,
                    "rule": r.label,
                    "action": r.action.value,
                }
                if by_rule is not None:
                    got = counts.get((direction.value, p.ref, str(r.label)))
                    row.update(got or {"records": 0, "flows": 0, "packets": 0, "bytes": 0})
                    row["counted"] = r.action is not Action.LOG or logged is not None
                rows.append(row)
    return rows


def end_of_tier_rows(by_rule: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in by_rule if r["reason"] != "rule"]


def usage_doc(
    project: Any,
    traffic: list[str],
    traffic_format: str | None = None,
    default: str | None = None,
    redundant: bool = True,
    scheduler: str | None = None,
    workers: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``usage --json``'s document of ``project`` over the flow records of ``traffic`` (none:
    nothing counted), and the replay summary the counts came from (None without traffic).
    Raises ``RecordError`` when a file cannot be read at all, ``dask_replay.ClusterError``
    when the cluster asked for cannot be used."""
    summary = traffic_counts(project, traffic, traffic_format, default, scheduler, workers) if traffic else None
    return usage_document(project.policy_set, project.inventory, summary, default, redundant), summary


def traffic_counts(
    project: Any,
    traffic: list[str],
    traffic_format: str | None = None,
    default: str | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """The flow records judged under ``project``'s policy, with what each rule decided and
    logged: the replay summary (``RecordReplay.summary_json``); on the Dask cluster of
    ``scheduler`` (or a local one of ``workers`` processes) when given."""
    from pyclassify.engine import NativeEngine
    from pyclassify.recordreplay import RecordReplay, summary_json

    engine = NativeEngine(project.policy_set, project.inventory)
    if scheduler is not None or workers is not None:
        from pyclassify import dask_replay

        summary, _ = dask_replay.run(
            engine,
            list(traffic),
            scheduler=scheduler,
            workers=workers,
            format=traffic_format,
            default=default,
            logs=True,
        )
        return summary_json(summary, True)
    replay = RecordReplay(engine, default=default, format=traffic_format, logs=True)
    replay.run(list(traffic))
    return replay.summary_json()


def usage_document(
    policy_set: PolicySet,
    inventory: Inventory,
    summary: dict[str, Any] | None,
    default: str | None = None,
    redundant: bool = True,
) -> dict[str, Any]:
    """``usage --json``'s document from what the records' judge counted (``summary``: the
    replay summary's ``by_rule``, ``logged``, totals and files; None: no traffic)."""
    by_rule = None if summary is None else summary["by_rule"]
    rows = rule_rows(policy_set, by_rule, summary["logged"] if summary is not None else None)
    shadowed = shadowed_rules(policy_set)
    found = redundant_policies(policy_set, inventory, default) if redundant else None
    doc = {
        "rules": rows,
        "other_decisions": end_of_tier_rows(by_rule) if by_rule is not None else None,
        "unused": [r for r in rows if by_rule is not None and r["counted"] and r["flows"] == 0 and r["records"] == 0],
        "shadowed": [s.to_json() for s in shadowed],
        "redundant": None if found is None else [r.to_json() for r in found],
        "traffic": None
        if summary is None
        else {k: summary[k] for k in ("records", "flows", "packets", "bytes", "files")},
    }
    return doc
