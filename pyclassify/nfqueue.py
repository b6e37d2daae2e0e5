"""The live NFQUEUE path of ``pyclassify enforce --queue N`` behind one Python face, as
``pyclassify.bridge`` is for the AF_PACKET bridge: ``pyclassify.enforce`` uses this module and
never the compiled module or the engine's capsule directly.

The loops are native (``native/nfqueue.pxi``, ``native/ctnetlink.pxi``, ``native/inotify.pxi``):
one NFQUEUE queue per loop, bound over raw netlink, its packets decoded into header batches and
judged by policy through the engine's C ABI by an ``EngineClient``, without the GIL; a
ctnetlink socket reads the kernel's connection table back and deletes the entries of revoked
connections; inotify tells the daemon when its manifests change.

For the daemon::

    loop = open_queue(engine, 0, fail_open=False)      # bound; run loop.run() in a thread
    loop.swap(engine_capsule(new), False)              # on a policy change
    ctnl = kernel_conntrack()
    n, revoke, restore, _ = kernel_revalidate(ctnl, engine_capsule(new), mark=JUDGED_CTMARK,
                                              revoked_mark=REVOKED_CTMARK, ...)
    ctnl.delete(revoke, REVOKED_CTMARK, REVOKED_CTMARK)  # marked: our rules drop their packets
    ctnl.delete(restore, 0, REVOKED_CTMARK)              # allowed again: unmarked
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyclassify._native import CtNetlink, EngineClient, Inotify, NfQueue
from pyclassify.batch import HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.engine import HTTP_AWAITS, NativeEngine

#: A connection by its original tuple: (src, dst, sport, dport, protocol, ip version), addresses
#: as 16 bytes (IPv4 mapped).
Flow = tuple[bytes, bytes, int, int, int, int]

__all__ = [
    "CtNetlink",
    "ForwardCheck",
    "Inotify",
    "NfQueue",
    "PreDnatCheck",
    "engine_capsule",
    "kernel_conntrack",
    "kernel_revalidate",
    "open_queue",
]


def engine_capsule(engine: NativeEngine) -> Any:
    """What a native loop holds of ``engine``: its C function table and handle, in a capsule
    that keeps the engine alive (``NfQueue.swap``, ``Bridge.swap``)."""
    return engine._engine.capsule()


def open_queue(
    engine: NativeEngine,
    queue: int,
    *,
    conntrack_entries: int = 0,
    pod_allow: bool = True,
    host_allow: bool = False,
    http_connections: int = 0,
    via: tuple[int | None, bool] | None = None,
    **options: Any,
) -> NfQueue:
    """An NFQUEUE loop on queue number ``queue`` judged by ``engine``, bound (``OSError`` when
    the queue is taken or without permission); ``options`` are ``NfQueue``'s (``fail_open``,
    ``copy_range``, ``maxlen``, ``batch``, ``batch_verdicts``, ``reject_mark``, ``accept_mark``). Run ``loop.run()`` in a thread of
    its own. The kernel's conntrack is the connection table on this path (only new connections
    are queued), so every queued packet is judged by policy: ``conntrack_entries`` > 0 gives the
    loop an engine-side tracker as well (at most that many entries), for tests and comparison.
    ``via`` (``(host endpoint index, ingress)``) makes it a loop of that endpoint's forward hook
    (``EngineClient(via=...)``; with ``repeat_accepted`` and its mark in ``options``)."""
    client = EngineClient(
        engine_capsule(engine),
        conntrack=conntrack_entries > 0,
        max_entries=max(conntrack_entries, 1),
        pod_allow=pod_allow,
        host_allow=host_allow,
        http_connections=http_connections,
        via=via,
    )
    loop = NfQueue(client, queue, **options)
    loop.open()
    return loop


@dataclass(frozen=True)
class ForwardCheck:
    """A host endpoint's forward hook in a revalidation: the connections whose conntrack mark
    says it let them on (``mark & mask == mark``) are judged by it again (``capsule``'s engine,
    the endpoint ``endpoint`` the subject of the side, ``ingress`` or egress; None: no host
    endpoint any more, nothing denied)."""

    capsule: Any
    endpoint: int | None
    ingress: bool
    mark: int
    mask: int


@dataclass(frozen=True)
class PreDnatCheck:
    """The pre-DNAT hook in a revalidation: the connections a pre-DNAT rule allowed (conntrack
    mark ``mark``) are judged by ``capsule``'s engine (pre-DNAT policy) on their original
    destination: a rule that denies now cuts them; while a rule allows them, those whose normal
    host policy that skipped (``host_mark``) are not judged by it."""

    capsule: Any
    mark: int
    host_mark: int


def kernel_revalidate(
    ctnl: CtNetlink,
    capsule: Any,
    *,
    mark: int,
    revoked_mark: int,
    pod_allow: bool,
    host_allow: bool,
    ipv6: bool = True,
    forward: tuple[ForwardCheck, ...] = (),
    pre_dnat: PreDnatCheck | None = None,
    unmarked: Callable[[Any, Any], Any] | None = None,
) -> tuple[int, list[Flow], list[Flow], Any]:
    """Judge every connection of the kernel's table that carries ``mark`` (the ones our rules
    queued), however old, by the engine of ``capsule`` (as the filter table saw it: after DNAT),
    and by the host endpoint hooks that let it on: a forward hook (``forward``), the pre-DNAT
    hook (``pre_dnat``, before DNAT): ``(judged, revoke, restore, adopt)``; revoke and restore
    as original tuples for ``ctnl.delete``: the ones now denied that are not marked
    ``revoked_mark`` yet, and the ones so marked that are allowed again. With ``unmarked`` (a
    function of the dump's two header arrays, judged and original, that says which rows our
    rules never queue), the entries without ``mark`` are judged too, all but those: ``adopt``
    holds the original rows of the ones allowed (for ``ctnl.mark_rows`` to give them ``mark``;
    otherwise none). The dump and the judging are native; Python sees only the revoked and
    restored rows."""
    judged, original = ctnl.dump(0, 0, ipv6) if unmarked is not None else ctnl.dump(mark, mark, ipv6)
    headers = np.frombuffer(judged, HEADER_DTYPE)
    rows = np.frombuffer(original, HEADER_DTYPE)
    marked = (rows["frag_id"] & mark) != 0  # dump() keeps each entry's mark there
    if unmarked is not None and len(headers):
        ours = marked | ~unmarked(headers, rows)
        headers, rows, marked = np.ascontiguousarray(headers[ours]), np.ascontiguousarray(rows[ours]), marked[ours]
    if not len(headers):
        return 0, [], [], rows[:0]
    out = np.zeros(len(headers), VERDICT_DTYPE)
    EngineClient(capsule, conntrack=False, pod_allow=pod_allow, host_allow=host_allow).judge(headers, out)
    # a connection admitted up to its HTTP request stays admitted (the HTTP loop judges it)
    allowed = (out["allow"] != 0) | (out["http"] == HTTP_AWAITS)
    marks = rows["frag_id"]
    revoked = (marks & revoked_mark) != 0
    if pre_dnat is not None:
        through = np.flatnonzero((marks & pre_dnat.mark) != 0)
        if len(through):
            hook = np.zeros(len(through), VERDICT_DTYPE)
            EngineClient(pre_dnat.capsule, conntrack=False, pod_allow=True, host_allow=True).judge(
                np.ascontiguousarray(rows[through]), hook
            )  # the original tuple: before DNAT
            by_rule = (hook["allow"] != 0) & (
                ((hook["ingress"]["present"] != 0) & (hook["ingress"]["reason"] == 0))
                | ((hook["egress"]["present"] != 0) & (hook["egress"]["reason"] == 0))
            )
            skipped = (marks[through] & pre_dnat.host_mark) != 0
            allowed[through] = np.where(hook["allow"] == 0, False, np.where(by_rule & skipped, True, allowed[through]))
    for check in forward:
        through = np.flatnonzero((marks & check.mask) == check.mark)
        if len(through):
            hook = np.zeros(len(through), VERDICT_DTYPE)
            EngineClient(check.capsule, conntrack=False, via=(check.endpoint, check.ingress)).judge(
                np.ascontiguousarray(headers[through]), hook
            )
            allowed[through] &= hook["allow"] != 0

    def flows(select: Any) -> list[Flow]:
        return [
            (
                r["src_addr"].tobytes(),
                r["dst_addr"].tobytes(),
                int(r["sport"]),
                int(r["dport"]),
                int(r["protocol"]),
                int(r["ip_version"]),
            )
            for r in rows[select]
        ]

    adopt = np.ascontiguousarray(rows[allowed & ~marked])
    return len(headers), flows(~allowed & ~revoked), flows(allowed & revoked), adopt


def kernel_conntrack() -> CtNetlink:
    """A ctnetlink socket of the current network namespace: ``delete(flows)`` removes the kernel
    conntrack entries of the connections revalidation revoked."""
    return CtNetlink()
