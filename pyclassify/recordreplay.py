"""Judging flow records (``pyclassify replay --traffic``): one record, one connection (or an
aggregate of them) judged once as the packet that opens it.

Each chunk of a file is read and judged natively (``_engine.RecordJudge``; no connection
tracking: a record is already a connection): a record is judged by what its verdict depends on
(addresses, protocol, destination port, source port class, ICMP), each distinct such key once,
and the records of a key add their flows, packets and bytes to it; the sums fold into the
summary at the end. Python reads the summary; ``--out``'s per-record lines are written natively
too (``_engine.RecordLines``), Python spelling each distinct decision and endpoint they name once.
A record to a Service's virtual address is judged for every backend, as ``replay`` judges
packets (``pyclassify.services``).
"""

from __future__ import annotations

import ipaddress
import json
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Callable

import numpy as np
import numpy.typing as npt

from pyclassify._engine import RecordJudge, RecordLines
from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.engine import NativeEngine
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction
from pyclassify.kinds.common import protocol_name
from pyclassify.records import (
    NO_NAME,
    ORIENTATION,
    REPORTED,
    FileReport,
    RecordError,
    JudgedChunk,
    RecordReader,
    address_text,
    where,
)
from pyclassify.services import ServiceMap

#: The counts a record carries, in the order summaries list them.
MEASURES = ("records", "flows", "packets", "bytes")
EXAMPLES = 5  # examples kept per kind of finding


def new_judge(engines: list[NativeEngine], default: str | None, services: ServiceMap | None,
              logs: bool = False) -> RecordJudge:
    """A native judge of records under ``engines`` (one, or a diff's two), through the
    Services of ``services``."""
    pod_allow = (default or "allow") == "allow"
    host_allow = default == "allow"
    entries = None
    if services:
        entries = [(e.address, e.protocol, e.port, [(a, p) for a, p, _ in e.backends]) for e in services.entries]
    return RecordJudge([e._engine for e in engines], pod_allow, host_allow, logs=logs, services=entries)


def rule_counts(judge: RecordJudge, engine: NativeEngine, logs: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """What a folded judge counted per rule of its first engine: ``by_rule_rows`` and (with
    ``logs``) ``logged_rows``, as ``RecordReplay.summary_json`` gives them."""
    by_rule = {(("egress", "ingress")[d], tier, kind, source, rule, reason, allow): list(m)
               for (d, tier, kind, source, rule, reason, allow), m in judge.by_rule()}
    logged = {(("egress", "ingress")[d], tier, kind, source, rule): list(m)
              for (d, tier, kind, source, rule), m in judge.logged()}
    return by_rule_rows(engine, by_rule), logged_rows(engine, logged) if logs else None


def measures_json(values: list[int]) -> dict[str, int]:
    return dict(zip(MEASURES, values))


def by_rule_rows(engine: NativeEngine, counts: dict[tuple, list[int]]) -> list[dict[str, Any]]:
    """``[{"direction", "tier", "policy", "rule", "verdict", "reason", "records", "flows",
    "packets", "bytes"}...]``, most flows first."""
    rows = []
    for (direction, tier, kind, source, rule, reason, allow), values in counts.items():
        side = np.zeros((), dtype=engine.side_dtype)
        side["present"], side["allow"], side["reason"] = 1, allow, reason
        side["source_kind"], side["tier"], side["source"], side["rule"] = kind, tier, source, rule
        decision = engine.side_decision(side, Direction(direction))
        assert decision is not None
        rows.append({"direction": direction, "tier": decision.tier, "policy": decision.policy, "rule": decision.rule,
                     "verdict": decision.verdict, "reason": decision.reason, **measures_json(values)})
    rows.sort(key=lambda r: (-r["flows"], -r["records"], r["direction"], str(r["policy"]), str(r["rule"])))
    return rows


def logged_rows(engine: NativeEngine, counts: dict[tuple, list[int]]) -> list[dict[str, Any]]:
    """``[{"direction", "tier", "policy", "rule", "records", "flows", "packets", "bytes"}...]``:
    what each Log rule logged (passed on the way to a decision)."""
    rows = []
    for (direction, tier, kind, source, rule), values in counts.items():
        side = np.zeros((), dtype=engine.side_dtype)
        side["present"], side["allow"], side["reason"], side["source_kind"] = 1, 0, 0, kind
        side["tier"], side["source"], side["rule"] = tier, source, rule
        decision = engine.side_decision(side, Direction(direction))
        assert decision is not None
        rows.append({"direction": direction, "tier": decision.tier, "policy": decision.policy, "rule": decision.rule,
                     **measures_json(values)})
    rows.sort(key=lambda r: (-r["flows"], -r["records"], r["direction"], str(r["policy"]), str(r["rule"])))
    return rows


@dataclass
class RecordSummary:
    totals: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    allowed: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    denied: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    #: records an end of which no address or name placed: not judged
    unplaced: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    unplaced_examples: list[str] = field(default_factory=list)
    #: judged records neither end of which is an endpoint of the inventory
    outside: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    outside_examples: list[str] = field(default_factory=list)
    no_policy: dict[str, list[int]] = field(default_factory=lambda: {"egress": [0, 0, 0, 0], "ingress": [0, 0, 0, 0]})
    by_rule: dict[tuple, list[int]] = field(default_factory=dict)
    #: (direction, tier, source_kind, source, rule) of a Log rule passed -> measures
    logged: dict[tuple, list[int]] = field(default_factory=dict)
    #: distinct decisions made (each record key once)
    decisions: int = 0
    #: (the record's own verdict, pyclassify's) -> records
    reported: Counter = field(default_factory=Counter)
    disagreement_examples: list[str] = field(default_factory=list)
    first_ns: int = 0
    last_ns: int = 0
    seconds: float = 0.0
    interrupted: bool = False


class RecordReplay:
    """One run over flow record files with one engine."""

    def __init__(self, engine: NativeEngine, default: str | None = None, out: IO[bytes] | None = None,
                 format: str | None = None, logs: bool = False, out_name: str | None = None) -> None:
        self.engine = engine
        self.out_name = out_name  # named in an error writing ``out``
        self.defaults = {} if default is None else {"default_pod": default, "default_host": default}
        self.out = out
        self.format = format
        self.logs = logs
        self.summary = RecordSummary()
        self.files: list[FileReport] = []
        self.services = ServiceMap(engine.inventory)
        self.judge = new_judge([engine], default, self.services, logs=logs)
        self._lines: RecordLines | None = None  # --out's line writer, made with the first chunk
        self._stop = False

    def run(self, paths: list[str], progress: Callable[[int], None] | None = None) -> RecordSummary:
        reader = RecordReader(paths, self.engine.inventory, self.format)
        self.files = reader.files
        self._reader = reader
        started = time.perf_counter()
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self._interrupt)
        done = 0
        try:
            for kept in reader.judged(self.judge, keep=self.out is not None):
                if kept is not None:
                    self._write_lines(kept)
                if progress is not None:
                    total = self.judge.measures()[0][0]
                    progress(total - done)
                    done = total
                if self._stop:
                    self.summary.interrupted = True
                    break
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self._collect()
            self.summary.seconds = time.perf_counter() - started
        return self.summary

    def _interrupt(self, signum: int, frame: Any) -> None:
        self._stop = True

    def _where(self, file: int, position: int) -> str:
        report = self.files[file]
        return f"{report.name}: byte {position}" if report.unit == "byte" else f"{report.name}:{position}"

    def _collect(self) -> None:
        """The native sums into the summary, and the records kept as examples as text."""
        s = self.summary
        self.judge.fold()
        totals, allowed, denied, unplaced, no_policy, outside = self.judge.measures()
        s.totals, s.allowed, s.denied, s.unplaced = list(totals), list(allowed), list(denied), list(unplaced)
        s.outside = list(outside)
        s.no_policy = {"egress": list(no_policy[0]), "ingress": list(no_policy[1])}
        s.by_rule = {(("egress", "ingress")[d], tier, kind, source, rule, reason, allow): list(m)
                     for (d, tier, kind, source, rule, reason, allow), m in self.judge.by_rule()}
        s.logged = {(("egress", "ingress")[d], tier, kind, source, rule): list(m)
                    for (d, tier, kind, source, rule), m in self.judge.logged()}
        s.reported = Counter()
        for r, row in enumerate(self.judge.reported()):
            for ours, n in enumerate(row):
                if n:
                    s.reported[(REPORTED[r], "allow" if ours else "deny")] += n
        s.first_ns, s.last_ns = self.judge.time_range()
        s.decisions, _ = self.judge.stats()
        s.unplaced_examples, s.outside_examples, s.disagreement_examples = [], [], []
        for kind, file, hb, cb, vb in self.judge.examples():
            h = np.frombuffer(hb, HEADER_DTYPE)[0]
            c = np.frombuffer(cb, FLOW_COUNTS_DTYPE)[0]
            v = np.frombuffer(vb, VERDICT_DTYPE)[0]
            where = self._where(file, int(c["position"]))
            if kind == 0:
                ends = []
                for has, name, end in (("has_src", "src_name", "source"), ("has_dst", "dst_name", "destination")):
                    if not c[has]:
                        n = int(c[name])
                        ends.append(f"{end} {self._reader.describe(file, n)}" if n != NO_NAME else f"{end} unknown")
                s.unplaced_examples.append(f"{where}: {' and '.join(ends)}: not in the inventory")
            elif kind == 1:
                s.outside_examples.append(f"{where}: {address_text(h['src_addr'])} -> {address_text(h['dst_addr'])}: "
                                          "neither end is an endpoint of the inventory")
            else:
                s.disagreement_examples.append(
                    f"{where}: {self._tuple_text(h)}: the record says {REPORTED[int(c['reported'])]}, "
                    f"policy says {'allow' if v['allow'] else 'deny'}")

    def _tuple_text(self, h: Any) -> str:
        proto = int(h["protocol"])
        port = f"/{int(h['dport'])}" if h["flags"] & 32 else ""
        return f"{address_text(h['src_addr'])} -> {address_text(h['dst_addr'])} {protocol_name(proto)}{port}"

    def _owner(self, address: bytes) -> str | None:
        owner = self.engine.inventory.owner_of(ipaddress.ip_address(address_text(np.frombuffer(address, np.uint8))))
        return None if owner is None else owner.ref

    def _side_json(self, side: bytes, direction: int) -> dict[str, Any] | None:
        record = np.frombuffer(side, dtype=self.engine.side_dtype)[0]
        decision = self.engine.side_decision(record, (Direction.EGRESS, Direction.INGRESS)[direction])
        if decision is None:
            return None
        doc = decision.to_json()
        doc.pop("logs", None)
        return doc

    def _write_lines(self, chunk: JudgedChunk) -> None:
        """A chunk's ``--out`` lines, written natively; Python only spells what they name
        (each side's decision, each address's endpoint), once per distinct one."""
        assert self.out is not None
        if self._lines is None:
            self._lines = RecordLines([json.dumps(protocol_name(p)) for p in range(256)],
                                      [json.dumps(ORIENTATION[i]) for i in range(len(ORIENTATION))],
                                      [json.dumps(REPORTED[i]) for i in range(len(REPORTED))],
                                      [json.dumps(e.to_json()) for e in self.services.entries])
        report = self.files[chunk.file]
        h, c, v, s = chunk.raw
        sides, addresses = self._lines.missing(h, c, v)
        for direction, side in sides:
            self._lines.learn_side(direction, side, json.dumps(self._side_json(side, direction)))
        for address in addresses:
            self._lines.learn_owner(address, json.dumps(self._owner(address)))
        data = self._lines.write(h, c, v, s, json.dumps(report.name), report.unit)
        try:
            self.out.write(data)
        except OSError as e:
            raise RecordError(f"--out {self.out_name or getattr(self.out, 'name', '')}: cannot write: "
                              f"{e.strerror or e}") from None

    def summary_json(self) -> dict[str, Any]:
        s = self.summary
        agree = sum(n for (r, o), n in s.reported.items() if r in ("allow", "deny") and r == o)
        disagree = sum(n for (r, o), n in s.reported.items() if r in ("allow", "deny") and r != o)
        return {
            "input": "flow records",
            **measures_json(s.totals),
            "allowed": measures_json(s.allowed),
            "denied": measures_json(s.denied),
            "unplaced": {**measures_json(s.unplaced), "examples": s.unplaced_examples},
            "outside": {**measures_json(s.outside), "examples": s.outside_examples},
            "no_policy": {d: measures_json(v) for d, v in s.no_policy.items()},
            "by_rule": by_rule_rows(self.engine, s.by_rule),
            "logged": logged_rows(self.engine, s.logged) if self.logs else None,
            "reported": {
                "records": [{"reported": r, "verdict": o, "records": n} for (r, o), n in sorted(s.reported.items(), key=str)],
                "agree": agree,
                "disagree": disagree,
                "examples": s.disagreement_examples,
            },
            "first": s.first_ns / 1e9 if s.first_ns else None,
            "last": s.last_ns / 1e9 if s.last_ns else None,
            "files": [f.to_json() for f in self.files],
            "problems": sum(sum(f.problems.values()) for f in self.files),
            "seconds": round(s.seconds, 6),
            "records_per_second": round(s.totals[0] / s.seconds, 1) if s.seconds > 0 else 0.0,
            "decisions": s.decisions,
            "interrupted": s.interrupted,
        }

    @property
    def unreadable(self) -> bool:
        """Nothing could be read from any file (every record was a problem)."""
        return self.summary.totals[0] == 0 and any(f.problems for f in self.files)


def print_summary(doc: dict[str, Any], out: Any, err: Any, escape: Callable[[str], str], arrow: str, dash: str) -> None:
    """``replay --traffic``'s human summary (``doc``: ``summary_json``)."""
    def m(values: dict[str, int]) -> str:
        return f"{values['records']:,} records, {values['flows']:,} flows, {values['packets']:,} packets, {values['bytes']:,} bytes"

    out.print(f"{doc['records']:,} flow records ({doc['flows']:,} flows, {doc['packets']:,} packets, {doc['bytes']:,} bytes) "
              f"from {len(doc['files'])} file{'s' if len(doc['files']) != 1 else ''} {dash} {doc['records_per_second']:,.0f} records/s")
    out.print(f"  [green]allowed[/green]: {m(doc['allowed'])}")
    out.print(f"  [red]denied[/red] : {m(doc['denied'])}")
    if doc["unplaced"]["records"]:
        out.print(f"  [yellow]not judged[/yellow]: {m(doc['unplaced'])}: an end the inventory cannot place")
        for e in doc["unplaced"]["examples"]:
            out.print(f"      {escape(e)}")
    if doc["outside"]["records"]:
        out.print(f"  [yellow]outside[/yellow]: {m(doc['outside'])}: judged, but neither end is an endpoint of the inventory")
        for e in doc["outside"]["examples"]:
            out.print(f"      {escape(e)}")
    rep = doc["reported"]
    if rep["agree"] or rep["disagree"]:
        out.print(f"the records' own verdicts: {rep['agree']:,} agree with the policy, {rep['disagree']:,} do not")
        for e in rep["examples"]:
            out.print(f"  [yellow]differs[/yellow]: {escape(e)}")
    if doc["by_rule"]:
        out.print("flows by what decided each end (records / flows / packets / bytes):")
    for direction in ("egress", "ingress"):
        for row in (r for r in doc["by_rule"] if r["direction"] == direction):
            colour = "green" if row["verdict"] == "allow" else "red"
            out.print(f"  {row['records']:>8,} {row['flows']:>9,} {row['packets']:>11,} {row['bytes']:>13,}  {direction:<7} "
                      f"[{colour}]{row['verdict']:<5}[/{colour}] {_by_what(row, escape)}")
        none = doc["no_policy"][direction]
        if none["records"]:
            out.print(f"  {none['records']:>8,} {none['flows']:>9,} {none['packets']:>11,} {none['bytes']:>13,}  {direction:<7} "
                      "no policy applies at this end")
    for f in doc["files"]:
        for reason, n in f["problems"].items():
            out.print(f"[yellow]{escape(f['file'])}[/yellow]: {n:,} record{'s' if n != 1 else ''} {reason.replace('_', ' ')}")
        unit = "byte" if f["format"] == "netflow" else "line"
        for p in f["first"]:
            at = where(f["file"], unit, p["reason"], p[unit])
            out.print(f"    {escape(at)}: {p['reason']}: {escape(p['detail'])}")
    if doc["interrupted"]:
        out.print("[yellow]interrupted[/yellow]: summary of the records read so far")


def _by_what(row: dict[str, Any], escape: Callable[[str], str]) -> str:
    where = f" in tier {escape(row['tier'])}" if row["tier"] else ""
    if row["reason"] == "rule":
        return f"by {escape(str(row['policy']))} rule {escape(str(row['rule']))}{where}"
    if row["reason"] == "end-of-tier":
        return f"by end of tier {escape(row['tier'] or '')}"
    if row["reason"] == "profile":
        return f"by {escape(row['policy'] or 'profiles')}" + (f" rule {escape(str(row['rule']))}" if row["rule"] is not None else "")
    return "by the default"


__all__ = ["RecordReplay", "print_summary"]
