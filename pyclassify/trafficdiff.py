"""Which observed connections a policy change would flip (``pyclassify diff OLD... --against
NEW... --traffic FILE...``).

Every flow record is judged under the old and the new policy set, a batch at a time, in two
native calls; records whose verdicts differ are aggregated by (source group, destination group,
protocol, port, the decisions before and after) with their records, flows, packets, bytes and
time range. Groups are ``diff``'s: endpoints policy cannot tell apart under either set
(``reachability.endpoint_groups``), outside addresses by the region both sets class alike.
Exact by construction: each record's own two verdicts decide whether and where it is counted
(``tests/test_trafficdiff.py`` holds it to judging every record alone, under both sets).
Changes equal as shown are one, with their first records in file order, so the diffs of files
judged apart merge into one run's (``TrafficDiff.merge``; ``pyclassify.dask_replay``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import netaddr
import numpy as np
import numpy.typing as npt

from pyclassify import reachability as reach
from pyclassify._engine import RecordJudge
from pyclassify.batch import HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.diff import Side, changed_policies, decision_text
from pyclassify.engine import EngineState, NativeEngine
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction, PolicySet
from pyclassify.kinds.common import ICMP_PROTOCOLS, protocol_name
from pyclassify.recordreplay import (
    RecordSummary,
    logged_rule_rows,
    measures_json,
    named_counts,
    new_judge,
    rule_rows,
)
from pyclassify.records import FileReport, RecordReader, addr16, address_text
from pyclassify.services import ServiceMap

OUTSIDE = -1  # group index of an outside address no region holds (none: regions cover all)
CHANGE_EXAMPLES = 3  # records shown per change: its first ones, in file order


@dataclass
class ObservedChange:
    """Observed connections from one group to another, on one protocol and port, whose verdict
    the change flips the same way, for the same reasons."""

    src: reach.Group
    dst: reach.Group
    protocol: int
    port: int | None  # destination port; ICMP: the type; None: no port
    old: Side
    new: Side
    measures: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    first_ns: int = 0
    last_ns: int = 0
    examples: list[str] = field(default_factory=list)
    #: the change's first records as (file, position, text), file the index among the run's
    #: files: ``examples`` are their texts
    found: list[tuple[int, int, str]] = field(default_factory=list)

    def key(self, keys: set[str]) -> tuple:
        """What the change is, as it is shown: changes equal in this are one (however their
        groups and decisions were numbered by the engines that found them)."""
        return (
            json.dumps(reach.group_json(self.src, keys), sort_keys=True, default=str),
            json.dumps(reach.group_json(self.dst, keys), sort_keys=True, default=str),
            self.protocol,
            -1 if self.port is None else self.port,
            json.dumps(self.old.to_json(), sort_keys=True),
            json.dumps(self.new.to_json(), sort_keys=True),
        )

    def add(self, other: ObservedChange, file_offset: int = 0) -> None:
        """``other``'s records (found in files numbered from ``file_offset``) counted in this one."""
        for m in range(4):
            self.measures[m] += other.measures[m]
        if other.first_ns:
            self.first_ns = other.first_ns if self.first_ns == 0 else min(self.first_ns, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)
        self.found = sorted([*self.found, *((f + file_offset, p, t) for f, p, t in other.found)])[:CHANGE_EXAMPLES]
        self.examples = [t for _, _, t in self.found]

    @property
    def closed(self) -> bool:
        return self.old.allowed and not self.new.allowed

    def flow_text(self) -> str:
        name = protocol_name(self.protocol)
        if self.port is None:
            return name
        return f"{name} type {self.port}" if self.protocol in ICMP_PROTOCOLS else f"{name} {self.port}"


def _time(ns: int) -> str | None:
    if not ns:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class TrafficDiff:
    changes: list[ObservedChange]
    keys: set[str]
    policies_changed: list[str]
    totals: list[int]
    unplaced: list[int]
    files: list[FileReport]
    seconds: float = 0.0
    decisions: int = 0  # distinct record keys judged, each under both sets
    #: with ``rule_usage``: what each rule of the old set decided in the same records, as
    #: ``RecordReplay.summary_json`` gives it (``by_rule``, ``logged``, totals, files, problems)
    usage: dict[str, Any] | None = None
    #: ``usage``'s sums, in the form that merges (``RecordSummary``: totals, rules, files)
    usage_summary: RecordSummary | None = None

    def merge(self, later: TrafficDiff) -> TrafficDiff:
        """This diff and that of the files after these, as one (neither is changed): changes
        equal as shown add up, each keeping its first records in file order; rule usage sums."""
        changes: dict[tuple, ObservedChange] = {}
        for part, offset in ((self, 0), (later, len(self.files))):
            for c in part.changes:
                k = c.key(self.keys)
                if k not in changes:
                    changes[k] = ObservedChange(c.src, c.dst, c.protocol, c.port, c.old, c.new)
                changes[k].add(c, offset)
        merged = TrafficDiff(
            list(changes.values()),
            self.keys | later.keys,
            self.policies_changed,
            [a + b for a, b in zip(self.totals, later.totals)],
            [a + b for a, b in zip(self.unplaced, later.unplaced)],
            [*self.files, *later.files],
            max(self.seconds, later.seconds),
            self.decisions + later.decisions,
        )
        if self.usage_summary is not None and later.usage_summary is not None:
            merged.usage_summary = self.usage_summary.merge(later.usage_summary)
            merged.usage = usage_json(merged.usage_summary)
        merged.order()
        return merged

    def order(self) -> None:
        """Closing changes first, then by flows and records; ties by what the change is."""
        self.changes.sort(key=lambda ch: (not ch.closed, -ch.measures[1], -ch.measures[0], ch.key(self.keys)))

    def change_text(self, c: ObservedChange) -> str:
        verb = ("denied", "allowed")
        direction = (c.new if not c.new.allowed else c.old).deciding()[0]
        new_d = c.new.egress if direction is Direction.EGRESS else c.new.ingress
        old_d = c.old.egress if direction is Direction.EGRESS else c.old.ingress
        m = measures_json(c.measures)
        seen = f", seen {_time(c.first_ns)} to {_time(c.last_ns)}" if c.first_ns else ""
        return (
            f"{reach.group_text(c.src, self.keys)} → {reach.group_text(c.dst, self.keys)}, {c.flow_text()}: "
            f"{verb[c.old.allowed]} → {verb[c.new.allowed]}, by {decision_text(new_d)} "
            f"(was: {decision_text(old_d)}); observed {m['flows']:,} flows, {m['packets']:,} packets, "
            f"{m['bytes']:,} bytes in {m['records']:,} records{seen}"
        )

    def to_json(self) -> dict[str, Any]:
        closed = [c for c in self.changes if c.closed]
        return {
            "policies_changed": self.policies_changed,
            "changed": bool(self.changes),
            "changes": [
                {
                    "from": reach.group_json(c.src, self.keys),
                    "to": reach.group_json(c.dst, self.keys),
                    "protocol": protocol_name(c.protocol),
                    "port": c.port if c.protocol not in ICMP_PROTOCOLS else None,
                    "icmp_type": c.port if c.protocol in ICMP_PROTOCOLS else None,
                    **measures_json(c.measures),
                    "first": _time(c.first_ns),
                    "last": _time(c.last_ns),
                    "was": c.old.to_json(),
                    "now": c.new.to_json(),
                    "examples": c.examples,
                    "text": self.change_text(c),
                }
                for c in self.changes
            ],
            "summary": {
                "changes": len(self.changes),
                "closed": len(closed),
                "opened": len(self.changes) - len(closed),
                "closed_flows": sum(c.measures[1] for c in closed),
                "opened_flows": sum(c.measures[1] for c in self.changes if not c.closed),
                "observed": measures_json(self.totals),
                "not_judged": measures_json(self.unplaced),
                "seconds": round(self.seconds, 6),
                "decisions": self.decisions,
            },
            "files": [f.to_json() for f in self.files],
        }


_MIX = np.uint64(0xC2B2AE3D27D4EB4F)


def _address_key(addrs: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """64-bit keys of 16-byte addresses (IPv4 mapped: the low word alone tells them apart)."""
    words = np.ascontiguousarray(addrs).view(np.uint64).reshape(-1, 2)
    with np.errstate(over="ignore"):
        return words[:, 0] * _MIX ^ words[:, 1]


class _Grouper:
    """Addresses to ``diff``'s groups, a batch at a time: endpoint addresses through a sorted
    key array, outside addresses once per distinct address through the regions."""

    def __init__(self, engines: Sequence[NativeEngine]) -> None:
        inventory = engines[0].inventory
        self.groups = reach.endpoint_groups(engines, reach.table_endpoints(inventory))
        self.outside = reach.outside_groups(engines)
        keys, ids = [], []
        for k, g in enumerate(self.groups):
            for _, ip in g.members:
                if ip is not None:
                    keys.append(addr16(ip))
                    ids.append(k)
        arr = np.frombuffer(b"".join(keys), np.uint8).reshape(-1, 16) if keys else np.zeros((0, 16), np.uint8)
        k64 = _address_key(arr)
        order = np.argsort(k64, kind="stable")
        self.keys, self.ids = k64[order], np.array(ids, dtype=np.int64)[order]
        self._sets = [(g, netaddr.IPSet(g.cidrs) - netaddr.IPSet(g.excluded)) for g in self.outside]
        self._outside: dict[int, int] = {}

    def of(self, addrs: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Per address, its group's index: endpoint groups from 0, outside regions after them."""
        k = _address_key(addrs)
        at = np.searchsorted(self.keys, k).clip(0, max(len(self.keys) - 1, 0))
        found = (self.keys[at] == k) if len(self.keys) else np.zeros(len(k), bool)
        out = np.where(found, self.ids[at] if len(self.ids) else 0, OUTSIDE).astype(np.int64)
        missing = np.flatnonzero(~found)
        if len(missing):
            uniq, first, inv = np.unique(k[missing], return_index=True, return_inverse=True)
            mapped = np.empty(len(uniq), np.int64)
            for j, (key, i) in enumerate(zip(uniq.tolist(), first.tolist())):
                g = self._outside.get(key)
                if g is None:
                    g = self._outside[key] = self._region(address_text(addrs[missing[i]]))
                mapped[j] = g
            out[missing] = mapped[inv.reshape(-1)]
        return out

    def _region(self, text: str) -> int:
        ip = netaddr.IPAddress(text)
        for k, (_, s) in enumerate(self._sets):
            if ip in s:
                return len(self.groups) + k
        return OUTSIDE

    def group(self, index: int) -> reach.Group:
        if index == OUTSIDE:
            return reach.Group(None, None, None, cidrs=["(no region)"])
        if index < len(self.groups):
            return self.groups[index]
        return self.outside[index - len(self.groups)]


def _decisions(verdict: Any) -> tuple[int, bytes, bytes]:
    """A verdict record's decisions as a key: allowed, and each side from ``present`` to ``rule``."""
    return int(verdict["allow"]), verdict["egress"].tobytes()[:16], verdict["ingress"].tobytes()[:16]


def usage_json(s: RecordSummary) -> dict[str, Any]:
    """What each rule of the old set decided, as ``RecordReplay.summary_json`` gives it
    (``by_rule``, ``logged``, totals, files, problems)."""
    return {
        **measures_json(s.totals),
        "by_rule": rule_rows(s.by_rule),
        "logged": logged_rule_rows(s.logged),
        "files": [f.to_json() for f in s.files],
        "problems": sum(sum(f.problems.values()) for f in s.files),
    }


def merge_diffs(*parts: TrafficDiff) -> TrafficDiff:
    """The diffs of consecutive parts of the input, in order, as one."""
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


class DiffEngines:
    """The two engines of a diff and its groups: built once, used for any number of files."""

    def __init__(self, old_ps: PolicySet, new_ps: PolicySet, inventory: Inventory) -> None:
        state = EngineState()
        self.old_ps, self.new_ps, self.inventory = old_ps, new_ps, inventory
        self.old = state.update(old_ps, inventory)
        self.new = state.update(new_ps, inventory)
        self.grouper = _Grouper((self.old, self.new))
        self.services = ServiceMap(inventory)


def traffic_diff(
    old_ps: PolicySet,
    new_ps: PolicySet,
    inventory: Inventory,
    paths: list[str],
    format: str | None = None,
    default: str | None = None,
    rule_usage: bool = False,
    engines: DiffEngines | None = None,
    names: list[str] | None = None,
    judge: RecordJudge | None = None,
) -> TrafficDiff:
    """Every observed connection of ``paths`` whose verdict ``new_ps`` flips; with
    ``rule_usage``, also what each rule of ``old_ps`` decided (the judge counts by the first
    set's decisions): one read of the records for both. ``engines``: those of the two sets,
    built before; ``names``: what reports call the files, when not their paths; ``judge``: one
    ``new_judge`` made of ``engines`` (with this default and ``rule_usage`` as its ``logs``),
    started over and used here."""
    import time

    started = time.perf_counter()
    if engines is None:
        engines = DiffEngines(old_ps, new_ps, inventory)
    old, new, grouper = engines.old, engines.new, engines.grouper
    reader = RecordReader(paths, inventory, format, names)
    reader.prepare()
    if judge is None:
        judge = new_judge([old, new], default, engines.services, logs=rule_usage)
    else:
        judge.restart()
    for _ in reader.judged(judge):
        pass
    judge.fold()
    totals, _, _, unplaced, _, _ = judge.measures()
    found: dict[tuple[Any, ...], ObservedChange] = {}
    decisions: dict[tuple[Any, ...], Any] = {}

    def side(engine: NativeEngine, rec: Any) -> Side:
        got = []
        for direction, name in ((Direction.EGRESS, "egress"), (Direction.INGRESS, "ingress")):
            key = (id(engine), name, rec[name].tobytes())
            if key not in decisions:
                decisions[key] = engine.side_decision(rec[name], direction)
            got.append(decisions[key])
        return Side(bool(rec["allow"]), got[0], got[1])

    flipped = judge.flipped()
    if flipped:
        # one row per distinct flipped key (never per record): grouped with numpy
        h = np.frombuffer(b"".join(f[0] for f in flipped), HEADER_DTYPE)
        a = np.frombuffer(b"".join(f[1] for f in flipped), VERDICT_DTYPE)
        b = np.frombuffer(b"".join(f[2] for f in flipped), VERDICT_DTYPE)
        proto = h["protocol"].astype(np.int64)
        port = np.where(
            h["flags"] & 32,
            h["dport"].astype(np.int64),
            np.where(np.isin(proto, sorted(ICMP_PROTOCOLS)), h["icmp_type"].astype(np.int64), -1),
        )
        src_g, dst_g = grouper.of(h["src_addr"]), grouper.of(h["dst_addr"])
        for i, (_, _, _, measures, first_ns, last_ns, examples) in enumerate(flipped):
            old_side, new_side = side(old, a[i]), side(new, b[i])
            key = (int(src_g[i]), int(dst_g[i]), int(proto[i]), int(port[i]), _decisions(a[i]), _decisions(b[i]))
            change = found.get(key)
            if change is None:
                p = int(port[i])
                change = found[key] = ObservedChange(
                    grouper.group(int(src_g[i])),
                    grouper.group(int(dst_g[i])),
                    int(proto[i]),
                    None if p < 0 else p,
                    old_side,
                    new_side,
                )
            for m in range(4):
                change.measures[m] += int(measures[m])
            if first_ns:
                change.first_ns = int(first_ns) if change.first_ns == 0 else min(change.first_ns, int(first_ns))
            change.last_ns = max(change.last_ns, int(last_ns))
            for file, pos in examples:
                report = reader.files[file]
                where = f"{report.name}: byte {pos}" if report.unit == "byte" else f"{report.name}:{pos}"
                change.found.append(
                    (file, int(pos), f"{where}: {address_text(h['src_addr'][i])} -> {address_text(h['dst_addr'][i])}")
                )
    keys = reach.selector_keys([old_ps, new_ps])
    # changes equal as shown are one, each with its first records in file order: as the
    # changes of files judged apart merge (``TrafficDiff.merge``)
    shown: dict[tuple, ObservedChange] = {}
    for c in found.values():
        k = c.key(keys)
        if k not in shown:
            shown[k] = ObservedChange(c.src, c.dst, c.protocol, c.port, c.old, c.new)
        shown[k].add(c)
    olds, news = changed_policies(old_ps, new_ps)
    refs = sorted({p.ref for p in (*olds, *news) if p is not None})
    result = TrafficDiff(list(shown.values()), keys, refs, list(totals), list(unplaced), reader.files)
    result.order()
    result.decisions = judge.stats()[0]
    if rule_usage:
        by_rule, logged = named_counts(judge, old)
        result.usage_summary = RecordSummary(
            totals=[int(v) for v in totals], by_rule=by_rule, logged=logged, files=list(reader.files)
        )
        result.usage = usage_json(result.usage_summary)
    result.seconds = time.perf_counter() - started
    return result


__all__ = ["DiffEngines", "ObservedChange", "TrafficDiff", "merge_diffs", "traffic_diff"]


def print_diff(result: TrafficDiff, out: Any, escape: Any, ascii_only: bool) -> None:
    """``diff --traffic``'s human output: newly denied first, most flows first."""
    changed = ", ".join(result.policies_changed[:5]) + (
        f" and {len(result.policies_changed) - 5} more" if len(result.policies_changed) > 5 else ""
    )
    out.print(f"policies changed: {escape(changed) if changed else 'none'}", highlight=False)
    for c in result.changes:
        colour = "red" if c.closed else "green"
        text = result.change_text(c)
        if ascii_only:
            text = text.replace("→", "->").replace("…", "...")
        out.print(f"[{colour}]{'-' if c.closed else '+'}[/{colour}] {escape(text)}", highlight=False, soft_wrap=True)
    doc = result.to_json()["summary"]
    obs = doc["observed"]
    out.print(
        f"{doc['changes']} change{'s' if doc['changes'] != 1 else ''} in observed traffic: {doc['closed']} closing "
        f"{doc['closed_flows']:,} flows, {doc['opened']} opening {doc['opened_flows']:,} flows; over "
        f"{obs['records']:,} records ({obs['flows']:,} flows, {obs['packets']:,} packets, {obs['bytes']:,} bytes)",
        highlight=False,
    )
    if doc["not_judged"]["records"]:
        out.print(
            f"[yellow]not judged[/yellow]: {doc['not_judged']['records']:,} records an end of which the inventory "
            "cannot place"
        )
    for f in result.files:
        for reason, n in f.problems.items():
            out.print(
                f"[yellow]{escape(f.name)}[/yellow]: {n:,} record{'s' if n != 1 else ''} {reason.replace('_', ' ')}"
            )
        for line in f.problem_lines():
            out.print(f"    {escape(line)}")
