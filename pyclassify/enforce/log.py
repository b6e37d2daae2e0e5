"""JSON-lines log of ``pyclassify enforce``: every denied new connection and every connection a
Log rule matched, with the deciding tier, policy and rule per direction, once per flow.

A flow is (protocol, source, destination, destination port); a bounded LRU of recent flows
suppresses repeats (SYN retransmissions, UDP before the reply). One line::

    {"ts": 1700000000.1, "event": "deny"|"allow"|"log"|"revoke", "queue": 0,
     "src": "10.244.1.2", "dst": "10.244.2.2", "proto": "TCP", "sport": 40000, "dport": 80,
     "egress": D, "ingress": D, "src_endpoint": "ns/pod", "dst_endpoint": "ns/pod"}

with D as in ``explain --json`` (``null``, or ``{"verdict", "tier", "policy", "rule", "reason"}``)
(the ``*_endpoint`` keys only where the inventory knows the address) plus ``"logs": [{"tier",
"policy", "rule"}...]`` on ``log`` events. With staged policies, every line has ``"staged"``: the
verdict with them enforced (as D's, plus ``"summary": "would deny by ..."``), and an allowed
connection the staged policies would deny is logged (``allow``) even without ``--log-allowed``. ``pyclassify monitor`` renders the stream. Daemon events (start,
reload, reload-rejected, stop) use the same stream with ``"event"`` naming them.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
import time
from collections import OrderedDict
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyclassify.project import Project


def address(raw: bytes, version: int) -> str:
    return str(ipaddress.ip_address(raw[12:16] if version == 4 else raw))


def endpoint_refs(project: Project | None, src: str, dst: str) -> dict[str, str]:
    """``src_endpoint``/``dst_endpoint`` (``ns/name`` or host endpoint name) where the
    inventory knows the address; absent otherwise."""
    out: dict[str, str] = {}
    if project is None:
        return out
    for key, ip in (("src_endpoint", src), ("dst_endpoint", dst)):
        owner = project.inventory.owner_of(ipaddress.ip_address(ip))
        if owner is not None:
            out[key] = owner.ref
    return out


class FlowLog:
    """Writes events as JSON lines to ``stream`` (thread-safe); ``seen(key)`` deduplicates."""

    def __init__(self, stream: IO[str] | None = None, capacity: int = 65536, log_allowed: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.capacity = capacity
        self.log_allowed = log_allowed
        self._recent: OrderedDict[Any, None] = OrderedDict()
        self._lock = threading.Lock()
        #: Lines that could not be written (the destination full, closed or gone): counted, and
        #: never a reason to stop enforcing.
        self.lost = 0

    def seen(self, key: Any) -> bool:
        """True if ``key`` was logged recently; records it otherwise."""
        with self._lock:
            if key in self._recent:
                self._recent.move_to_end(key)
                return True
            self._recent[key] = None
            if len(self._recent) > self.capacity:
                self._recent.popitem(last=False)
            return False

    def forget(self) -> None:
        """Forget every flow (after a policy change a flow may be logged again)."""
        with self._lock:
            self._recent.clear()

    def emit(self, event: str, **fields: Any) -> None:
        record = {"ts": round(time.time(), 6), "event": event, **fields}
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                self.lost += 1
