"""What a policy change does before it is applied: every change in reachability between two
policy sets over one inventory, with the rule responsible (``pyclassify diff``).

Exact at cluster size without judging every pod pair:

- endpoints are grouped so that both policy sets judge every member of a group alike (same
  identity and address class under the old and the new engine, ``pyclassify.reachability``);
  outside addresses into regions both class alike; flows into the port (and ICMP type, and
  protocol) classes some rule of either set distinguishes;
- a side decision (one endpoint's egress or ingress) depends only on the policies that apply to
  that endpoint in that direction, in order. Where no changed policy (old or new version) applies
  to a group in a direction, and tiers and profiles are unchanged, that side decides every flow
  as before. So only flows with an affected subject at one end are judged, under both sets, and
  every verdict that differs is reported. A tier whose order or default action changed makes
  every policy of it a changed one; a changed profile, every endpoint carrying it (and one whose
  ``labelsToApply`` changed, everything: selectors read those labels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify import reachability as reach
from pyclassify.engine import EngineState, NativeEngine
from pyclassify.flow import Decision
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction, Policy, PolicySet
from pyclassify.kinds.common import ICMP_PROTOCOLS, protocol_name
from pyclassify.reference import policy_applies
from pyclassify.spec_builder import policy_key


def _content(p: Policy) -> Policy:
    """A policy without where it was read: moving a policy in its file changes nothing."""
    return dataclasses.replace(p, source=None)


def changed_policies(old: PolicySet, new: PolicySet) -> tuple[list[Policy | None], list[Policy | None]]:
    """The policies whose content differs, as (old versions, new versions) in key order (None
    where the policy is only on the other side)."""
    before = {policy_key(p): p for p in old.policies}
    after = {policy_key(p): p for p in new.policies}
    olds: list[Policy | None] = []
    news: list[Policy | None] = []
    for key in sorted(set(before) | set(after), key=repr):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None and _content(a) == _content(b):
            continue
        olds.append(a)
        news.append(b)
    return olds, news


@dataclass
class Side:
    """One verdict of a flow class: allowed or not, and each direction's decision."""

    allowed: bool
    egress: Decision | None
    ingress: Decision | None

    def deciding(self) -> tuple[Direction, Decision | None]:
        """The direction that denied (egress first), or for an allowed flow egress when it was
        judged, else ingress."""
        for direction, d in ((Direction.EGRESS, self.egress), (Direction.INGRESS, self.ingress)):
            if d is not None and d.verdict == "deny":
                return direction, d
        if self.egress is not None:
            return Direction.EGRESS, self.egress
        return Direction.INGRESS, self.ingress

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "allow" if self.allowed else "deny",
            "egress": self.egress.to_json() if self.egress else None,
            "ingress": self.ingress.to_json() if self.ingress else None,
        }


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(set(ranges)):
        if merged and merged[-1][1] + 1 >= lo:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _ranges_text(ranges: list[tuple[int, int]]) -> str:
    if ranges == [(0, 65535)]:
        return "any port"
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass
class Change:
    """Flows from one group to another whose verdict changed the same way, for the same
    reasons: the flow classes (protocols, port ranges, ICMP types) they cover."""

    src: reach.Group
    dst: reach.Group
    classes: list[reach.FlowClass]
    old: Side
    new: Side

    @property
    def opened(self) -> bool:
        return self.new.allowed

    def flows(self) -> list[dict[str, Any]]:
        """Per protocol: the destination port ranges (merged), source port ranges where a rule
        distinguishes them, or the ICMP types and codes."""
        by_proto: dict[int, list[reach.FlowClass]] = {}
        for c in self.classes:
            by_proto.setdefault(c.protocol, []).append(c)
        order = {6: 0, 17: 1, 132: 2, 136: 3, 1: 4, 58: 5}
        out = []
        for proto, classes in sorted(by_proto.items(), key=lambda kv: (order.get(kv[0], 6), kv[0] == -1, kv[0])):
            doc: dict[str, Any] = {
                "protocol": "other" if proto == -1 else protocol_name(proto),
                "ports": None,
                "sports": None,
                "icmp": None,
            }
            dports = [c.dport for c in classes if c.dport is not None]
            if dports:
                doc["ports"] = [list(r) for r in _merge(dports)]
            sports = [c.sport for c in classes if c.sport is not None and c.sport != (reach.EPHEMERAL,) * 2]
            if sports:
                doc["sports"] = [list(r) for r in _merge(sports)]
            if proto in ICMP_PROTOCOLS:
                doc["icmp"] = [{"type": c.icmp_type, "code": c.icmp_code} for c in classes]
            out.append(doc)
        return out

    def flow_text(self, icmp_named: frozenset[int] = ICMP_PROTOCOLS) -> str:
        """The flows in words. ``icmp_named``: the ICMP protocols (1, 58) some rule names a type
        of; for the others the only class is every type, said as the protocol alone."""
        parts = []
        for doc in self.flows():
            name = "other protocols" if doc["protocol"] == "other" else doc["protocol"]
            if doc["ports"] is not None:
                text = f"{name} {_ranges_text([tuple(r) for r in doc['ports']])}"
                if doc["sports"] is not None:
                    text += f" from ports {_ranges_text([tuple(r) for r in doc['sports']])}"
            elif doc["icmp"] is not None:
                icmp = doc["icmp"]
                number = 1 if doc["protocol"] == "ICMP" else 58
                types = []
                for c in icmp:
                    if c["type"] is None and number not in icmp_named:
                        continue  # no rule names a type: the one class is every type
                    if c["type"] is None:
                        types.append("other types")
                    elif c["code"] is None:
                        coded = any(x["type"] == c["type"] and x["code"] is not None for x in icmp)
                        types.append(f"type {c['type']}" + (" (other codes)" if coded else ""))
                    else:
                        types.append(f"type {c['type']} code {c['code']}")
                text = f"{name} " + ", ".join(types) if types else name
            else:
                text = name
            parts.append(text)
        return "; ".join(parts)


def decision_text(d: Decision | None) -> str:
    if d is None:
        return "no policy of that end (allow)"
    tier = f" in tier {d.tier}" if d.tier and d.tier != "default" else ""
    if d.reason == "rule":
        return f"{d.policy} rule {d.rule}{tier}"
    if d.reason == "end-of-tier":
        return f"the end of tier {d.tier} ({d.verdict}: {d.isolation()})"
    if d.reason == "profile":
        return f"{d.policy} rule {d.rule}" if d.policy else f"its profiles (default {d.verdict})"
    return f"the default {d.verdict} (every applicable tier passed)"


@dataclass
class Diff:
    old_paths: list[str]
    new_paths: list[str]
    changes: list[Change]
    keys: set[str]
    policies_changed: list[str]
    groups: int
    classes: int
    judged: int
    whole: bool  # every group was a subject (a profile's labels changed)
    notes: list[str] = field(default_factory=list)
    space: reach.FlowSpace | None = None
    #: endpoint groups of both address families: each group's text says its family
    dual: bool = False

    def change_text(self, c: Change) -> str:
        verb = ("denied", "allowed")
        text = lambda g: reach.group_text(g, self.keys, self.dual)  # noqa: E731
        direction = (c.new if c.new.allowed is False else c.old).deciding()[0]
        new_d = c.new.egress if direction is Direction.EGRESS else c.new.ingress
        old_d = c.old.egress if direction is Direction.EGRESS else c.old.ingress
        return (
            f"{text(c.src)} → {text(c.dst)}, {c.flow_text(self.icmp_named())}: "
            f"{verb[c.old.allowed]} → {verb[c.new.allowed]}, by {decision_text(new_d)} "
            f"(was: {decision_text(old_d)})"
        )

    def icmp_named(self) -> frozenset[int]:
        """The ICMP protocols (1, 58) of which some rule of either set names a type."""
        if self.space is None:
            return ICMP_PROTOCOLS
        return frozenset(
            c.protocol
            for classes in self.space.classes.values()
            for c in classes
            if c.protocol in ICMP_PROTOCOLS and c.icmp_type is not None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old_paths,
            "new": self.new_paths,
            "changed": bool(self.changes),
            "policies_changed": self.policies_changed,
            "changes": [
                {
                    "from": reach.group_json(c.src, self.keys),
                    "to": reach.group_json(c.dst, self.keys),
                    "flows": c.flows(),
                    "was": c.old.to_json(),
                    "now": c.new.to_json(),
                    "text": self.change_text(c),
                }
                for c in self.changes
            ],
            "summary": {
                "changes": len(self.changes),
                "opened": sum(c.opened for c in self.changes),
                "closed": sum(not c.opened for c in self.changes),
                "groups": self.groups,
                "flow_classes": self.classes,
                "flows_judged": self.judged,
                "every_subject": self.whole,
            },
            "notes": self.notes,
        }


def _affected(
    groups: Sequence[reach.Group], policies: Sequence[Policy], profiles: set[str], inventory: Inventory
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which groups one of ``policies`` applies to, in egress and in ingress; a group carrying
    one of ``profiles`` in both."""
    egress = np.zeros(len(groups), bool)
    ingress = np.zeros(len(groups), bool)
    for k, g in enumerate(groups):
        if g.outside:
            continue
        if profiles and profiles.intersection(g.endpoint.profiles):  # type: ignore[union-attr]
            egress[k] = ingress[k] = True
            continue
        for p in policies:
            if not egress[k] and policy_applies(p, g.endpoint, inventory, Direction.EGRESS):  # type: ignore[arg-type]
                egress[k] = True
            if not ingress[k] and policy_applies(p, g.endpoint, inventory, Direction.INGRESS):  # type: ignore[arg-type]
                ingress[k] = True
            if egress[k] and ingress[k]:
                break
    return egress, ingress


def subjects_changed(
    old_ps: PolicySet, new_ps: PolicySet, olds: list[Policy | None], news: list[Policy | None]
) -> tuple[list[Policy], set[str], bool]:
    """What can change a side decision, and of whom: the policies (either version) that changed
    or sit in a tier that changed (its order or default action), the profiles that changed,
    and whether everything must be compared (a profile's ``labelsToApply`` changed: labels every
    selector may read). ``olds``/``news``: ``changed_policies``."""
    before_tiers = {t.name: t for t in old_ps.tiers}
    after_tiers = {t.name: t for t in new_ps.tiers}
    tiers = {n for n in before_tiers.keys() | after_tiers.keys() if before_tiers.get(n) != after_tiers.get(n)}
    policies = [p for p in (*olds, *news) if p is not None]
    policies += [p for ps in (old_ps, new_ps) for p in ps.policies if p.tier in tiers]
    before = {p.name: p for p in old_ps.profiles}
    after = {p.name: p for p in new_ps.profiles}
    profiles = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
    labels = lambda p: () if p is None else p.labels_to_apply  # noqa: E731
    whole = any(labels(before.get(n)) != labels(after.get(n)) for n in profiles)
    unique = list({id(p): p for p in policies}.values())
    return unique, profiles, whole


def diff(
    old_ps: PolicySet,
    new_ps: PolicySet,
    inventory: Inventory,
    default: str | None = None,
    old_paths: Sequence[str] = (),
    new_paths: Sequence[str] = (),
) -> Diff:
    """Every change in reachability from ``old_ps`` to ``new_ps`` over ``inventory``."""
    state = EngineState()
    old = state.update(old_ps, inventory)
    new = state.update(new_ps, inventory)  # a delta: the changed policies only
    engines = (old, new)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    olds, news = changed_policies(old_ps, new_ps)
    subjects, profiles, whole = subjects_changed(old_ps, new_ps, olds, news)
    endpoint_groups = reach.endpoint_groups(engines, reach.table_endpoints(inventory))
    groups = endpoint_groups + reach.outside_groups(engines)
    space = reach.FlowSpace.build(engines)
    keys = reach.selector_keys([old_ps, new_ps])
    changed_refs = sorted({p.ref for p in (*olds, *news) if p is not None})
    if whole:
        egress = ingress = np.array([not g.outside for g in groups], bool)
    else:
        egress, ingress = _affected(groups, subjects, profiles, inventory)
    fam = reach.pair_families(groups, groups)
    wanted = (egress[:, None] | ingress[None, :]) & (fam >= 0)
    raw: dict[tuple, list[reach.FlowClass]] = {}
    sides: dict[tuple, Side] = {}
    judged = 0
    decisions: dict[tuple, Decision | None] = {}

    def side(engine: NativeEngine, rec: Any, src: reach.Group, dst: reach.Group) -> Side:
        out = []
        for direction, name, group in ((Direction.EGRESS, "egress", src), (Direction.INGRESS, "ingress", dst)):
            s = rec[name]
            # the subject names the policies that isolate it at a tier's end
            key = (id(engine), direction, s.tobytes(), id(group.endpoint))
            if key not in decisions:
                decisions[key] = engine.side_decision(s, direction, group.endpoint)
            out.append(decisions[key])
        return Side(bool(rec["allow"]), out[0], out[1])

    for family in (4, 6, 0):
        idx = np.flatnonzero(wanted & (fam == family))
        classes = space.classes[family or 4]
        if not len(idx) or not classes:
            continue
        step = max(1, reach.CHUNK // len(classes))
        for at in range(0, len(idx), step):
            part = idx[at : at + step]
            si, di = np.divmod(part, len(groups))
            a = reach.judge_pairs(old, groups, groups, si, di, classes, family or None, defaults)
            b = reach.judge_pairs(new, groups, groups, si, di, classes, family or None, defaults)
            judged += 2 * a.size
            for row, col in np.argwhere(a["allow"] != b["allow"]):
                src, dst = groups[si[row]], groups[di[row]]
                s_old, s_new = side(old, a[row, col], src, dst), side(new, b[row, col], src, dst)
                fc = classes[col]
                key = (int(si[row]), int(di[row]), *_change_key(s_old, s_new))
                raw.setdefault(key, []).append(fc)
                sides.setdefault(key, (s_old, s_new))  # type: ignore[arg-type]
    changes = [Change(groups[k[0]], groups[k[1]], fcs, *sides[k]) for k, fcs in raw.items()]  # type: ignore[misc]
    changes.sort(
        key=lambda c: (
            c.src.outside,
            reach.group_text(c.src, keys),
            c.src.family or 0,
            c.dst.outside,
            reach.group_text(c.dst, keys),
            c.dst.family or 0,
            c.opened,
        )
    )
    notes = []
    if whole:
        notes.append("a profile's labelsToApply changed: every endpoint's verdicts were compared")
    return Diff(
        list(old_paths),
        list(new_paths),
        changes,
        keys,
        changed_refs,
        len(groups),
        sum(len(v) for v in space.classes.values()),
        judged,
        whole,
        notes,
        space,
        reach.dual_stack(endpoint_groups),
    )


def _change_key(old: Side, new: Side) -> tuple:
    """What makes two flow classes one change: the same verdicts, and the same decisions in the
    direction that speaks (the one that denies)."""
    direction = (new if not new.allowed else old).deciding()[0]

    def d(s: Side) -> tuple:
        x = s.egress if direction is Direction.EGRESS else s.ingress
        return () if x is None else (x.verdict, x.tier, x.policy, x.rule, x.reason)

    return (old.allowed, new.allowed, direction, d(old), d(new))
