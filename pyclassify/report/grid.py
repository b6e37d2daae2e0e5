"""The report's grid: pods in identity groups ordered by namespace, each group pair's verdict
for one protocol and port, and the decisions that made it, under one policy set or two.

Groups are ``matrix --by identity``'s: each address family a pod has addresses of is a group of
its own (a dual-stack pod is in one IPv4 and one IPv6 group), and groups sharing no family have
no flow between them; the page judges a pod pair in every family either has, as ``matrix`` does.

One representative flow per (group, group, flow class) is judged natively, as ``matrix --by
identity`` does (``reachability.judge_pairs``), keeping the verdict records: each side's
decision (tier, policy, rule, reason) is deduplicated into a small table, and a cell holds
indices into it. With ``--port any`` a cell speaks for one port class, so its explanation is
the one of a flow it stands for: of a change, the first class whose verdict changed (both sides
explain that flow); else its first allowed class, or its first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify import reachability as reach
from pyclassify.diff import decision_text
from pyclassify.engine import NativeEngine
from pyclassify.inventory import Endpoint
from pyclassify.ir import Direction, PolicySet

#: Cell verdicts.
DENY, ALLOW, NO_FLOW = 0, 1, 2
#: Cell changes (bits).
OPENED, CLOSED = 1, 2


@dataclass
class Side:
    """One policy set's verdict of every group pair: ``verdict[i, j]`` (DENY, ALLOW, NO_FLOW),
    and the egress and ingress decisions (indices into ``Grid.decisions``; 0: no policy)."""

    verdict: npt.NDArray[np.uint8]
    egress: npt.NDArray[np.uint32]
    ingress: npt.NDArray[np.uint32]
    #: with several flow classes (``--port any``): the class each cell speaks for
    klass: npt.NDArray[np.uint16] | None = None


@dataclass
class Grid:
    """Groups ordered by namespace (``ns_start[k]``..``ns_start[k+1]`` are namespace k's), and
    the verdicts of one policy set (``sides[0]``) or of a change (old, new)."""

    namespaces: list[str]
    ns_start: list[int]
    groups: list[reach.Group]
    group_text: list[str]
    group_labels: list[dict[str, str]]
    protocol: int
    port: int | None | str
    sides: list[Side]
    classes: list[reach.FlowClass]  # the flow classes judged (the IPv4 ones; ports alike in IPv6)
    decisions: list[dict[str, Any] | None] = field(default_factory=lambda: [None])
    #: of a change: per cell, OPENED | CLOSED where some flow class went deny -> allow, allow -> deny
    change: npt.NDArray[np.uint8] | None = None

    def pods(self, g: int) -> list[Endpoint]:
        return self.groups[g].endpoints

    def sizes(self) -> npt.NDArray[np.int64]:
        return np.array([len(g.endpoints) for g in self.groups], np.int64)

    def namespace_counts(self, cells: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """Pod pairs per (namespace, namespace) whose group cell is set: the cells weighted by
        their groups' pods."""
        n = self.sizes().astype(np.float64)
        member = np.zeros((len(self.groups), len(self.namespaces)))
        for k in range(len(self.namespaces)):
            member[self.ns_start[k] : self.ns_start[k + 1], k] = n[self.ns_start[k] : self.ns_start[k + 1]]
        return np.rint(member.T @ cells.astype(np.float64) @ member).astype(np.int64)

    def namespace_pods(self) -> npt.NDArray[np.int64]:
        n = self.sizes()
        return np.array(
            [n[self.ns_start[k] : self.ns_start[k + 1]].sum() for k in range(len(self.namespaces))], np.int64
        )


def build(
    engines: Sequence[NativeEngine],
    pods: Sequence[Endpoint],
    protocol: int,
    port: int | None | str,
    defaults: dict[str, str],
    policy_sets: Sequence[PolicySet],
) -> Grid:
    """The grid of ``pods`` under each engine (one: a matrix; two: old and new of a change)."""
    groups = reach.endpoint_groups(engines, pods)  # every address a pod owns: a group per family
    groups.sort(key=lambda g: (g.endpoints[0].namespace or "", g.endpoints[0].ref, g.family or 0))
    namespaces: list[str] = []
    ns_start: list[int] = []
    for k, g in enumerate(groups):
        ns = g.endpoints[0].namespace or ""
        if not namespaces or namespaces[-1] != ns:
            namespaces.append(ns)
            ns_start.append(k)
    ns_start.append(len(groups))
    keys = reach.selector_keys(policy_sets)
    space = reach.FlowSpace.build(engines, [protocol], dport=port)
    dual = reach.dual_stack(groups)
    grid = Grid(
        namespaces,
        ns_start,
        groups,
        [reach.group_text(g, keys, dual) for g in groups],
        [reach.group_labels(g, keys) for g in groups],
        protocol,
        port,
        [],
        space.classes[4],
    )
    _judge(grid, engines, space, defaults)
    return grid


def _judge(grid: Grid, engines: Sequence[NativeEngine], space: reach.FlowSpace, defaults: dict[str, str]) -> None:
    """Every group pair's cells under each engine, a block of rows at a time (and of two
    engines, which flow classes changed verdict)."""
    groups = grid.groups
    n = len(groups)
    index: dict[tuple[int, bytes], int] = {}
    for _ in engines:
        side = Side(np.full((n, n), NO_FLOW, np.uint8), np.zeros((n, n), np.uint32), np.zeros((n, n), np.uint32))
        if max(len(c) for c in space.classes.values()) > 1:
            side.klass = np.zeros((n, n), np.uint16)
        grid.sides.append(side)
    if len(engines) == 2:
        grid.change = np.zeros((n, n), np.uint8)
    fam = reach.pair_families(groups, groups)
    for family in (4, 6, 0):
        classes = space.classes[family or 4]
        if not classes:
            continue
        rows = max(1, reach.CHUNK // (n * len(classes)))  # bounds the verdict records held
        for top in range(0, n, rows):
            block = fam[top : top + rows]
            cells = np.flatnonzero(block == family)
            if not len(cells):
                continue
            si, di = np.divmod(cells, n)
            si = si + top
            whole = len(cells) == block.size  # every cell of the rows: written as one slice

            def put(
                target: npt.NDArray[Any],
                values: npt.NDArray[Any],
                whole: bool = whole,
                top: int = top,
                block: npt.NDArray[Any] = block,
                si: npt.NDArray[Any] = si,
                di: npt.NDArray[Any] = di,
            ) -> None:
                if whole:
                    target[top : top + len(block)] = values.reshape(block.shape)
                else:
                    target[si, di] = values

            recs = [reach.judge_pairs(e, groups, groups, si, di, classes, family or None, defaults) for e in engines]
            allows = [r["allow"].astype(bool) for r in recs]
            # The class a cell speaks for: of a change, its first class whose verdict changed;
            # else its first allowed one (under the last engine), or its first.
            last = allows[-1]
            speaking = np.where(last.any(axis=1), last.argmax(axis=1), 0)
            if len(allows) == 2:
                flipped = allows[0] != allows[1]
                speaking = np.where(flipped.any(axis=1), flipped.argmax(axis=1), speaking)
            for engine, side, rec, allow in zip(engines, grid.sides, recs, allows):
                put(side.verdict, np.where(allow.any(axis=1), ALLOW, DENY).astype(np.uint8))
                if len(classes) == 1:
                    chosen = rec[:, 0]
                else:
                    chosen = rec[np.arange(len(cells)), speaking]
                    if side.klass is not None:
                        put(side.klass, speaking.astype(np.uint16))
                for name, direction, out in (
                    ("egress", Direction.EGRESS, side.egress),
                    ("ingress", Direction.INGRESS, side.ingress),
                ):
                    put(out, _decision_ids(engine, chosen[name], direction, grid.decisions, index))
            if grid.change is not None:
                was, now = allows
                put(
                    grid.change,
                    (
                        np.where((~was & now).any(axis=1), OPENED, 0) | np.where((was & ~now).any(axis=1), CLOSED, 0)
                    ).astype(np.uint8),
                )


def _packed_keys(records: npt.NDArray[Any]) -> npt.NDArray[np.uint64] | None:
    """What tells side records' decisions apart (presence, verdict, reason, source kind, tier,
    source, rule) packed into one integer each, or None when a field is beyond its bits."""
    tier, source, rule = (records[f].astype(np.int64) + 1 for f in ("tier", "source", "rule"))
    for values, bits in ((tier, 10), (source, 24), (rule, 21)):
        if len(values) and (values.min() < 0 or values.max() >= 1 << bits):
            return None
    if len(records) and (records["reason"].max() >= 32 or records["source_kind"].max() >= 4):
        return None
    u = np.uint64
    return (
        records["present"].astype(u)
        | records["allow"].astype(u) << u(1)
        | records["reason"].astype(u) << u(2)
        | records["source_kind"].astype(u) << u(7)
        | tier.astype(u) << u(9)
        | source.astype(u) << u(19)
        | rule.astype(u) << u(43)
    )


def _decision_ids(
    engine: NativeEngine,
    records: npt.NDArray[Any],
    direction: Direction,
    decisions: list[dict[str, Any] | None],
    index: dict[tuple[int, bytes], int],
) -> npt.NDArray[np.uint32]:
    """Each side record's index in ``decisions`` (0: absent), adding the new ones: records are
    told apart by what a decision is made of (presence, verdict, reason, tier, policy, rule)."""
    keys: npt.NDArray[Any] | None = _packed_keys(records)
    if keys is None:
        raw = np.ascontiguousarray(records).view(np.uint8).reshape(len(records), -1)[:, :16]
        keys = np.ascontiguousarray(raw).view("V16").ravel()
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    ids = np.zeros(len(unique), np.uint32)
    for u, (key, at) in enumerate(zip(unique, first)):
        rec = records[at]
        if not rec["present"]:
            continue
        k = (0 if direction is Direction.EGRESS else 1, key.tobytes())  # packed or raw: either tells apart
        if k not in index:
            d = engine.side_decision(rec, direction)
            index[k] = len(decisions)
            decisions.append(
                None
                if d is None
                else {
                    "verdict": d.verdict,
                    "tier": d.tier,
                    "policy": d.policy,
                    "rule": d.rule,
                    "reason": d.reason,
                    "text": decision_text(d),
                }
            )
        ids[u] = index[k]
    return ids[inverse.ravel()]
