"""Replaying captures for verdicts (``pyclassify replay``). One concept, in one module although
it is long: one pass over the packets (``Replay``), whose steps — reading, judging by lanes,
counting, the per-packet lines and capture writers, the summary — share that pass's state.

Captures are read and decoded in Cython (``pyclassify.capture``), judged in Rust with
connection tracking (``NativeEngine.judge``), batch by batch: no Python object per packet on
the way. Python only sums the verdict arrays with numpy, and formats per-packet lines when the
user asks for ``--out`` (that is output, not classification).

Packets inside overlay tunnels (``pyclassify.tunnels``) are judged by the packet they carry; their
lines show the outer header too (``"outer"``), and one whose tunnel cannot be read is "not-judged":
denied, and counted apart from the malformed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import numpy as np
import numpy.typing as npt

from pyclassify import httprules
from pyclassify._engine import ConnTrack, FlowSet, VerdictTally
from pyclassify.batch import ERROR_NAMES, address_text
from pyclassify.capture import Batch, Capture, CaptureWriter, ReadAhead, open_capture, read_ahead
from pyclassify.counted import count
from pyclassify.engine import (
    CT_NEW_PICKUP,
    CT_NEW_PICKUP_REPLY,
    HTTP_ERROR_NAMES,
    PACKET_DENIED_CONNECTION,
    PACKET_ESTABLISHED,
    PACKET_INVALID,
    PACKET_MALFORMED,
    PACKET_NOT_IP,
    PACKET_POLICY,
    VERDICT_DTYPE,
    Lane,
    NativeEngine,
    Tracker,
)
from pyclassify.flow import Verdict
from pyclassify.ir import Direction
from pyclassify.kinds.common import ICMP_PROTOCOLS, PORT_PROTOCOLS, protocol_name
from pyclassify.output import OutputFile, SymlinkRefused
from pyclassify.services import ServiceMap
from pyclassify.tunnels import DEFAULT_TUNNELS, ENCAP_NAMES, TunnelPorts, outer_json

PACKET_REASONS = {
    PACKET_POLICY: "policy",
    PACKET_ESTABLISHED: "established",
    PACKET_MALFORMED: "malformed",
    PACKET_INVALID: "invalid",
    PACKET_DENIED_CONNECTION: "denied-connection",
    PACKET_NOT_IP: "not-ip",
}
#: ``--out``'s ``opened_by`` of a packet that picked a TCP connection up mid-stream: which end
#: policy judged as the connection's opener (the end with the higher port, the client).
PICKUP_OPENER = {CT_NEW_PICKUP: "src", CT_NEW_PICKUP_REPLY: "dst"}
#: The reason of a packet inside a tunnel that could not be read: the engine denies it as
#: malformed; the output says it was not judged, and why (``"error"``).
NOT_JUDGED = "not-judged"


def _opener_ends(v: Any, src: str | None, dst: str | None) -> tuple[str | None, str | None]:
    """The addresses whose endpoints a verdict's egress and ingress sides judged: the packet's
    own ends, swapped for a connection picked up from a packet its server sent."""
    return (dst, src) if int(v["ct_state"]) == CT_NEW_PICKUP_REPLY else (src, dst)


#: ``PacketHeader.ifindex`` of a pcapng packet whose interface id no Interface Description
#: Block described (the reader cannot give it a link type).
NO_INTERFACE = 0xFFFFFFFF


class ReplayError(ValueError):
    """A replay that cannot go on as asked (its message says why)."""


@dataclass
class ReplaySummary:
    packets: int = 0
    allowed: int = 0
    denied: int = 0
    malformed: int = 0
    #: packets inside a tunnel that could not be read (not in ``malformed``)
    not_judged: int = 0
    established: int = 0
    invalid: int = 0
    denied_connection: int = 0  # packets of connections whose opening packet policy denied
    not_ip: int = 0  # ARP and other frames that are not IP: passed, as a firewall passes them
    pickups: int = 0  # packets that picked a TCP connection up mid-stream (judged by policy)
    #: judged by policy (the rest: established, denied connection, malformed, not judged, invalid, not IP)
    policy: int = 0
    policy_allowed: int = 0
    # packets judged by policy with no policy at that end, per direction
    no_policy: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    interrupted: bool = False
    flow_set: FlowSet = field(default_factory=FlowSet, repr=False)  # native: no Python object per flow
    # (direction, tier, source_kind, source, rule, reason, allow) -> packets
    by_rule: Counter = field(default_factory=Counter, repr=False)
    decode_errors: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    #: captures that could not be read as captures at all (a problem, and no packet)
    unreadable: list[str] = field(default_factory=list)
    #: captures truncated or rewritten by another process while they were read: their packets
    #: after that are missing (a problem; the run fails, with the summary of what was read)
    cut_short: list[str] = field(default_factory=list)
    #: with staged policies: packets by their staged verdict ("allowed", "denied") and by how it
    #: differs ("would_deny": allowed now, denied staged; "would_allow"), and staged decisions
    #: by rule as ``by_rule``
    staged: Counter = field(default_factory=Counter)
    staged_by_rule: Counter = field(default_factory=Counter, repr=False)
    #: with http rules: connections admitted provisionally, requests judged, streams denied
    #: (``httprules.count_outcomes``)
    http: Counter = field(default_factory=Counter)
    #: packets judged by the packet inside their tunnel, by tunnel kind ("vxlan", ...)
    decapsulated: Counter = field(default_factory=Counter)
    #: packets inside a tunnel that could not be read, by tunnel kind and error kind
    not_judged_by: Counter = field(default_factory=Counter)

    #: connections counted by summaries merged into this one (their ``FlowSet`` is not kept:
    #: it holds no Python objects to send or join); disjoint from ``flow_set``'s
    merged_flows: int = 0

    @property
    def flows(self) -> int:
        return len(self.flow_set) + self.merged_flows

    @property
    def rate(self) -> float:
        return self.packets / self.seconds if self.seconds > 0 else 0.0

    def __getstate__(self) -> dict[str, Any]:
        # sent between processes with its connections as a count (a FlowSet is not picklable)
        state = dict(self.__dict__)
        state["merged_flows"] = self.flows
        state["flow_set"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.flow_set = FlowSet()

    def merge(self, other: ReplaySummary) -> None:
        """Adds ``other``'s counts to these (exact when the two counted different packets and
        different connections: partitions of a capture by connection); its problems follow
        these, its time is the longer."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "flow_set":
                self.merged_flows += len(theirs)
            elif f.name == "seconds":
                self.seconds = max(mine, theirs)
            elif f.name == "interrupted":
                self.interrupted = mine or theirs
            elif isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, list):
                mine.extend(theirs)
            else:
                setattr(self, f.name, mine + theirs)


def merge_replay_summaries(*parts: ReplaySummary) -> ReplaySummary:
    """One summary of ``parts`` (``ReplaySummary.merge``), in their order."""
    merged = ReplaySummary()
    for part in parts:
        merged.merge(part)
    return merged


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], dtype=np.uint64)


def flow_hashes(headers: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """Per packet, a 64-bit hash of its 5-tuple that is the same for both directions
    (vectorised; flows are told apart exactly up to 64-bit hash collisions)."""
    with np.errstate(over="ignore"):

        def end(addr: npt.NDArray[Any], port: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
            words = np.ascontiguousarray(addr).view(np.uint64)  # two 64-bit words per address
            h = words[:, 0] * _MIX[0] ^ words[:, 1] * _MIX[1] ^ port.astype(np.uint64) * _MIX[2]
            return h ^ (h >> np.uint64(29))

        a = end(headers["src_addr"], headers["sport"])
        b = end(headers["dst_addr"], headers["dport"])
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        return lo * _MIX[1] ^ (hi + headers["protocol"].astype(np.uint64)) * _MIX[0]


def take_rows(records: npt.NDArray[Any], rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """``records[rows]`` of a structured array, copied as raw records (numpy's own indexing of a
    structured dtype goes field by field, some 70 times slower)."""
    raw = np.ascontiguousarray(records).view(np.dtype((np.void, records.dtype.itemsize)))
    return np.take(raw, rows).view(records.dtype)


def _add_by_rule(by_rule: Counter, rows: list[tuple[tuple[int, int, int, int, int, int, int], int]]) -> None:
    """A batch's packets by the decision at each end (``VerdictTally.add``) into ``by_rule``."""
    for (direction, *decision), n in rows:
        by_rule[(_DIRECTIONS[direction], *decision)] += n


_DIRECTIONS = ("egress", "ingress")


class Replay:
    """One replay run over one or more captures with one engine and one connection tracker."""

    def __init__(
        self,
        engine: NativeEngine,
        conntrack: bool = True,
        default: str | None = None,
        out: IO[str] | None = None,
        allowed_path: str | None = None,
        denied_path: str | None = None,
        flows: bool = False,
        staged: NativeEngine | None = None,
        dns: Any = None,
        http: bool = False,
        tunnels: TunnelPorts = DEFAULT_TUNNELS,
        follow_symlinks: bool = False,
    ) -> None:
        self.engine = engine
        # which tunnels are opened: their packets judged by the packet they carry
        self.tunnels = tunnels
        # http rules: each packet's TCP payload goes to the engine with its header, which
        # admits connections up to their request and judges each request (pyclassify.httprules)
        self.http = http
        # DNS answers in the capture teach the addresses of domain rules (pyclassify.domains):
        # learned in the batch's judge call, each right after its own packet
        self.dns = dns
        self.tracker = Tracker() if conntrack else None
        # The staged policies enforced (``Project.staged``): the same packets judged again, with
        # connections of their own, beside the real verdicts; they change none of them.
        self.staged = staged
        self._staged_trackers: dict[int | None, ConnTrack] | None = None
        if staged is not None:
            self._staged_trackers = {None: Tracker()} if conntrack else {}
        self._staged_verdicts: npt.NDArray[Any] | None = None  # of the batch being written
        self.defaults = {} if default is None else {"default_pod": default, "default_host": default}
        self.out = out
        self.per_flow = flows  # --out gets one line per flow instead of per packet
        self._flows: dict[int, dict[str, Any]] = {}
        # Address -> "ns/pod" (or host endpoint) of its owner (``Inventory.owner_of``), for the
        # addresses the inventory knows.
        self._names: dict[str, str] = {}
        self.allowed_path, self.denied_path = allowed_path, denied_path
        # --allowed/--denied go to temporary files put in place when the run succeeds
        # (pyclassify.output); a link as their path is refused unless this is set
        self.follow_symlinks = follow_symlinks
        self._outputs: list[OutputFile] = []
        self.summary = ReplaySummary()
        # the verdicts counted natively, batch by batch, into the summary
        self._tally, self._staged_tally = VerdictTally(), VerdictTally()
        self._writers: list[CaptureWriter] = []
        self._writer_by_kind: dict[str, tuple[CaptureWriter, tuple]] = {}
        self._index = 0
        self._packets_read = 0  # packets of the captures read (a partition counts only its own)
        self._stop = False
        # Service virtual addresses, judged as kube-proxy delivers them (pyclassify.services);
        # one connection tracker per backend choice, apart from the main one.
        self.services = ServiceMap(engine.inventory)
        self._service_trackers: dict[int | None, ConnTrack] = {None: self.tracker} if self.tracker is not None else {}
        self._service_entries: npt.NDArray[np.int64] | None = None  # of the batch being written

    def _judge(self, batch: Batch, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[Any]:
        """The batch's verdicts (and with staged policies, ``_staged_verdicts`` beside them), in
        one native call over lanes (``NativeEngine.judge_lanes``): per engine, the packets as
        captured, and those to or from a Service's virtual address once per backend choice.
        Each DNS answer in the batch is learned once every lane has judged the packets up to it,
        before the packets that follow it. ``rows`` (ascending): only those packets are judged,
        the verdicts parallel to them (a partition of a capture, ``pyclassify.capturepartition``);
        only the DNS answers among them are learned."""
        dns, segments = self._payloads(batch)
        headers = np.ascontiguousarray(batch.headers)
        quotes = None if batch.quotes is None else np.ascontiguousarray(batch.quotes)
        if rows is not None:
            headers = take_rows(headers, rows)
            quotes = None if quotes is None else take_rows(quotes, rows)
            segments = None if segments is None else segments[rows]
            if dns is not None and len(dns):
                # the answers' rows renumbered among the packets judged (data offsets stay)
                at = np.searchsorted(rows, dns[:, 0])
                inside = at < len(rows)
                inside[inside] = rows[at[inside]] == dns[inside, 0]
                dns = np.column_stack([at[inside], dns[inside, 1], dns[inside, 2]]).astype(np.int64)
        entry, forward = self.services.match(headers)
        self._service_entries = entry if (entry >= 0).any() else None
        main = self._lanes(self.engine, self._service_trackers, headers, quotes, segments, entry, forward)
        staged = None
        if self.staged is not None:
            assert self._staged_trackers is not None
            staged = self._lanes(self.staged, self._staged_trackers, headers, quotes, segments, entry, forward)
        learn = dns is not None and len(dns) > 0
        tally = self.engine.judge_lanes(
            headers,
            main + (staged or []),
            **self.defaults,
            data=batch.data if learn or segments is not None else None,
            dns=dns if learn else None,
        )
        if tally is not None:
            assert self.dns is not None
            self.dns.count(tally)
        if staged is not None:
            self._staged_verdicts = self._combine(staged, entry)
        return self._combine(main, entry)

    def _payloads(self, batch: Any) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
        """The batch's DNS answers (``DnsLearner.answers_in``, found through its own tunnels)
        when DNS is learned, and its TCP payloads (``httprules.segments``) when http rules
        judge them."""
        dns = None
        if self.dns is not None:
            dns = self.dns.answers_in(batch)
            if len(dns) and batch.tunnels != DEFAULT_TUNNELS:
                dns = tunnelled_payloads(batch, dns)
        segments = httprules.segments(batch) if self.http and self.tracker is not None else None
        return dns, segments

    def _lanes(
        self,
        engine: NativeEngine,
        trackers: dict[int | None, ConnTrack],
        headers: npt.NDArray[Any],
        quotes: npt.NDArray[Any] | None,
        segments: npt.NDArray[Any] | None,
        entry: npt.NDArray[Any],
        forward: npt.NDArray[Any],
    ) -> list[Lane]:
        """``engine``'s lanes for a batch: the packets as captured (connections tracked in
        ``trackers[None]``), then, for packets to or from a Service's virtual address, one lane
        per backend choice ``c`` (tracked in ``trackers[c]``) with every packet of an entry that
        has more than ``c`` backends, rewritten to backend ``c`` — so a connection is always
        judged in the same lanes, whatever else its batch holds."""
        tracked = self.tracker is not None

        def tracker(key: int | None) -> ConnTrack | None:
            if not tracked:
                return None
            found = trackers.get(key)
            if found is None:
                found = trackers[key] = Tracker()
            return found

        def lane(rows: npt.NDArray[np.int64] | None, lane_headers: npt.NDArray[Any], key: int | None) -> Lane:
            if rows is None:  # every row
                return Lane(
                    engine, np.arange(len(headers), dtype=np.int64), lane_headers, tracker(key), quotes, segments
                )
            return Lane(
                engine,
                rows,
                lane_headers,
                tracker(key),
                None if quotes is None else quotes[rows],
                None if segments is None else segments[rows],
            )

        if self._service_entries is None:
            return [lane(None, headers, None)]
        service = entry >= 0
        plain = np.flatnonzero(~service)
        lanes = [lane(plain, headers[plain], None)]
        idx = np.flatnonzero(service)
        counts = self.services.backend_count[entry[idx]]
        for choice in range(int(counts.max())):
            rows = idx[counts > choice]
            rewritten = self.services.rewrite(headers[rows], entry[rows], forward[rows], choice)
            lanes.append(lane(rows, rewritten, choice))
        return lanes

    def _combine(self, lanes: list[Lane], entry: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The batch's verdicts from its lanes (``_lanes``): a Service packet is allowed only if
        every backend choice it was judged for allows it (the first that denies speaks for it),
        and denied if its entry has no backend (kube-proxy delivers nothing)."""
        plain, *choices = lanes
        if not choices:
            return plain.out
        out = np.zeros(len(entry), dtype=VERDICT_DTYPE)
        out[plain.rows] = plain.out
        idx = choices[0].rows  # every Service packet: each is judged for backend 0 at least
        combined = choices[0].out.copy()
        for lane in choices[1:]:
            at = np.searchsorted(idx, lane.rows)
            denies = (lane.out["allow"] == 0) & (combined["allow"][at] == 1)
            combined[at[denies]] = lane.out[denies]
        empty = self.services.no_backend[entry[idx]]
        if empty.any():
            combined["allow"][empty] = 0
            combined["reason"][empty] = PACKET_POLICY
            combined["egress"]["present"][empty] = 0
            combined["ingress"]["present"][empty] = 0
        out[idx] = combined
        return out

    def run(self, paths: list[str], progress: Callable[[int], None] | None = None) -> ReplaySummary:
        """Replays ``paths`` in order. A Ctrl-C (SIGINT) lets the batch being judged finish —
        its verdicts counted and written, so the summary and every output agree — and then
        stops; a second one interrupts at once."""
        start = time.perf_counter()
        previous = self._defer_interrupts()
        completed = False
        try:
            for path in paths:
                if self._stop:
                    break
                self._replay_one(path, progress)
            completed = True
        except KeyboardInterrupt:
            self.summary.interrupted = True
            completed = True
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if self._stop:
                self.summary.interrupted = True
            self.summary.seconds = time.perf_counter() - start
            failed: ReplayError | None = None
            for which, (w, _) in self._writer_by_kind.items():  # every one closed, even after a failure
                try:
                    with self._writing(f"--{which}", self.allowed_path if which == "allowed" else self.denied_path):
                        w.close()
                except ReplayError as e:
                    failed = failed or e
            if self.out is not None and self.per_flow and failed is None:
                with self._writing("--out", self._out_name()):
                    for flow in self._flows.values():
                        self.out.write(json.dumps(flow) + "\n")
            # In place only when the run went through every capture it could read: an earlier
            # file of the name stays as it was otherwise.
            keep = completed and failed is None and not self.summary.unreadable
            for output in self._outputs:
                if not keep:
                    output.discard()
                    continue
                try:
                    with self._writing(output.option, output.path):
                        output.commit()
                except ReplayError as e:
                    failed, keep = failed or e, False
            if failed is not None:
                raise failed
        return self.summary

    def _out_name(self) -> str:
        return str(getattr(self.out, "name", "") or "")

    @contextlib.contextmanager
    def _writing(self, option: str, path: str | None) -> Iterator[None]:
        """An output that cannot be written (a full disk, ``/dev/full``, a vanished mount) is a
        ``ReplayError`` naming the option and the file, not an errno without a name."""
        try:
            yield
        except OSError as e:
            raise ReplayError(f"{option} {path}: cannot write: {e.strerror or e}") from None

    def _defer_interrupts(self) -> Any:
        """Turns the first SIGINT into a request to stop after the current batch; returns the
        handler to restore (None off the main thread, where signals cannot be handled)."""
        self._stop = False
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:  # the caller handles SIGINT its own way
            return None

        def stop(signum: int, frame: Any) -> None:
            if self._stop:  # asked twice: stop now
                raise KeyboardInterrupt
            self._stop = True

        signal.signal(signal.SIGINT, stop)
        return previous

    def _writer(self, which: str, cap: Any) -> CaptureWriter | None:
        """The allowed/denied writer, made like the first capture; later captures must share
        its format and link types (a pcap has one link type)."""
        path = self.allowed_path if which == "allowed" else self.denied_path
        if path is None:
            return None
        signature = (cap.format, cap.nanosecond, tuple(i.linktype for i in cap.interfaces))
        found = self._writer_by_kind.get(which)
        if found is None:
            try:
                output = OutputFile(f"--{which}", path, binary=True, follow_symlinks=self.follow_symlinks)
            except OSError as e:
                raise ReplayError(f"--{which} {path}: cannot open for writing: {e.strerror or e}") from None
            except SymlinkRefused as e:
                raise ReplayError(str(e)) from None
            self._outputs.append(output)
            writer = CaptureWriter.like(cap, cast(BinaryIO, output.file))  # opened binary above
            self._writers.append(writer)
            self._writer_by_kind[which] = (writer, signature)
            return writer
        writer, first = found
        if signature != first:
            raise ReplayError(
                f"{cap.name}: its format or link types differ from the first capture's; "
                f"write --{which} captures in separate runs"
            )
        return writer

    def _replay_one(self, path: str, progress: Callable[[int], None] | None) -> None:
        # Read in windows, not memory-mapped: a capture another process truncates underneath
        # would make a mapped read fault (SIGBUS); read, it just ends early, and is reported.
        before = file_state(path)
        packets_before = self._packets_read
        no_interface = 0  # pcapng packets naming an interface no IDB describes (ifindex all ones)
        with open_capture(path, stream=True, tunnels=self.tunnels) as cap:
            with self._batches(cap, before) as batches:  # (``batches`` knows what they held)
                for batch in batches:
                    self._packets_read += len(batch)
                    if cap.format == "pcapng":
                        no_interface += int(np.count_nonzero(batch.headers["ifindex"] == NO_INTERFACE))
                    verdicts = self._judge(batch)
                    self._account(batch, verdicts)
                    # Made after the first batch: pcapng interfaces are known by then.
                    allowed_w, denied_w = self._writer("allowed", cap), self._writer("denied", cap)
                    with self._writing("--allowed", self.allowed_path):
                        if allowed_w is not None:
                            allowed_w.write(batch, verdicts["allow"] == 1)
                    with self._writing("--denied", self.denied_path):
                        if denied_w is not None:
                            denied_w.write(batch, verdicts["allow"] == 0)
                    if self.out is not None and self.per_flow:
                        self._collect_flows(batch, verdicts)
                    elif self.out is not None:
                        with self._writing("--out", self._out_name()):
                            self._write_lines(batch, verdicts)
                    if progress is not None:
                        progress(len(batch))
                    if self._stop:
                        break
            read = self._packets_read - packets_before
            file_report(self.summary, batches, path, before, no_interface, read, self._stop)

    @contextlib.contextmanager
    def _batches(self, cap: Capture, state: tuple[int, int, int] | None) -> Iterator[Capture | ReadAhead]:
        """A capture's batches: from a file, each read while the one before is judged
        (``read_ahead``), unless --allowed/--denied write captures made like it (whose
        interfaces they ask for as they go); from a pipe or stdin, as they come. What is
        yielded also says what the batches taken so far held (``counts``, ``problems``)."""
        if state is None or self.allowed_path is not None or self.denied_path is not None:
            yield cap
            return
        with read_ahead(cap) as batches:
            yield batches

    def _account(self, batch: Batch, verdicts: npt.NDArray[Any]) -> None:
        s = self.summary
        n, allowed, reasons, policy_allowed, pickups, no_policy, by_rule = self._tally.add(verdicts)
        s.packets += n
        s.allowed += allowed
        s.denied += n - allowed
        if batch.outers is not None:  # the batch has packets found inside a tunnel
            malformed = verdicts["reason"] == PACKET_MALFORMED
            encap = batch.headers["encap"]
            tunnelled = encap != 0
            unread = malformed & tunnelled
            s.not_judged += int(np.count_nonzero(unread))
            for kind, count in zip(*np.unique(encap[tunnelled & ~malformed], return_counts=True)):
                s.decapsulated[ENCAP_NAMES[int(kind)]] += int(count)
            if unread.any():
                pairs = np.stack([encap[unread], batch.headers["error_kind"][unread]], axis=1)
                for (kind, err), count in zip(*np.unique(pairs, axis=0, return_counts=True)):
                    s.not_judged_by[(ENCAP_NAMES[int(kind)], ERROR_NAMES[int(err)])] += int(count)
            s.malformed += int(np.count_nonzero(malformed & ~tunnelled))
        else:
            s.malformed += reasons[PACKET_MALFORMED]
        s.established += reasons[PACKET_ESTABLISHED]
        s.invalid += reasons[PACKET_INVALID]
        s.denied_connection += reasons[PACKET_DENIED_CONNECTION]
        s.not_ip += reasons[PACKET_NOT_IP]
        s.policy += reasons[PACKET_POLICY]
        s.policy_allowed += policy_allowed
        s.pickups += pickups
        s.no_policy["egress"] += no_policy[0]
        s.no_policy["ingress"] += no_policy[1]
        _add_by_rule(s.by_rule, by_rule)
        httprules.count_outcomes(s.http, verdicts)
        undecoded = verdicts["reason"] == PACKET_MALFORMED
        if reasons[PACKET_NOT_IP]:
            undecoded |= verdicts["reason"] == PACKET_NOT_IP
        self._add_flows(batch, undecoded)
        staged = self._staged_verdicts
        if staged is not None:
            now, then = verdicts["allow"] != 0, staged["allow"] != 0
            s.staged["allowed"] += int(np.count_nonzero(then))
            s.staged["denied"] += n - int(np.count_nonzero(then))
            s.staged["would_deny"] += int(np.count_nonzero(now & ~then))
            s.staged["would_allow"] += int(np.count_nonzero(~now & then))
            _add_by_rule(s.staged_by_rule, self._staged_tally.add(staged, outcomes_by_rule=True)[-1])

    def _add_flows(self, batch: Batch, undecoded: npt.NDArray[np.bool_]) -> None:
        """The batch's connections into the summary's ``flow_set`` (those of packets that could
        not be decoded left out)."""
        self.summary.flow_set.add(np.ascontiguousarray(batch.headers), undecoded)

    def _side_json(
        self, side: Any, direction: Direction, engine: NativeEngine | None = None, subject: str | None = None
    ) -> dict[str, Any] | None:
        """A side's decision as ``--out`` writes it; ``subject``: the address of that side's
        end, whose endpoint a decision at a tier's end names the policies of."""
        decision = (engine or self.engine).side_decision(side, direction, subject)
        if decision is None:
            return None
        doc = decision.to_json()
        doc.pop("logs", None)
        return doc

    def _collect_flows(self, batch: Batch, verdicts: npt.NDArray[Any]) -> None:
        """One record per flow, in order of first packet: its first packet's 5-tuple, packet
        counts by verdict, and the decision policy made on it (the first judged packet)."""
        hashes = flow_hashes(batch.headers).tolist()
        for k, (h, v) in enumerate(zip(batch.headers, verdicts)):
            reason = _reason(h, v)
            flow = self._flows.get(hashes[k])
            if flow is None:
                line = self._line(h, v, reason, batch.outers, k)
                flow = {
                    key: line[key] for key in ("src", "dst", "src_endpoint", "dst_endpoint", "proto", "sport", "dport")
                }
                if "outer" in line:
                    flow["outer"] = line["outer"]
                service = self._service_json(k)
                if service is not None:
                    flow["service"] = service
                flow.update(
                    {
                        "first_index": self._index,
                        "first_ts": line["ts"],
                        "last_ts": line["ts"],
                        "packets": 0,
                        "allowed": 0,
                        "denied": 0,
                        "verdict": None,
                        "egress": None,
                        "ingress": None,
                    }
                )
                self._flows[hashes[k]] = flow
            flow["packets"] += 1
            flow["allowed" if v["allow"] else "denied"] += 1
            flow["last_ts"] = int(h["ts_ns"]) / 1e9
            # the flow's decision: its first packet judged by policy; for a connection admitted
            # provisionally, each request judged after it, up to the first denial
            http = httprules.outcome_name(int(v["http"])) if reason == "policy" else None
            if reason == "policy" and (
                flow["verdict"] is None or (http not in (None, "provisional") and flow["verdict"] == "allow")
            ):
                flow["verdict"] = "allow" if v["allow"] else "deny"
                client, server = _opener_ends(v, flow["src"], flow["dst"])
                flow["egress"] = self._side_json(v["egress"], Direction.EGRESS, subject=client)
                flow["ingress"] = self._side_json(v["ingress"], Direction.INGRESS, subject=server)
                opener = PICKUP_OPENER.get(int(v["ct_state"]))
                if opener is not None:
                    flow["pickup"], flow["opened_by"] = "mid-stream", opener
                if http is not None:
                    flow["http"] = http
            if self._staged_verdicts is not None and "staged" not in flow:
                sv = self._staged_verdicts[k]
                if PACKET_REASONS[int(sv["reason"])] == "policy":
                    flow["staged"] = self._staged_json(sv, h, flow["src"], flow["dst"])
            self._index += 1

    def _line(self, h: Any, v: Any, reason: str, outers: npt.NDArray[Any] | None = None, k: int = 0) -> dict[str, Any]:
        version = int(h["ip_version"])
        decodable = reason not in ("malformed", NOT_JUDGED) and version in (4, 6)
        proto = int(h["protocol"])
        has_ports = decodable and proto in PORT_PROTOCOLS and bool(h["flags"] & 32)
        src = address_text(h["src_addr"], version) if decodable else None
        dst = address_text(h["dst_addr"], version) if decodable else None
        client, server = _opener_ends(v, src, dst)
        line: dict[str, Any] = {
            "index": self._index,
            "ts": int(h["ts_ns"]) / 1e9,
            "src": src,
            "dst": dst,
            "src_endpoint": None,
            "dst_endpoint": None,
            "proto": protocol_name(proto) if decodable else None,
            "sport": int(h["sport"]) if has_ports else None,
            "dport": int(h["dport"]) if has_ports else None,
            "verdict": "allow" if v["allow"] else "deny",
            "reason": reason,
            "egress": self._side_json(v["egress"], Direction.EGRESS, subject=client) if reason == "policy" else None,
            "ingress": self._side_json(v["ingress"], Direction.INGRESS, subject=server) if reason == "policy" else None,
        }
        if decodable:
            line["src_endpoint"] = self._owner_ref(line["src"])
            line["dst_endpoint"] = self._owner_ref(line["dst"])
        if decodable and proto in ICMP_PROTOCOLS:
            line["icmp_type"], line["icmp_code"] = int(h["icmp_type"]), int(h["icmp_code"])
        opener = PICKUP_OPENER.get(int(v["ct_state"]))
        if opener is not None:
            # a TCP connection first seen without its SYN, judged as its client opened it: for
            # "dst", egress and ingress are the decisions on the reverse of this packet
            line["pickup"], line["opened_by"] = "mid-stream", opener
        http = httprules.outcome_name(int(v["http"]))
        if http is not None:
            line["http"] = http
        if int(h["encap"]) and outers is not None:
            line["outer"] = outer_json(outers[k])
            if reason == NOT_JUDGED:
                line["error"] = ERROR_NAMES[int(h["error_kind"])]
        return line

    def _staged_json(self, sv: Any, h: Any, src: str | None = None, dst: str | None = None) -> dict[str, Any]:
        """A packet's staged verdict: as a line's own, plus ``summary`` ("would deny by ...")
        when policy judged it."""
        assert self.staged is not None
        reason = PACKET_REASONS[int(sv["reason"])]
        if reason == "malformed" and int(h["encap"]):
            reason = NOT_JUDGED
        doc: dict[str, Any] = {"verdict": "allow" if sv["allow"] else "deny", "reason": reason}
        if reason == "policy":
            client, server = _opener_ends(sv, src, dst)
            ends = {"egress": client, "ingress": server}
            sides = {
                name: self.staged.side_decision(sv[name], d, ends[name])
                for name, d in (("egress", Direction.EGRESS), ("ingress", Direction.INGRESS))
            }
            doc.update({name: self._side_json(sv[name], Direction(name), self.staged, ends[name]) for name in sides})
            doc["summary"] = Verdict(doc["verdict"], sides["egress"], sides["ingress"]).would()
        return doc

    def _service_json(self, k: int) -> dict[str, Any] | None:
        """For packet ``k`` of the batch being written: the Service it was judged through."""
        if self._service_entries is None or self._service_entries[k] < 0:
            return None
        return self.services.entries[int(self._service_entries[k])].to_json()

    def _owner_ref(self, address: str) -> str | None:
        ref = self._names.get(address)
        if ref is None:
            owner = self.engine.inventory.owner_of(ipaddress.ip_address(address))
            if owner is None:
                return None
            ref = self._names[address] = owner.ref
        return ref

    def _write_lines(
        self, batch: Batch, verdicts: npt.NDArray[Any], indices: npt.NDArray[np.int64] | None = None
    ) -> None:
        """A line per packet of ``batch``; ``indices``: each packet's index in the run (a
        partition's packets are not consecutive), otherwise the next ones."""
        assert self.out is not None
        for k, (h, v) in enumerate(zip(batch.headers, verdicts)):
            if indices is not None:
                self._index = int(indices[k])
            line = self._line(h, v, _reason(h, v), batch.outers, k)
            service = self._service_json(k)
            if service is not None:
                line["service"] = service
            if self._staged_verdicts is not None:
                line["staged"] = self._staged_json(self._staged_verdicts[k], h, line["src"], line["dst"])
            self.out.write(json.dumps(line) + "\n")
            self._index += 1

    def by_rule(self, counts: Counter | None = None, engine: NativeEngine | None = None) -> list[dict[str, Any]]:
        """``[{"direction", "tier", "policy", "rule", "verdict", "reason", "packets"}...]``, most packets first."""
        rows = []
        engine = engine or self.engine
        for (direction, tier, kind, source, rule, reason, allow), packets in (counts or self.summary.by_rule).items():
            d = Direction(direction)
            side = np.zeros((), dtype=engine.side_dtype)
            side["present"], side["allow"], side["reason"] = 1, allow, reason
            side["source_kind"], side["tier"], side["source"], side["rule"] = kind, tier, source, rule
            decision = engine.side_decision(side, d)
            assert decision is not None
            rows.append(
                {
                    "direction": direction,
                    "tier": decision.tier,
                    "policy": decision.policy,
                    "rule": decision.rule,
                    "verdict": decision.verdict,
                    "reason": decision.reason,
                    "packets": packets,
                }
            )
        # a total order (ties too), so that summaries merged from partitions list them as one run does
        rows.sort(
            key=lambda r: (
                -r["packets"],
                r["direction"],
                str(r["policy"]),
                str(r["rule"]),
                str(r["tier"]),
                r["verdict"],
                r["reason"],
            )
        )
        return rows

    def summary_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "packets": s.packets,
            "allowed": s.allowed,
            "denied": s.denied,
            "malformed": s.malformed,
            "not_judged": s.not_judged,
            "established": s.established,
            "invalid": s.invalid,
            "denied_connection": s.denied_connection,
            "pickups": s.pickups,
            "not_ip": s.not_ip,
            "policy": s.policy,
            "policy_allowed": s.policy_allowed,
            "no_policy": {d: s.no_policy[d] for d in ("egress", "ingress")},
            "flows": s.flows,
            "by_rule": self.by_rule(),
            "decode_errors": dict(sorted(s.decode_errors.items())),
            "tunnels": {
                **self.tunnels.to_json(),
                "decapsulated": dict(sorted(s.decapsulated.items())),
                "not_judged": {
                    kind: {err: n for (k, err), n in sorted(s.not_judged_by.items()) if k == kind}
                    for kind in sorted({k for k, _ in s.not_judged_by})
                },
            },
            "problems": s.problems,
            "unreadable": s.unreadable,
            "cut_short": s.cut_short,
            "conntrack": self.tracker.stats() if self.tracker is not None else None,
            "seconds": round(s.seconds, 6),
            "packets_per_second": round(s.rate, 1),
            "interrupted": s.interrupted,
            "dns": None if self.dns is None else self.dns.to_json(),
            "http": None
            if not self.http
            else {
                **{k: s.http[k] for k in ("provisional", "requests_allowed", "requests_denied", "held", "table_full")},
                "errors": {k: n for k, n in sorted(s.http.items()) if k in HTTP_ERROR_NAMES and n},
                # requests are read off tracked connections only
                "read": self.tracker is not None,
            },
            "staged": None
            if self.staged is None
            else {
                **{k: s.staged[k] for k in ("allowed", "denied", "would_deny", "would_allow")},
                "by_rule": self.by_rule(s.staged_by_rule, self.staged),
            },
        }


def _reason(h: Any, v: Any) -> str:
    """A packet's reason as its line says it: the engine's, but "not-judged" for a packet found
    inside a tunnel that could not be read (the engine denies it as malformed)."""
    reason = PACKET_REASONS[int(v["reason"])]
    if reason == "malformed" and int(h["encap"]):
        return NOT_JUDGED
    return reason


def tunnelled_payloads(batch: Batch, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """DNS message rows ``(index, start, end)`` of a batch decoded with other tunnels than the
    default ones, their payloads found again through the batch's own tunnels (those the header
    describes)."""
    from pyclassify import _native

    spans = _native.payload_spans(
        batch.data,
        batch.offsets,
        batch.caplens,
        batch.linktypes,
        np.ascontiguousarray(rows[:, 0]),
        **batch.tunnels.native(),
    )
    rows = np.column_stack([rows[:, 0], spans[:, 0], spans[:, 1]]).astype(np.int64)
    return rows[rows[:, 2] > rows[:, 1]]


def file_report(
    summary: ReplaySummary, cap: Any, path: str, before: Any, no_interface: int, read: int, stopped: bool
) -> None:
    """What reading capture ``cap`` (at ``path``, its state ``before`` as ``file_state``
    gave it) found, into ``summary``: its decode errors and problems, a file cut short or
    changed underneath, a file of which nothing could be read (``read`` packets were,
    ``stopped``: the run was asked to stop). Called as the capture is closed."""
    # not IP is no decode error: counted as such (``not_ip``), passed
    summary.decode_errors.update({k: v for k, v in cap.counts.items() if k not in ("none", "unknown_ethertype")})
    summary.problems.extend(cap.problems)  # each names its file already
    if no_interface:
        # The decoder counts them as unknown_linktype; say what is wrong with the file.
        verb = "names" if no_interface == 1 else "name"
        summary.problems.append(
            f"{cap.name}: {count(no_interface, 'packet')} {verb} an interface that no Interface Description "
            f"Block describes: not decoded (counted as unknown_linktype)"
        )
    problems = bool(cap.problems)
    after = file_state(path)
    if before is not None and after is not None and before != after:
        problems = True
        summary.cut_short.append(path)
        if after[0] < before[0]:
            summary.problems.append(
                f"{path}: truncated while being read (from {before[0]} to {after[0]} bytes, by another "
                f"process?): the packets read before are counted, the rest is missing"
            )
        elif after[0] == before[0]:
            summary.problems.append(f"{path}: changed while being read: the verdicts may mix old and new contents")
    if problems and read == 0 and not stopped:
        summary.unreadable.append(cap.name)  # "<stdin>" for "-"


def file_state(path: str) -> tuple[int, int, int] | None:
    """(size, modification time, inode) of a regular file; None for stdin, pipes and the like."""
    if path == "-":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def total_packets(paths: list[str]) -> int | None:
    """Size hint for a progress bar: file bytes (None when reading stdin)."""
    if any(p == "-" for p in paths):
        return None
    return sum(Path(p).stat().st_size for p in paths)
