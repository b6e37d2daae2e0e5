"""Captures judged in partitions by connection, each packet read and decoded once.

``route`` reads a capture once and splits each batch by connection: partition ``k`` of ``P``
gets the packets whose connection key falls in it (``hash % P == k``), in capture order, as
``RoutedBatch``es (their decoded headers, and the payload bytes the judging reads: DNS answers,
and TCP payloads for http rules). ``PartitionReplay`` judges one partition's routed batches with
a connection tracker of its own, so every connection is judged in order by one tracker and the
partitions' summaries add up exactly to the one a single ``Replay`` gives
(``ReplaySummary.merge``). On a Dask cluster a task reads each capture and the partitions' tasks
take their share of every capture's (``pyclassify.dask_capture``): a shuffle of decoded headers,
about 100 bytes a packet, not a read of the whole capture by every partition.

The connection key is ``replay.flow_hashes`` of the packet's 5-tuple, the same both ways, but
for two kinds of packet the tracker relates otherwise: an ICMP query and its reply carry the
identifier in the same field both ways, so the key takes it as both ports; an ICMP error goes
with the connection it quotes (``batch.quotes``), whose tracker judges it as related. Packets
with no connection (malformed, not IP) have a key all the same (their headers' bytes), judged
statelessly wherever it falls.

DNS answers teach domain rules only if policy lets them through, as the reply of an allowed
query: the packets of DNS connections (port 53, and the ICMP errors quoting them) go to every
partition, which judges them with the rest of its packets and learns the answers among them in
capture order, so each sees the same facts at the same packets as one process; those packets
are counted by their own partition only.

The connections the summary counts (``FlowSet``: 5-tuples, the same both ways) are counted in
the partition of their own ``flow_hashes``, which a connection's every packet shares; a packet
counted there but judged elsewhere (an ICMP error, an ICMP query) goes there too, judged without
a tracker only to know whether it could be decoded. What reading a capture found (decode
errors, problems, a file cut short) goes to partition 0 alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from pyclassify import httprules
from pyclassify.batch import FLAG_ICMP_ERROR, HEADER_DTYPE, OUTER_DTYPE, QUOTE_DTYPE
from pyclassify.capture import DEFAULT_BATCH, QUOTE_VALID, open_capture
from pyclassify.domains import DNS_PORT, DnsLearner
from pyclassify.engine import PACKET_MALFORMED, PACKET_NOT_IP, Lane, NativeEngine
from pyclassify.kinds.common import PROTO_ICMP, PROTO_ICMPV6
from pyclassify.replay import (
    NO_INTERFACE,
    Replay,
    ReplaySummary,
    file_report,
    file_state,
    flow_hashes,
    take_rows,
    tunnelled_payloads,
)
from pyclassify.tunnels import DEFAULT_TUNNELS, TunnelPorts


def connection_keys(
    batch: Any, own: npt.NDArray[np.uint64] | None = None
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """Per packet of ``batch``: the key of the connection whose tracker judges it (the same for
    both directions; an ICMP error's is the quoted connection's), and whether that connection
    is DNS's (port 53): judged in every partition. ``own``: ``flow_hashes(batch.headers)``,
    if known; only the packets whose key differs (ICMP) are hashed again. Vectorised."""
    h = batch.headers
    if own is None:
        own = flow_hashes(h)
    proto, sport, dport = h["protocol"], h["sport"], h["dport"]
    icmp = (proto == PROTO_ICMP) | (proto == PROTO_ICMPV6)
    other = np.flatnonzero(icmp)
    if not len(other):
        dns = ((proto == 6) | (proto == 17)) & ((sport == DNS_PORT) | (dport == DNS_PORT))
        return own, dns
    ends = take_rows(h, other)
    fields = {name: ends[name] for name in ("src_addr", "dst_addr", "sport", "dport", "protocol")}
    if batch.quotes is not None:
        q = take_rows(batch.quotes, other)
        quoted = ((ends["flags"] & FLAG_ICMP_ERROR) != 0) & ((q["flags"] & QUOTE_VALID) != 0)
        for name in fields:
            fields[name] = np.where(quoted if fields[name].ndim == 1 else quoted[:, None], q[name], fields[name])
    # an ICMP query's identifier is in ``sport`` both ways: the key takes it as both ends' port
    query = (fields["protocol"] == PROTO_ICMP) | (fields["protocol"] == PROTO_ICMPV6)
    fields["dport"] = np.where(query, fields["sport"], fields["dport"])
    keys = own.copy()
    keys[other] = flow_hashes(cast("npt.NDArray[Any]", fields))  # flow_hashes reads fields by name
    proto, sport, dport = proto.copy(), sport.copy(), dport.copy()
    proto[other], sport[other], dport[other] = fields["protocol"], fields["sport"], fields["dport"]
    dns = ((proto == 6) | (proto == 17)) & ((sport == DNS_PORT) | (dport == DNS_PORT))
    return keys, dns


def gather_spans(data: Any, spans: npt.NDArray[np.int64]) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The bytes of ``spans`` (rows of ``[start, end)`` in ``data``) copied one after another,
    and where each now is. Vectorised: one gather, no step per span."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    lengths = np.maximum(spans[:, 1] - spans[:, 0], 0)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if not len(spans) or not ends[-1]:
        return b"", np.column_stack([starts, ends])
    source = np.frombuffer(cast("Any", data), dtype=np.uint8)
    index = np.repeat(spans[:, 0] - starts, lengths) + np.arange(int(ends[-1]), dtype=np.int64)
    return source[index].tobytes(), np.column_stack([starts, ends])


class RoutedBatch:
    """The packets of one capture batch that one partition needs, decoded by the task that read
    the capture (``route``), in capture order; what ``Replay`` reads of a batch, and per packet
    whether the partition judges it (``judging``: its connection's, or DNS's), counts it
    (``mine``: its connection's) and counts its 5-tuple among the connections (``own``)."""

    __slots__ = ("data", "dns", "headers", "index", "judging", "mine", "outers", "own", "quotes", "segments")

    def __init__(
        self,
        headers: npt.NDArray[Any],
        quotes: npt.NDArray[Any] | None,
        outers: npt.NDArray[Any] | None,
        judging: npt.NDArray[np.bool_],
        mine: npt.NDArray[np.bool_],
        own: npt.NDArray[np.bool_],
        data: bytes = b"",
        dns: npt.NDArray[np.int64] | None = None,
        segments: npt.NDArray[np.int64] | None = None,
        index: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self.headers, self.quotes, self.outers = headers, quotes, outers
        self.judging, self.mine, self.own = judging, mine, own
        #: the payload bytes ``dns`` and ``segments`` point into
        self.data = data
        #: DNS answers as ``DnsLearner.answers_in`` gives them (None: not learned)
        self.dns = dns
        #: TCP payloads as ``httprules.segments`` gives them (None: no http rules)
        self.segments = segments
        #: each packet's index in its capture (None: not kept, no lines are written)
        self.index = index

    def __len__(self) -> int:
        return len(self.headers)

    def align(self) -> None:
        """Its arrays aligned as the engine reads them (arrays sent between processes may
        arrive at any byte offset: copied then)."""
        for name in ("headers", "quotes", "outers", "dns", "segments", "index"):
            array = getattr(self, name)
            if array is not None and (array.ctypes.data % 8 or not array.flags.c_contiguous):
                copy = np.empty_like(array, order="C")  # numpy allocates at 16-byte boundaries
                copy[...] = array
                setattr(self, name, copy)


def payloads_of(
    batch: Any,
    rows: npt.NDArray[np.int64],
    answers: npt.NDArray[np.int64] | None,
    segments: npt.NDArray[np.int64] | None,
) -> tuple[bytes, npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
    """The DNS ``answers`` and TCP ``segments`` of a whole batch (None: not wanted) for its
    ``rows`` (ascending): renumbered among them, their bytes copied (the batch's buffer is the
    reader's, read into again) and the spans moved into those bytes."""
    dns = None
    spans: list[npt.NDArray[np.int64]] = []
    if answers is not None:
        at = np.searchsorted(rows, answers[:, 0])
        inside = at < len(rows)
        inside[inside] = rows[at[inside]] == answers[inside, 0]
        dns = np.column_stack([at[inside], answers[inside, 1:3]]).astype(np.int64)
        spans.append(dns[:, 1:3])
    segs = None
    if segments is not None:
        segs = segments[rows].copy()
        spans.append(segs[:, 0:2])
    data = b""
    if spans:
        data, moved = gather_spans(batch.data, np.concatenate(spans))
        if dns is not None:
            dns[:, 1:3] = moved[: len(dns)]
        if segs is not None:
            placed = moved[len(spans[0]) if dns is not None else 0 :]
            empty = segs[:, 1] <= segs[:, 0]
            segs[:, 0:2] = np.where(empty[:, None], 0, placed)  # no payload stays zeros
    return data, dns, segs


class Gathering:
    """A partition's next batch, gathered from its rows of consecutive read batches: each row
    copied once, as it is read, so a read batch is freed at once (held until a partition's batch
    is full, the reads' fresh arrays would be faulted in page by page). Its arrays hold two read
    batches, so that a read always fits; only the rows written are ever touched or sent."""

    def __init__(self, size: int, index: bool = False) -> None:
        self.size = size  # a batch is given out once it holds this many rows
        self.keeps_index = index  # each row's index in its capture kept (for lines written)
        self._empty()

    def _empty(self) -> None:
        # fresh arrays: the batch given out keeps the last ones
        capacity = 2 * self.size
        self.headers = np.empty(capacity, HEADER_DTYPE)
        self.quotes: npt.NDArray[Any] | None = None  # made when a row is an ICMP error
        self.outers: npt.NDArray[Any] | None = None  # made when a row came out of a tunnel
        self.flags = np.empty((capacity, 3), dtype=bool)  # judging, mine, own
        self.index = np.empty(capacity, dtype=np.int64) if self.keeps_index else None
        self.n = 0
        self.data: list[bytes] = []
        self.data_length = 0
        self.dns: list[npt.NDArray[np.int64]] = []
        self.segments: list[npt.NDArray[np.int64]] = []

    def add(
        self,
        batch: Any,
        rows: npt.NDArray[np.int64],
        flags: npt.NDArray[np.bool_],
        answers: npt.NDArray[np.int64] | None,
        segments: npt.NDArray[np.int64] | None,
    ) -> RoutedBatch | None:
        """``rows`` of ``batch`` (``flags``: their judging, mine and own), with their payloads;
        returns the batch they complete, if they do."""
        lo, hi = self.n, self.n + len(rows)
        _take_into(batch.headers, rows, self.headers, lo)
        flagged = self.headers["flags"][lo:hi] & FLAG_ICMP_ERROR
        if batch.quotes is not None and self.quotes is None and flagged.any():
            self.quotes = np.empty(len(self.headers), QUOTE_DTYPE)
            self.quotes[:lo] = np.zeros(1, QUOTE_DTYPE)  # the rows before: no quote (none is read)
        if self.quotes is not None:
            if batch.quotes is None:
                self.quotes[lo:hi] = np.zeros(1, QUOTE_DTYPE)
            else:
                _take_into(batch.quotes, rows, self.quotes, lo)
        if batch.outers is not None and self.outers is None:
            self.outers = np.empty(len(self.headers), OUTER_DTYPE)
            self.outers[:lo] = np.zeros(1, OUTER_DTYPE)  # the rows before: out of no tunnel (unread)
        if self.outers is not None:
            if batch.outers is None:
                self.outers[lo:hi] = np.zeros(1, OUTER_DTYPE)
            else:
                _take_into(batch.outers, rows, self.outers, lo)
        self.flags[lo:hi] = flags
        if self.index is not None:
            self.index[lo:hi] = rows + batch.start
        if answers is not None or segments is not None:
            data, dns, segs = payloads_of(batch, rows, answers, segments)
            if dns is not None:
                self.dns.append(dns + np.array([lo, self.data_length, self.data_length]))
            if segs is not None:
                payload = segs[:, 1] > segs[:, 0]  # no payload stays zeros
                segs[payload, 0:2] += self.data_length
                self.segments.append(segs)
            self.data.append(data)
            self.data_length += len(data)
        self.n = hi
        return self.take() if self.n >= self.size else None

    def take(self) -> RoutedBatch | None:
        """The rows gathered as a batch (None: none), and this emptied for the next."""
        n = self.n
        if not n:
            return None

        def rows(array: Any) -> Any:
            # a batch short of the size (a capture's last) is copied: its slice would keep the
            # whole buffer (two read batches' worth) alive
            return None if array is None else array[:n] if n >= self.size else array[:n].copy()

        flags = rows(self.flags)
        batch = RoutedBatch(
            rows(self.headers),
            rows(self.quotes),
            rows(self.outers),
            flags[:, 0],
            flags[:, 1],
            flags[:, 2],
            b"".join(self.data),
            np.concatenate(self.dns).astype(np.int64) if self.dns else None,
            np.concatenate(self.segments) if self.segments else None,
            rows(self.index),
        )
        self._empty()
        return batch


def _take_into(source: npt.NDArray[Any], rows: npt.NDArray[np.int64], target: npt.NDArray[Any], at: int) -> None:
    """``target[at:at + len(rows)] = source[rows]``, as raw records (``take_rows``)."""
    raw = np.dtype((np.void, source.dtype.itemsize))
    np.take(np.ascontiguousarray(source).view(raw), rows, out=target.view(raw)[at : at + len(rows)])


@dataclass
class RoutedCapture:
    """One capture read by ``route``: per partition its routed batches, in capture order; what
    reading found (``report``: decode errors, problems, a file cut short, for partition 0);
    the packets read."""

    parts: list[list[RoutedBatch]]
    report: ReplaySummary = field(default_factory=ReplaySummary)
    packets: int = 0

    def share(self, part: int) -> RoutedCapture:
        """Partition ``part``'s batches alone (the report only with partition 0's)."""
        return RoutedCapture([self.parts[part]], self.report if part == 0 else ReplaySummary(), self.packets)


def route(
    path: str,
    parts: int,
    *,
    tunnels: TunnelPorts = DEFAULT_TUNNELS,
    dns: bool = False,
    http: bool = False,
    only: int | None = None,
    batch_size: int = DEFAULT_BATCH,
    index: bool = False,
) -> RoutedCapture:
    """Reads the capture at ``path`` once and splits its packets among ``parts`` partitions by
    connection (module documentation), with the DNS answers (``dns``) and TCP payloads
    (``http``) the judging reads. ``only``: that partition's batches alone are kept.
    ``batch_size``: the packets read at a time, and about the packets of a partition's batch.
    ``index``: each packet's index in the capture kept (for the lines a partition writes)."""
    keep = range(parts) if only is None else [only]
    routed = RoutedCapture([[] for _ in range(parts)])
    before = file_state(path)
    no_interface = 0  # pcapng packets naming an interface no IDB describes (ifindex all ones)
    gathering = {k: Gathering(batch_size, index) for k in keep}

    def gathered(k: int, done: RoutedBatch | None) -> None:
        if done is not None:
            routed.parts[k].append(done)

    with open_capture(path, stream=True, tunnels=tunnels, batch_size=batch_size) as cap:
        for batch in cap:
            routed.packets += len(batch)
            if cap.format == "pcapng":
                no_interface += int(np.count_nonzero(batch.headers["ifindex"] == NO_INTERFACE))
            answers = None
            if dns:
                answers = DnsLearner.answers_in(batch)
                if len(answers) and batch.tunnels != DEFAULT_TUNNELS:
                    answers = tunnelled_payloads(batch, answers)
            segments = httprules.segments(batch) if http else None
            if parts == 1:  # the whole capture: no connection hashed
                rows = np.arange(len(batch), dtype=np.int64)
                every = np.ones((len(batch), 3), dtype=bool)
                gathered(0, gathering[0].add(batch, rows, every, answers, segments))
                continue
            own = flow_hashes(batch.headers)
            keys, dns_rows = connection_keys(batch, own)
            key_part = keys % np.uint64(parts)
            own_part = own % np.uint64(parts)
            for k in keep:
                mine = key_part == np.uint64(k)
                judging = mine | dns_rows
                counted = own_part == np.uint64(k)
                rows = np.flatnonzero(judging | counted)
                if len(rows):
                    flags = np.column_stack([judging[rows], mine[rows], counted[rows]])
                    gathered(k, gathering[k].add(batch, rows, flags, answers, segments))
        for k in keep:
            gathered(k, gathering[k].take())
        file_report(routed.report, cap, path, before, no_interface, routed.packets, False)
    return routed


def _nbytes(value: RoutedBatch | RoutedCapture) -> int:
    """What a routed batch or capture holds, for Dask's memory accounting (spilling, transfer
    costs): without it, Dask counts each as a few dozen bytes."""
    if isinstance(value, RoutedCapture):
        return 64 + sum(_nbytes(b) for part in value.parts for b in part)
    arrays = (value.headers, value.quotes, value.outers, value.judging, value.mine, value.own, value.dns)
    held = sum(a.nbytes for a in arrays if a is not None) + len(value.data)
    return 64 + held + sum(a.nbytes for a in (value.segments, value.index) if a is not None)


try:
    from dask.sizeof import sizeof as _dask_sizeof
except ImportError:  # the dask extra is not installed: nothing to tell
    pass
else:
    _dask_sizeof.register(RoutedBatch)(_nbytes)
    _dask_sizeof.register(RoutedCapture)(_nbytes)


class Rows(NamedTuple):
    """Some packets of a batch, as ``Replay._account`` reads a batch."""

    headers: npt.NDArray[Any]
    outers: npt.NDArray[Any] | None


class PartitionReplay(Replay):
    """A ``Replay`` of partition ``part`` of ``parts`` (module documentation): its summary
    counts the packets and connections of that partition only. No per-packet output."""

    def __init__(self, engine: NativeEngine, part: int, parts: int, **options: Any) -> None:
        super().__init__(engine, **options)
        if not 0 <= part < parts:
            raise ValueError(f"partition {part} of {parts}")
        self.part, self.parts = part, parts
        self._judged = np.empty(0, dtype=np.int64)  # rows of the batch judged here
        self._counted = np.empty(0, dtype=bool)  # of those, the ones counted here
        self._verdicts: npt.NDArray[Any] | None = None
        self._routed: Any = None  # the routed batch being accounted
        self.batch_size = DEFAULT_BATCH  # of the captures ``run`` reads (``route``)
        self._first = 0  # the run's index of the first packet of the capture being judged

    def _payloads(self, batch: Any) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
        # found by the task that read the capture (``route``)
        dns = batch.dns if self.dns is not None else None
        segments = batch.segments if self.http and self.tracker is not None else None
        if dns is None and self.dns is not None:
            raise ValueError("the capture was routed without its DNS answers: route(..., dns=True)")
        if segments is None and self.http and self.tracker is not None:
            raise ValueError("the capture was routed without its TCP payloads: route(..., http=True)")
        return dns, segments

    def _judge(self, batch: Any, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[Any]:
        batch.align()
        self._judged = np.flatnonzero(batch.judging)
        self._counted = batch.mine[self._judged]
        whole = len(self._judged) == len(batch)
        self._verdicts = super()._judge(batch, None if whole else self._judged)
        return self._verdicts

    def _account(self, batch: Any, verdicts: npt.NDArray[Any]) -> None:
        if len(self._counted) == len(batch) and self._counted.all():  # every packet: as a Replay
            super()._account(batch, verdicts)
            return
        keep = np.flatnonzero(self._counted)
        rows = self._judged[keep]
        if self._staged_verdicts is not None:
            self._staged_verdicts = take_rows(self._staged_verdicts, keep)
        view = Rows(take_rows(batch.headers, rows), None if batch.outers is None else take_rows(batch.outers, rows))
        self._routed = batch
        super()._account(view, take_rows(verdicts, keep))  # type: ignore[arg-type]  # read as a batch

    def _add_flows(self, batch: Any, undecoded: npt.NDArray[np.bool_]) -> None:
        routed = batch if isinstance(batch, RoutedBatch) else self._routed
        verdicts = self._verdicts
        assert verdicts is not None
        if routed.own.all() and routed.judging.all():  # every packet judged and counted here
            # read as a batch: its headers
            super()._add_flows(routed, undecoded if batch is routed else self._undecoded(verdicts))  # type: ignore[arg-type]
            return
        skip = np.zeros(len(routed), dtype=bool)
        skip[self._judged] = self._undecoded(verdicts)
        elsewhere = np.flatnonzero(routed.own & ~routed.judging)
        if len(elsewhere):
            # judged in the partition of their connection: here alone, to know if they decode
            headers = take_rows(routed.headers, elsewhere)
            alone = Lane(self.engine, np.arange(len(headers), dtype=np.int64), headers)
            self.engine.judge_lanes(headers, [alone], **self.defaults, data=None, dns=None)
            skip[elsewhere] = self._undecoded(alone.out)
        own = np.flatnonzero(routed.own)
        self.summary.flow_set.add(take_rows(routed.headers, own), skip[own])

    def _write_routed_lines(self, batch: Any, verdicts: npt.NDArray[Any]) -> None:
        """``--out``'s line for each packet this partition counts, numbered as in one run over
        every capture."""
        if batch.index is None:
            raise ValueError("the capture was routed without its packets' indices: route(..., index=True)")
        if len(self._counted) == len(batch) and self._counted.all():
            rows = np.arange(len(batch), dtype=np.int64)
        else:  # the rows ``_account`` counted (its staged verdicts are already theirs)
            keep = np.flatnonzero(self._counted)
            rows = self._judged[keep]
            verdicts = take_rows(verdicts, keep)
            if self._service_entries is not None:
                self._service_entries = self._service_entries[keep]
        view = Rows(take_rows(batch.headers, rows), None if batch.outers is None else take_rows(batch.outers, rows))
        with self._writing("--out", self._out_name()):
            self._write_lines(view, verdicts, batch.index[rows] + self._first)  # type: ignore[arg-type]

    @staticmethod
    def _undecoded(verdicts: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        reasons = verdicts["reason"]
        return cast("npt.NDArray[np.bool_]", (reasons == PACKET_MALFORMED) | (reasons == PACKET_NOT_IP))

    def judge_routed(self, captures: list[RoutedCapture]) -> ReplaySummary:
        """Judges this partition's share of ``captures`` (each as ``RoutedCapture.share`` gives
        it, or whole), in order."""
        start = time.perf_counter()
        for capture in captures:
            batches = capture.parts[0] if len(capture.parts) == 1 else capture.parts[self.part]
            for batch in batches:
                verdicts = self._judge(batch)
                self._account(batch, verdicts)
                if self.out is not None:
                    self._write_routed_lines(batch, verdicts)
            self._first += capture.packets
            if self.part == 0:
                report = capture.report
                self.summary.decode_errors.update(report.decode_errors)
                self.summary.problems.extend(report.problems)
                self.summary.cut_short.extend(report.cut_short)
                self.summary.unreadable.extend(report.unreadable)
        self.summary.seconds = time.perf_counter() - start
        return self.summary

    def run(self, paths: list[str], progress: Any = None) -> ReplaySummary:
        """Reads ``paths`` here and judges this partition's packets of them (``route``)."""
        start = time.perf_counter()
        dns, http = self.dns is not None, self.http and self.tracker is not None
        for path in paths:
            share = route(
                path,
                self.parts,
                tunnels=self.tunnels,
                dns=dns,
                http=http,
                only=self.part,
                batch_size=self.batch_size,
                index=self.out is not None,
            )
            self.judge_routed([share])
        self.summary.seconds = time.perf_counter() - start
        return self.summary


__all__ = ["Gathering", "PartitionReplay", "RoutedBatch", "RoutedCapture", "connection_keys", "gather_spans", "route"]
