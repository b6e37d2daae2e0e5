"""The live NFQUEUE path of ``pyclassify enforce --queue N`` behind one Python face, as
``pyclassify.bridge`` is for the AF_PACKET bridge: ``pyclassify.enforce`` uses this module and
never the compiled module or the engine's capsule directly.

The loops are native (``native/nfqueue.pxi``, ``native/ctnetlink.pxi``, ``native/inotify.pxi``):
one NFQUEUE queue per loop, bound over raw netlink, its packets decoded into header batches and
judged through the engine's C ABI by an ``EngineClient`` that owns the loop's connection tracker,
without the GIL; a ctnetlink socket deletes the kernel conntrack entries of revoked connections;
inotify tells the daemon when its manifests change.

For the daemon::

    loop = open_queue(engine, 0, fail_open=False)      # bound; run loop.run() in a thread
    n, revoked = loop.swap(engine_capsule(new), True)  # on a policy change: revalidation
    kernel_conntrack().delete(revoked)                 # their next packets are judged again
"""

from __future__ import annotations

from typing import Any

from pyclassify._native import CtNetlink, EngineClient, Inotify, NfQueue
from pyclassify.engine import NativeEngine

__all__ = ["CtNetlink", "Inotify", "NfQueue", "engine_capsule", "kernel_conntrack", "open_queue"]


def engine_capsule(engine: NativeEngine) -> Any:
    """What a native loop holds of ``engine``: its C function table and handle, in a capsule
    that keeps the engine alive (``NfQueue.swap``, ``Bridge.swap``)."""
    return engine._engine.capsule()


def open_queue(engine: NativeEngine, queue: int, *, conntrack_entries: int = 262144, pod_allow: bool = True,
               host_allow: bool = False, **options: Any) -> NfQueue:
    """An NFQUEUE loop on queue number ``queue`` judged by ``engine`` with its own connection
    tracker (``conntrack_entries`` at most), bound (``OSError`` when the queue is taken or
    without permission); ``options`` are ``NfQueue``'s (``fail_open``, ``copy_range``,
    ``maxlen``, ``batch``, ``batch_verdicts``). Run ``loop.run()`` in a thread of its own."""
    client = EngineClient(engine_capsule(engine), conntrack=True, max_entries=conntrack_entries,
                          pod_allow=pod_allow, host_allow=host_allow)
    loop = NfQueue(client, queue, **options)
    loop.open()
    return loop


def kernel_conntrack() -> CtNetlink:
    """A ctnetlink socket of the current network namespace: ``delete(flows)`` removes the kernel
    conntrack entries of the connections revalidation revoked."""
    return CtNetlink()
