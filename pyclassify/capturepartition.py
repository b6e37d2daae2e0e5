"""Captures judged in partitions by connection: partition ``k`` of ``P`` reads every capture in
order and judges, with a connection tracker of its own, only the packets whose connection key
falls in it (``hash % P == k``), so every connection is judged in order by one tracker and the
partitions' summaries add up exactly to the one a single ``Replay`` gives
(``ReplaySummary.merge``).

The connection key is ``replay.flow_hashes`` of the packet's 5-tuple, the same both ways, but
for two kinds of packet the tracker relates otherwise: an ICMP query and its reply carry the
identifier in the same field both ways, so the key takes it as both ports; an ICMP error goes
with the connection it quotes (``batch.quotes``), whose tracker judges it as related. Packets
with no connection (malformed, not IP) have a key all the same (their headers' bytes), judged
statelessly wherever it falls.

DNS answers teach domain rules only if policy lets them through, as the reply of an allowed
query: every partition judges the packets of DNS connections (port 53, and the ICMP errors
quoting them) with the rest of its packets and learns the answers among them in capture order,
so each sees the same facts at the same packets as one process; those packets are counted by
their own partition only.

The connections the summary counts (``FlowSet``: 5-tuples, the same both ways) are counted in
the partition of their own ``flow_hashes``, which a connection's every packet shares; a packet
counted there but judged elsewhere (an ICMP error, an ICMP query) is judged again here without
a tracker, only to know whether it could be decoded. A capture's decode errors and problems are
the same in every partition: partition 0 alone reports them.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from pyclassify.batch import FLAG_ICMP_ERROR
from pyclassify.capture import QUOTE_VALID, Batch
from pyclassify.domains import DNS_PORT
from pyclassify.engine import PACKET_MALFORMED, PACKET_NOT_IP, Lane, NativeEngine
from pyclassify.kinds.common import PROTO_ICMP, PROTO_ICMPV6
from pyclassify.replay import Replay, flow_hashes, take_rows


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
        self._judging = np.empty(0, dtype=bool)  # per row of the batch: judged here
        self._batch: Any = None
        self._own = np.empty(0, dtype=np.uint64)  # the batch's flow_hashes
        self._verdicts: npt.NDArray[Any] | None = None

    def _mine(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        return hashes % np.uint64(self.parts) == np.uint64(self.part)

    def _judge(self, batch: Batch, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[Any]:
        if self.parts == 1:  # the whole: as a Replay
            return super()._judge(batch)
        self._own = flow_hashes(batch.headers)
        keys, dns = connection_keys(batch, self._own)
        mine = self._mine(keys)
        self._judging = mine | dns
        self._judged = np.flatnonzero(self._judging)
        self._counted = mine[self._judged]
        self._batch = batch
        self._verdicts = super()._judge(batch, self._judged)
        return self._verdicts

    def _account(self, batch: Batch, verdicts: npt.NDArray[Any]) -> None:
        if self.parts == 1:
            super()._account(batch, verdicts)
            return
        keep = np.flatnonzero(self._counted)
        rows = self._judged[keep]
        if self._staged_verdicts is not None:
            self._staged_verdicts = take_rows(self._staged_verdicts, keep)
        view = Rows(take_rows(batch.headers, rows), None if batch.outers is None else take_rows(batch.outers, rows))
        super()._account(view, take_rows(verdicts, keep))  # type: ignore[arg-type]  # read as a batch

    def _add_flows(self, batch: Any, undecoded: npt.NDArray[np.bool_]) -> None:
        if self.parts == 1:
            super()._add_flows(batch, undecoded)
            return
        whole, verdicts = self._batch, self._verdicts
        assert verdicts is not None
        counting = self._mine(self._own)
        own = np.flatnonzero(counting)
        skip = np.zeros(len(whole.headers), dtype=bool)
        reasons = verdicts["reason"]
        skip[self._judged] = (reasons == PACKET_MALFORMED) | (reasons == PACKET_NOT_IP)
        elsewhere = np.flatnonzero(counting & ~self._judging)
        if len(elsewhere):
            # judged in the partition of their connection: here alone, to know if they decode
            headers = take_rows(whole.headers, elsewhere)
            alone = Lane(self.engine, np.arange(len(headers), dtype=np.int64), headers)
            self.engine.judge_lanes(headers, [alone], **self.defaults, data=None, dns=None)
            skip[elsewhere] = (alone.out["reason"] == PACKET_MALFORMED) | (alone.out["reason"] == PACKET_NOT_IP)
        self.summary.flow_set.add(take_rows(whole.headers, own), skip[own])

    def run(self, paths: list[str], progress: Any = None) -> Any:
        summary = super().run(paths, progress)
        if self.part != 0:  # the same in every partition: partition 0's are the captures'
            summary.decode_errors.clear()
            summary.problems.clear()
            summary.unreadable.clear()
            summary.cut_short.clear()
        return summary


__all__ = ["PartitionReplay", "connection_keys"]
