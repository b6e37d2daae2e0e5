"""Which observed connections a policy change would flip (``pyclassify diff OLD... --against
NEW... --traffic FILE...``).

Every flow record is judged under the old and the new policy set, a batch at a time, in two
native calls; records whose verdicts differ are aggregated by (source group, destination group,
protocol, port, the decisions before and after) with their records, flows, packets, bytes and
time range. Groups are ``diff``'s: endpoints policy cannot tell apart under either set
(``reachability.endpoint_groups``), outside addresses by the region both sets class alike.
Exact by construction: each record's own two verdicts decide whether and where it is counted
(``tests/test_trafficdiff.py`` holds it to judging every record alone, under both sets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import netaddr
import numpy as np
import numpy.typing as npt

from pyclassify import reachability as reach
from pyclassify.diff import Side, changed_policies, decision_text
from pyclassify.engine import EngineState, NativeEngine
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction, PolicySet
from pyclassify.kinds.common import protocol_name
from pyclassify.recordreplay import MEASURES, KnownAddresses, add_measures, measures_json, side_keys, weights
from pyclassify.records import FileReport, RecordReader, address_text

OUTSIDE = -1  # group index of an outside address no region holds (none: regions cover all)
_MIX = np.uint64(0x9E3779B97F4A7C15)


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

    @property
    def closed(self) -> bool:
        return self.old.allowed and not self.new.allowed

    def flow_text(self) -> str:
        name = protocol_name(self.protocol)
        if self.port is None:
            return name
        return f"{name} type {self.port}" if self.protocol in (1, 58) else f"{name} {self.port}"


def _time(ns: int) -> str | None:
    if not ns:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class TrafficDiff:
    changes: list[ObservedChange]
    keys: set[str]
    policies_changed: list[str]
    totals: list[int]
    unplaced: list[int]
    files: list[FileReport]
    seconds: float = 0.0

    def change_text(self, c: ObservedChange) -> str:
        verb = ("denied", "allowed")
        direction = (c.new if not c.new.allowed else c.old).deciding()[0]
        new_d = c.new.egress if direction is Direction.EGRESS else c.new.ingress
        old_d = c.old.egress if direction is Direction.EGRESS else c.old.ingress
        m = measures_json(c.measures)
        seen = f", seen {_time(c.first_ns)} to {_time(c.last_ns)}" if c.first_ns else ""
        return (f"{reach.group_text(c.src, self.keys)} → {reach.group_text(c.dst, self.keys)}, {c.flow_text()}: "
                f"{verb[c.old.allowed]} → {verb[c.new.allowed]}, by {decision_text(new_d)} "
                f"(was: {decision_text(old_d)}); observed {m['flows']:,} flows, {m['packets']:,} packets, "
                f"{m['bytes']:,} bytes in {m['records']:,} records{seen}")

    def to_json(self) -> dict[str, Any]:
        closed = [c for c in self.changes if c.closed]
        return {
            "policies_changed": self.policies_changed,
            "changed": bool(self.changes),
            "changes": [{
                "from": reach.group_json(c.src, self.keys),
                "to": reach.group_json(c.dst, self.keys),
                "protocol": protocol_name(c.protocol),
                "port": c.port if c.protocol not in (1, 58) else None,
                "icmp_type": c.port if c.protocol in (1, 58) else None,
                **measures_json(c.measures),
                "first": _time(c.first_ns),
                "last": _time(c.last_ns),
                "was": c.old.to_json(),
                "now": c.new.to_json(),
                "examples": c.examples,
                "text": self.change_text(c),
            } for c in self.changes],
            "summary": {
                "changes": len(self.changes),
                "closed": len(closed),
                "opened": len(self.changes) - len(closed),
                "closed_flows": sum(c.measures[1] for c in closed),
                "opened_flows": sum(c.measures[1] for c in self.changes if not c.closed),
                "observed": measures_json(self.totals),
                "not_judged": measures_json(self.unplaced),
                "seconds": round(self.seconds, 6),
            },
            "files": [f.to_json() for f in self.files],
        }


class _Grouper:
    """Addresses to ``diff``'s groups, a batch at a time: endpoint addresses through a sorted
    key array, outside addresses once per distinct address through the regions."""

    def __init__(self, engines: Sequence[NativeEngine]) -> None:
        inventory = engines[0].inventory
        self.groups = reach.endpoint_groups(engines, reach.table_endpoints(inventory))
        self.outside = reach.outside_groups(engines)
        from pyclassify.records import addr16

        keys, ids = [], []
        for k, g in enumerate(self.groups):
            for _, ip in g.members:
                if ip is not None:
                    keys.append(addr16(ip))
                    ids.append(k)
        arr = np.frombuffer(b"".join(keys), np.uint8).reshape(-1, 16) if keys else np.zeros((0, 16), np.uint8)
        k64 = KnownAddresses.key(arr)
        order = np.argsort(k64, kind="stable")
        self.keys, self.ids = k64[order], np.array(ids, dtype=np.int64)[order]
        self._sets = [(g, netaddr.IPSet(g.cidrs) - netaddr.IPSet(g.excluded)) for g in self.outside]
        self._outside: dict[int, int] = {}

    def of(self, addrs: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Per address, its group's index: endpoint groups from 0, outside regions after them."""
        k = KnownAddresses.key(addrs)
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


def traffic_diff(old_ps: PolicySet, new_ps: PolicySet, inventory: Inventory, paths: list[str],
                 format: str | None = None, default: str | None = None) -> TrafficDiff:
    """Every observed connection of ``paths`` whose verdict ``new_ps`` flips."""
    import time

    started = time.perf_counter()
    state = EngineState()
    old = state.update(old_ps, inventory)
    new = state.update(new_ps, inventory)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    grouper = _Grouper((old, new))
    reader = RecordReader(paths, inventory, format)
    totals, unplaced = [0, 0, 0, 0], [0, 0, 0, 0]
    found: dict[tuple, ObservedChange] = {}
    decisions: dict[tuple, Any] = {}

    def side(engine: NativeEngine, rec: Any) -> Side:
        got = []
        for direction, name in ((Direction.EGRESS, "egress"), (Direction.INGRESS, "ingress")):
            key = (id(engine), name, rec[name].tobytes())
            if key not in decisions:
                decisions[key] = engine.side_decision(rec[name], direction)
            got.append(decisions[key])
        return Side(bool(rec["allow"]), got[0], got[1])

    for chunk in reader:
        c, w = chunk.counts, weights(chunk.counts)
        add_measures(totals, w)
        placed = (c["has_src"] == 1) & (c["has_dst"] == 1)
        if not placed.all():
            add_measures(unplaced, w, ~placed)
        rows = np.flatnonzero(placed)
        h = np.ascontiguousarray(chunk.headers[rows])
        a = old.judge(h, **defaults)
        b = new.judge(h, **defaults)
        flip = np.flatnonzero(a["allow"] != b["allow"])
        if len(flip) == 0:
            continue
        hf, af, bf = h[flip], a[flip], b[flip]
        proto = hf["protocol"].astype(np.int64)
        port = np.where(hf["flags"] & 32, hf["dport"].astype(np.int64),
                        np.where(np.isin(proto, (1, 58)), hf["icmp_type"].astype(np.int64), -1))
        with np.errstate(over="ignore"):
            okey = side_keys(af["egress"]) * _MIX ^ side_keys(af["ingress"])
            nkey = side_keys(bf["egress"]) * _MIX ^ side_keys(bf["ingress"])
        table = np.stack([grouper.of(hf["src_addr"]).view(np.uint64), grouper.of(hf["dst_addr"]).view(np.uint64),
                          proto.view(np.uint64), port.view(np.uint64), okey, nkey], axis=1)
        uniq, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        sel = rows[flip]
        sums = [np.bincount(inverse, weights=w[m][sel].astype(np.float64), minlength=len(uniq)) for m in MEASURES]
        fs = c["first_ns"][sel].astype(np.int64)
        lo = np.full(len(uniq), np.iinfo(np.int64).max)
        np.minimum.at(lo, inverse, np.where(fs > 0, fs, np.iinfo(np.int64).max))
        hi = np.zeros(len(uniq), np.int64)
        np.maximum.at(hi, inverse, c["last_ns"][sel].astype(np.int64))
        for j, i in enumerate(first.tolist()):
            key = tuple(int(x) for x in uniq[j])
            change = found.get(key)
            if change is None:
                sg, dg = int(np.int64(uniq[j][0].view(np.int64))), int(np.int64(uniq[j][1].view(np.int64)))
                p = int(np.int64(uniq[j][3].view(np.int64)))
                change = found[key] = ObservedChange(grouper.group(sg), grouper.group(dg), int(proto[i]),
                                                     None if p < 0 else p, side(old, af[i]), side(new, bf[i]))
            for m in range(4):
                change.measures[m] += int(sums[m][j])
            if lo[j] != np.iinfo(np.int64).max:
                change.first_ns = int(lo[j]) if change.first_ns == 0 else min(change.first_ns, int(lo[j]))
            change.last_ns = max(change.last_ns, int(hi[j]))
            if len(change.examples) < 3:
                report = reader.files[chunk.file]
                pos = int(c["position"][sel[i]])
                where = f"{report.name}: byte {pos}" if report.unit == "byte" else f"{report.name}:{pos}"
                change.examples.append(f"{where}: {address_text(hf['src_addr'][i])} -> {address_text(hf['dst_addr'][i])}")
    changes = sorted(found.values(), key=lambda ch: (not ch.closed, -ch.measures[1], -ch.measures[0],
                                                      reach.group_text(ch.src, set()), reach.group_text(ch.dst, set()),
                                                      ch.protocol, ch.port or 0))
    olds, news = changed_policies(old_ps, new_ps)
    refs = sorted({p.ref for p in (*olds, *news) if p is not None})
    result = TrafficDiff(changes, reach.selector_keys([old_ps, new_ps]), refs, totals, unplaced, reader.files)
    result.seconds = time.perf_counter() - started
    return result


__all__ = ["ObservedChange", "TrafficDiff", "traffic_diff"]


def print_diff(result: TrafficDiff, out: Any, escape: Any, ascii_only: bool) -> None:
    """``diff --traffic``'s human output: newly denied first, most flows first."""
    changed = ", ".join(result.policies_changed[:5]) + (
        f" and {len(result.policies_changed) - 5} more" if len(result.policies_changed) > 5 else "")
    out.print(f"policies changed: {escape(changed) if changed else 'none'}", highlight=False)
    for c in result.changes:
        colour = "red" if c.closed else "green"
        text = result.change_text(c)
        if ascii_only:
            text = text.replace("→", "->").replace("…", "...")
        out.print(f"[{colour}]{'-' if c.closed else '+'}[/{colour}] {escape(text)}", highlight=False, soft_wrap=True)
    doc = result.to_json()["summary"]
    obs = doc["observed"]
    out.print(f"{doc['changes']} change{'s' if doc['changes'] != 1 else ''} in observed traffic: {doc['closed']} closing "
              f"{doc['closed_flows']:,} flows, {doc['opened']} opening {doc['opened_flows']:,} flows; over "
              f"{obs['records']:,} records ({obs['flows']:,} flows, {obs['packets']:,} packets, {obs['bytes']:,} bytes)",
              highlight=False)
    if doc["not_judged"]["records"]:
        out.print(f"[yellow]not judged[/yellow]: {doc['not_judged']['records']:,} records an end of which the inventory "
                  "cannot place")
    for f in result.files:
        for reason, n in f.problems.items():
            out.print(f"[yellow]{escape(f.name)}[/yellow]: {n:,} record{'s' if n != 1 else ''} {reason.replace('_', ' ')}")
        for line in f.problem_lines():
            out.print(f"    {escape(line)}")
