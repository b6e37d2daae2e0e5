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
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from pyclassify._engine import RecordJudge, RecordLines
from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.engine import NativeEngine
from pyclassify.ir import Direction
from pyclassify.kinds.common import protocol_name
from pyclassify.records import (
    NO_NAME,
    ORIENTATION,
    REPORTED,
    REPORTED_AT,
    FileReport,
    JudgedChunk,
    RecordError,
    RecordReader,
    address_text,
    where,
)
from pyclassify.services import ServiceMap

#: The counts a record carries, in the order summaries list them.
MEASURES = ("records", "flows", "packets", "bytes")
EXAMPLES = 5  # examples kept per kind of finding


def new_judge(
    engines: list[NativeEngine],
    default: str | None,
    services: ServiceMap | None,
    logs: bool = False,
    keep_keys: bool = False,
) -> RecordJudge:
    """A native judge of records under ``engines`` (one, or a diff's two), through the
    Services of ``services``; ``keep_keys``: one that keeps the keys it decided from run to
    run (``RecordJudge.restart``)."""
    pod_allow = (default or "allow") == "allow"
    host_allow = default == "allow"
    entries = None
    if services:
        entries = [(e.address, e.protocol, e.port, [(a, p) for a, p, _ in e.backends]) for e in services.entries]
    return RecordJudge(
        [e._engine for e in engines], pod_allow, host_allow, logs=logs, services=entries, keep_keys=keep_keys
    )


#: What decided one end, by name: (direction, tier, policy, rule, verdict, reason).
RuleKey = tuple[str, Any, Any, Any, str, str]
#: A Log rule passed, by name: (direction, tier, policy, rule).
LogKey = tuple[str, Any, Any, Any]


#: Per engine (an immutable snapshot), the names of the deciding rules met so far by their
#: numbers: a worker naming each task's sums names each rule once.
_RULE_NAMES: weakref.WeakKeyDictionary[NativeEngine, dict[tuple[int, ...], RuleKey]] = weakref.WeakKeyDictionary()


def named_counts(judge: RecordJudge, engine: NativeEngine) -> tuple[dict[RuleKey, list[int]], dict[LogKey, list[int]]]:
    """A folded judge's sums per deciding rule and per Log rule, keyed by the rules' names
    (``engine`` names them): keys any engine built from the same policy set names alike, so
    sums made on different machines add up."""
    by_rule: dict[RuleKey, list[int]] = {}
    names = _RULE_NAMES.setdefault(engine, {})
    for number, m in judge.by_rule():
        key = names.get(number)
        if key is None:
            d, tier, kind, source, rule, reason, allow = number
            decision = _side(engine, d, kind, tier, source, rule, reason, allow)
            key = names[number] = (
                ("egress", "ingress")[d],
                decision.tier,
                decision.policy,
                decision.rule,
                decision.verdict,
                decision.reason,
            )
        _add(by_rule.setdefault(key, [0, 0, 0, 0]), m)
    logged: dict[LogKey, list[int]] = {}
    for (d, tier, kind, source, rule), m in judge.logged():
        decision = _side(engine, d, kind, tier, source, rule, 0, 0)
        _add(
            logged.setdefault((("egress", "ingress")[d], decision.tier, decision.policy, decision.rule), [0, 0, 0, 0]),
            m,
        )
    return by_rule, logged


def _side(
    engine: NativeEngine, direction: int, kind: int, tier: int, source: int, rule: int, reason: int, allow: int
) -> Any:
    side = np.zeros((), dtype=engine.side_dtype)
    side["present"], side["allow"], side["reason"] = 1, allow, reason
    side["source_kind"], side["tier"], side["source"], side["rule"] = kind, tier, source, rule
    decision = engine.side_decision(side, (Direction.EGRESS, Direction.INGRESS)[direction])
    assert decision is not None
    return decision


def _add(into: list[int], values: Any) -> None:
    for i, v in enumerate(values):
        into[i] += int(v)


def measures_json(values: list[int]) -> dict[str, int]:
    return dict(zip(MEASURES, values))


def _row_order(row: dict[str, Any]) -> tuple:
    # every field of the key: rows tied on counts come in one order however they were summed
    return (
        -row["flows"],
        -row["records"],
        row["direction"],
        str(row["policy"]),
        str(row["rule"]),
        str(row["tier"]),
        str(row.get("verdict")),
        str(row.get("reason")),
    )


def rule_rows(counts: dict[RuleKey, list[int]]) -> list[dict[str, Any]]:
    """``[{"direction", "tier", "policy", "rule", "verdict", "reason", "records", "flows",
    "packets", "bytes"}...]``, most flows first."""
    rows = [
        {
            "direction": direction,
            "tier": tier,
            "policy": policy,
            "rule": rule,
            "verdict": verdict,
            "reason": reason,
            **measures_json(values),
        }
        for (direction, tier, policy, rule, verdict, reason), values in counts.items()
    ]
    rows.sort(key=_row_order)
    return rows


def logged_rule_rows(counts: dict[LogKey, list[int]]) -> list[dict[str, Any]]:
    """``[{"direction", "tier", "policy", "rule", "records", "flows", "packets", "bytes"}...]``:
    what each Log rule logged (passed on the way to a decision)."""
    rows = [
        {"direction": direction, "tier": tier, "policy": policy, "rule": rule, **measures_json(values)}
        for (direction, tier, policy, rule), values in counts.items()
    ]
    rows.sort(key=_row_order)
    return rows


def _sum(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a, b)]


def _sum_keyed(a: dict, b: dict) -> dict:
    out = {k: list(v) for k, v in a.items()}
    for k, v in b.items():
        out[k] = _sum(out[k], v) if k in out else list(v)
    return out


@dataclass
class RecordSummary:
    """What a run over flow record files found. Mergeable: ``a.merge(b)``, ``a`` the summary
    of some files and ``b`` of the files after them, is the summary of one run over all of
    them (sums add, examples keep the first ones in file order, time ranges widen), so files
    judged apart, on other processes or machines, give one run's answer."""

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
    by_rule: dict[RuleKey, list[int]] = field(default_factory=dict)
    #: Log rules passed -> measures
    logged: dict[LogKey, list[int]] = field(default_factory=dict)
    #: decisions made (each record key once per run over a part of the input)
    decisions: int = 0
    #: (the record's own verdict, pyclassify's) -> records
    reported: Counter = field(default_factory=Counter)
    disagreement_examples: list[str] = field(default_factory=list)
    first_ns: int = 0
    last_ns: int = 0
    #: each input file, in the order given
    files: list[FileReport] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False

    def merge(self, later: RecordSummary) -> RecordSummary:
        """This summary and that of the files after these, as one (neither is changed)."""
        a, b = self, later
        firsts = [t for t in (a.first_ns, b.first_ns) if t]
        return RecordSummary(
            totals=_sum(a.totals, b.totals),
            allowed=_sum(a.allowed, b.allowed),
            denied=_sum(a.denied, b.denied),
            unplaced=_sum(a.unplaced, b.unplaced),
            unplaced_examples=(a.unplaced_examples + b.unplaced_examples)[:EXAMPLES],
            outside=_sum(a.outside, b.outside),
            outside_examples=(a.outside_examples + b.outside_examples)[:EXAMPLES],
            no_policy={d: _sum(a.no_policy[d], b.no_policy[d]) for d in ("egress", "ingress")},
            by_rule=_sum_keyed(a.by_rule, b.by_rule),
            logged=_sum_keyed(a.logged, b.logged),
            decisions=a.decisions + b.decisions,
            reported=a.reported + b.reported,
            disagreement_examples=(a.disagreement_examples + b.disagreement_examples)[:EXAMPLES],
            first_ns=min(firsts) if firsts else 0,
            last_ns=max(a.last_ns, b.last_ns),
            files=_joined_files(a.files, b.files),
            seconds=max(a.seconds, b.seconds),
            interrupted=a.interrupted or b.interrupted,
        )


def _joined_files(a: list[FileReport], b: list[FileReport]) -> list[FileReport]:
    """The reports of ``a``'s files then ``b``'s, a file read in parts (Parquet row groups)
    reported once."""
    if a and b and a[-1].continued_by(b[0]):
        return [*a[:-1], a[-1].joined(b[0]), *b[1:]]
    return [*a, *b]


def merge_summaries(*parts: RecordSummary) -> RecordSummary:
    """The summaries of consecutive parts of the input, in order, as one."""
    merged = RecordSummary()
    for part in parts:
        merged = merged.merge(part)
    return merged


class RecordReplay:
    """One run over flow record files with one engine."""

    def __init__(
        self,
        engine: NativeEngine,
        default: str | None = None,
        out: IO[bytes] | None = None,
        format: str | None = None,
        logs: bool = False,
        out_name: str | None = None,
        services: ServiceMap | None = None,
        judge: RecordJudge | None = None,
    ) -> None:
        """``judge``: a judge made by ``new_judge`` for this engine, default, Services and
        ``logs``, started over and used here (one that keeps its keys, from run to run)."""
        self.engine = engine
        self.out_name = out_name  # named in an error writing ``out``
        self.defaults = {} if default is None else {"default_pod": default, "default_host": default}
        self.out = out
        self.format = format
        self.logs = logs
        self.summary = RecordSummary()
        self.files: list[FileReport] = []
        self.services = services if services is not None else ServiceMap(engine.inventory)
        if judge is None:
            judge = new_judge([engine], default, self.services, logs=logs)
        else:
            judge.restart()
        self.judge = judge
        self._lines: RecordLines | None = None  # --out's line writer, made with the first chunk
        self._stop = False

    def run(
        self,
        paths: list[str],
        progress: Callable[[int], None] | None = None,
        names: list[str] | None = None,
        parts: list[tuple[int, int, int] | None] | None = None,
    ) -> RecordSummary:
        """Judges ``paths`` in order (``names``: what reports call them, when not their paths;
        ``parts``: per path, only these row groups of a Parquet file)."""
        reader = RecordReader(paths, self.engine.inventory, self.format, names, parts)
        reader.prepare()
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
        s.by_rule, s.logged = named_counts(self.judge, self.engine)
        s.files = self.files
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
                s.outside_examples.append(
                    f"{where}: {address_text(h['src_addr'])} -> {address_text(h['dst_addr'])}: "
                    "neither end is an endpoint of the inventory"
                )
            else:
                at = REPORTED_AT.get(int(c["reported_at"]))
                side = v[at] if at is not None else None
                if side is not None and side["present"]:
                    there = "the source's egress" if at == "egress" else "the destination's ingress"
                    policy = "allow" if side["allow"] else "deny"
                    said = f"the record says {REPORTED[int(c['reported'])]} at {there}, policy says {policy} there"
                else:
                    said = f"the record says {REPORTED[int(c['reported'])]}, policy says {'allow' if v['allow'] else 'deny'}"
                s.disagreement_examples.append(f"{where}: {self._tuple_text(h)}: {said}")

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
            self._lines = RecordLines(
                [json.dumps(protocol_name(p)) for p in range(256)],
                [json.dumps(ORIENTATION[i]) for i in range(len(ORIENTATION))],
                [json.dumps(REPORTED[i]) for i in range(len(REPORTED))],
                [json.dumps(e.to_json()) for e in self.services.entries],
            )
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
            raise RecordError(
                f"--out {self.out_name or getattr(self.out, 'name', '')}: cannot write: {e.strerror or e}"
            ) from None

    def summary_json(self) -> dict[str, Any]:
        return summary_json(self.summary, self.logs)

    @property
    def unreadable(self) -> bool:
        """Nothing could be read from any file (every record was a problem)."""
        return self.summary.totals[0] == 0 and any(f.problems for f in self.summary.files)


def summary_json(s: RecordSummary, logs: bool) -> dict[str, Any]:
    """The summary as ``replay --traffic --json`` prints it."""
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
        "by_rule": rule_rows(s.by_rule),
        "logged": logged_rule_rows(s.logged) if logs else None,
        "reported": {
            "records": [
                {"reported": r, "verdict": o, "records": n} for (r, o), n in sorted(s.reported.items(), key=str)
            ],
            "agree": agree,
            "disagree": disagree,
            "examples": s.disagreement_examples,
        },
        "first": s.first_ns / 1e9 if s.first_ns else None,
        "last": s.last_ns / 1e9 if s.last_ns else None,
        "files": [f.to_json() for f in s.files],
        "problems": sum(sum(f.problems.values()) for f in s.files),
        "seconds": round(s.seconds, 6),
        "records_per_second": round(s.totals[0] / s.seconds, 1) if s.seconds > 0 else 0.0,
        "decisions": s.decisions,
        "interrupted": s.interrupted,
    }


def print_summary(doc: dict[str, Any], out: Any, err: Any, escape: Callable[[str], str], arrow: str, dash: str) -> None:
    """``replay --traffic``'s human summary (``doc``: ``summary_json``)."""

    def m(values: dict[str, int]) -> str:
        return f"{values['records']:,} records, {values['flows']:,} flows, {values['packets']:,} packets, {values['bytes']:,} bytes"

    out.print(
        f"{doc['records']:,} flow records ({doc['flows']:,} flows, {doc['packets']:,} packets, {doc['bytes']:,} bytes) "
        f"from {len(doc['files'])} file{'s' if len(doc['files']) != 1 else ''} {dash} {doc['records_per_second']:,.0f} records/s"
    )
    out.print(f"  [green]allowed[/green]: {m(doc['allowed'])}")
    out.print(f"  [red]denied[/red] : {m(doc['denied'])}")
    if doc["unplaced"]["records"]:
        out.print(f"  [yellow]not judged[/yellow]: {m(doc['unplaced'])}: an end the inventory cannot place")
        for e in doc["unplaced"]["examples"]:
            out.print(f"      {escape(e)}")
    if doc["outside"]["records"]:
        out.print(
            f"  [yellow]outside[/yellow]: {m(doc['outside'])}: judged, but neither end is an endpoint of the inventory"
        )
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
            out.print(
                f"  {row['records']:>8,} {row['flows']:>9,} {row['packets']:>11,} {row['bytes']:>13,}  {direction:<7} "
                f"[{colour}]{row['verdict']:<5}[/{colour}] {_by_what(row, escape)}"
            )
        none = doc["no_policy"][direction]
        if none["records"]:
            out.print(
                f"  {none['records']:>8,} {none['flows']:>9,} {none['packets']:>11,} {none['bytes']:>13,}  {direction:<7} "
                "no policy applies at this end"
            )
    for f in doc["files"]:
        for reason, n in f["problems"].items():
            out.print(
                f"[yellow]{escape(f['file'])}[/yellow]: {n:,} record{'s' if n != 1 else ''} {reason.replace('_', ' ')}"
            )
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
        return f"by {escape(row['policy'] or 'profiles')}" + (
            f" rule {escape(str(row['rule']))}" if row["rule"] is not None else ""
        )
    return "by the default"


__all__ = ["RecordReplay", "RecordSummary", "merge_summaries", "print_summary", "summary_json"]
