"""Calico ``http`` rules without a proxy: what replay and the summaries need beside the engine.

The engine judges requests (``rust/core/src/http``, ``engine::judge``): a TCP connection whose
verdict awaits its HTTP request is admitted provisionally, its client's payload read natively
into request heads, and each request judged at the packet that completes its head; the first
one denied, or a stream that cannot be judged, revokes the connection. This module says whether
a policy set needs that, hands a capture batch's TCP payloads to the engine, and names the
outcomes the engine writes in ``PacketVerdict.http``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify import _native
from pyclassify.batch import FLAG_HAS_PORTS, FLAG_MALFORMED
from pyclassify.engine import (
    HTTP_AWAITS,
    HTTP_ERROR,
    HTTP_ERROR_NAMES,
    HTTP_OUT_OF_ORDER,
    HTTP_REQUEST,
    HTTP_TABLE_FULL,
    PACKET_INVALID,
    PACKET_POLICY,
)
from pyclassify.ir import PROTO_TCP

__all__ = ["count_outcomes", "has_http_rules", "outcome_mask", "outcome_name", "segments"]


def has_http_rules(policy_set: Any) -> bool:
    """Whether any rule (enforced or staged) matches HTTP requests."""
    return any(r.http is not None for p in policy_set.all_policies() for r in p.ingress + p.egress)


def segments(batch: Any) -> npt.NDArray[np.int64]:
    """Each packet's TCP payload as ``[start, end, seq]`` in ``batch.data`` (zeros where it has
    none): what ``NativeEngine.judge`` reads for ``http`` rules. Decoded natively."""
    h = batch.headers
    out = np.zeros((len(h), 3), dtype=np.int64)
    flags = h["flags"]
    tcp = np.flatnonzero(
        (h["protocol"] == PROTO_TCP) & ((flags & FLAG_HAS_PORTS) != 0) & ((flags & FLAG_MALFORMED) == 0)
    )
    if len(tcp):
        # inside the tunnels the decoder opened, as the headers describe the packets there
        out[tcp] = _native.payload_spans(
            batch.data, batch.offsets, batch.caplens, batch.linktypes, tcp, **batch.tunnels.native()
        )
    return out


def outcome_name(code: int) -> str | None:
    """``PacketVerdict.http`` as a word: ``provisional`` (admitted up to its connection's
    request), ``request`` (judged with the request it completed), ``held`` (after a gap in what
    was read: dropped, the connection kept), ``table_full``, or the name of the error that made
    the request stream unjudgeable; None for 0."""
    if code == 0:
        return None
    if code == HTTP_AWAITS:
        return "provisional"
    if code == HTTP_REQUEST:
        return "request"
    if code == HTTP_TABLE_FULL:
        return "table_full"
    if code == HTTP_OUT_OF_ORDER:
        return "held"
    index = code - HTTP_ERROR
    return HTTP_ERROR_NAMES[index] if 0 <= index < len(HTTP_ERROR_NAMES) else f"error_{code}"


def outcome_mask(verdicts: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Packets judged by policy whose decision is not a rule's: admitted provisionally (the
    request awaited; without connection tracking such a packet is denied by its rule, and
    counted so) or denied because the request stream cannot be judged."""
    http = verdicts["http"]
    provisional = (http == HTTP_AWAITS) & (verdicts["allow"] != 0)
    return (verdicts["reason"] == PACKET_POLICY) & (provisional | (http >= HTTP_TABLE_FULL))


def count_outcomes(counter: Counter, verdicts: npt.NDArray[Any], judged: npt.NDArray[Any] | None = None) -> None:
    """Adds a batch's HTTP outcomes to ``counter``: ``provisional`` (connections admitted up to
    their request), ``requests_allowed``/``requests_denied`` (packets that completed a request,
    judged), ``held`` (segments after a gap, dropped), ``table_full`` and each stream error by
    name (connections denied). ``judged``: the batch's packets judged by policy, when the
    caller has them already."""
    if not verdicts["http"].any():  # no http rule met: one pass, not a selection per outcome
        return
    counter["held"] += int(
        np.count_nonzero((verdicts["reason"] == PACKET_INVALID) & (verdicts["http"] == HTTP_OUT_OF_ORDER))
    )
    if judged is None:
        judged = verdicts[verdicts["reason"] == PACKET_POLICY]
    http = judged["http"]
    if not http.any():
        return
    counter["provisional"] += int(np.count_nonzero((http == HTTP_AWAITS) & (judged["allow"] != 0)))
    request = http == HTTP_REQUEST
    counter["requests_allowed"] += int(np.count_nonzero(request & (judged["allow"] != 0)))
    counter["requests_denied"] += int(np.count_nonzero(request & (judged["allow"] == 0)))
    counter["table_full"] += int(np.count_nonzero(http == HTTP_TABLE_FULL))
    for code in np.unique(http[http >= HTTP_ERROR]).tolist():
        counter[outcome_name(code)] += int(np.count_nonzero(http == code))
