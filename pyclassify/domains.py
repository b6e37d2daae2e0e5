"""Domains from DNS: the addresses ``domains`` (Calico) and ``domainNames`` (AdminNetworkPolicy,
ClusterNetworkPolicy) rules match are the ones DNS answers taught for those names.

What is learned is a ``pyclassify._engine.DomainFacts`` (native: answers are decoded in Rust,
bounds-checked, each (name, address) kept for the answer's TTL plus a grace, at most a fixed
number of them, the first to expire evicted when full). It hangs on the inventory
(``Inventory.domains``), so both evaluators and every engine built over that inventory see the
same facts. Where it is fed from:

- ``replay``: the DNS answers in the capture (UDP or TCP, source port 53), in capture order: the
  packets up to an answer are judged, then it is learned, then the rest (each fact valid from
  its answer's capture time for its TTL), so a connection made before the answer is judged
  without it and one after with it. Only answers policy lets through are learned, as on a node
  (``enforce`` learns the answers to allowed queries only): the reply of an allowed query, never
  that of a denied one (without connection tracking: the answer and its query both allowed);
- ``explain --resolve name=ip,...``: answers a person gives, valid whenever.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify import _native
from pyclassify._engine import DNS_ERROR_NAMES, DomainFacts
from pyclassify.batch import FLAG_HAS_PORTS, FLAG_MALFORMED

__all__ = ["CAPACITY", "DNS_ERROR_NAMES", "DnsLearner", "has_domain_rules", "new_facts", "resolve_option"]

DNS_PORT = 53
#: Facts kept at most (name, address pairs): a flood of answers evicts, never grows past it.
CAPACITY = 100_000


def new_facts(grace_s: int = 0, capacity: int = CAPACITY) -> Any:
    return DomainFacts(capacity, grace_s)


def has_domain_rules(policy_set: Any) -> bool:
    """Whether any rule (enforced or staged) matches by domain name."""
    return any(
        e.domains for p in policy_set.all_policies() for r in p.ingress + p.egress for e in r.sources + r.destinations
    )


def resolve_option(text: str) -> list[tuple[str, str]]:
    """``name=ip,name=ip`` (``explain --resolve``) as pairs; ValueError says what is wrong."""
    import ipaddress

    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, ip = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{item!r} is not NAME=ADDRESS")
        try:
            ipaddress.ip_address(ip.strip())
        except ValueError:
            raise ValueError(f"{item!r}: {ip.strip()!r} is not an IP address") from None
        out.append((name.strip().lower().rstrip("."), ip.strip()))
    if not out:
        raise ValueError("no NAME=ADDRESS given")
    return out


class DnsLearner:
    """Feeds the DNS answers of a capture's batches to ``facts``, counting what it saw."""

    def __init__(self, facts: Any) -> None:
        self.facts = facts
        self.answers = 0  # DNS messages (payloads from port 53) read
        self.learned = 0  # new (name, address) facts they taught (a refresh is not counted)
        self.denied = 0  # answers policy denied (or their query): not learned
        self.errors: Counter[str] = Counter()  # malformed answers, by reason

    @staticmethod
    def answers_in(batch: Any) -> npt.NDArray[np.int64]:
        """The batch's DNS messages (payloads from port 53, TCP or UDP): rows of ``(index,
        start, end)`` with the payload as ``batch.data[start:end]``, in capture order."""
        h = batch.headers
        flags = h["flags"]
        dns = (
            ((flags & FLAG_HAS_PORTS) != 0)
            & ((flags & FLAG_MALFORMED) == 0)
            & (h["sport"] == DNS_PORT)
            & ((h["protocol"] == 6) | (h["protocol"] == 17))
        )
        idx = np.flatnonzero(dns)
        if not len(idx):
            return np.empty((0, 3), dtype=np.int64)
        spans = _native.payload_spans(batch.data, batch.offsets, batch.caplens, batch.linktypes, idx)
        rows = np.column_stack([idx, spans[:, 0], spans[:, 1]]).astype(np.int64)
        # no payload: a TCP handshake or ACK of a DNS connection
        return rows[rows[:, 2] > rows[:, 1]]

    def count(self, tally: tuple[int, int, list[int], int]) -> None:
        """Adds what judging a batch's messages taught (``NativeEngine.judge_lanes``)."""
        messages, learned, errors, denied = tally
        self.answers += messages
        self.learned += learned
        self.denied += denied
        for name, n in zip(DNS_ERROR_NAMES, errors):
            if n:
                self.errors[name] += n

    def to_json(self) -> dict[str, Any]:
        return {
            "answers": self.answers,
            "learned": self.learned,
            "denied": self.denied,
            "facts": len(self.facts),
            "errors": dict(sorted(self.errors.items())),
            "evicted": self.facts.stats().get("evicted", 0),
        }
