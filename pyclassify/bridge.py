"""The AF_PACKET inline bridge (``pyclassify enforce --bridge IF1,IF2``): a bump-in-the-wire
between two interfaces that forwards the frames policy allows and drops the rest, with the
engine's own connection tracking (no kernel conntrack on this path).

The loop is native (``pyclassify._native.AfPacketBridge``, native/afpacket.pxi): TPACKET_V3
receive rings on both interfaces, frames decoded into header batches and judged through the
engine's C ABI without the GIL, allowed frames sent on to the other interface with sendmmsg.
This module is its Python face: construction (in a network namespace if asked), a thread to run
it in, hot engine swaps, counters.

What the bridge does with each kind of frame:

======================================  =====================================================
frame                                   what happens
======================================  =====================================================
IPv4, IPv6 (untagged or 802.1Q/ad)      judged by policy + conntrack: forwarded or dropped
                                        (``reject=True``: answered with an RST or an ICMP
                                        port unreachable back out of its side); with
                                        ``http_connections``, TCP requests read in line by
                                        http rules, a denied one's connection cut both ways
IP inside a tunnel (VXLAN, Geneve,      judged by the packet inside (``decapsulated``): a
IP in IP, GRE: between two nodes)       denied one only dropped (no reset or ICMP answer,
                                        which would have to be tunnelled back); one carrying
                                        ARP forwarded unjudged (``tunnel_not_ip``); a tunnel
                                        that cannot be read dropped (``tunnel_unread``);
                                        ``decapsulate=False``: judged by the outer header
ICMPv6 neighbour discovery (133-136)    forwarded unjudged (``nd_bypass=True``, the default)
ARP                                     forwarded unjudged
other ethertypes (LLDP, STP, MPLS, ..)  dropped (``forward_other=True`` forwards them)
malformed IP, frames too big for ring   dropped and counted
VLAN tag stripped into metadata         dropped and counted (``vlan_stripped``)
======================================  =====================================================

For the enforce command, one call::

    bridge = start_bridge("IF1,IF2", engine._engine.capsule(), fail_open=False)
    ...
    bridge.swap(new_engine._engine.capsule())   # on a policy change: returns connections revoked
    bridge.counters                             # for metrics
    bridge.stop()                               # on exit: the rings are released
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyclassify._native import AfPacketBridge

__all__ = ["Bridge", "BridgeError", "parse_bridge_spec", "start_bridge", "in_netns"]

CLONE_NEWNET = 0x40000000


class BridgeError(RuntimeError):
    """The bridge could not start, or its loop failed."""


def parse_bridge_spec(spec: str) -> tuple[str, str]:
    """``"IF1,IF2"`` -> ``("IF1", "IF2")``; ValueError with a readable message otherwise."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"--bridge wants two interfaces as IF1,IF2, got {spec!r}")
    if parts[0] == parts[1]:
        raise ValueError(f"--bridge wants two different interfaces, got {parts[0]!r} twice")
    for p in parts:
        if len(p.encode()) > 15 or "/" in p or any(c.isspace() for c in p):
            raise ValueError(f"invalid interface name {p!r}")
    return parts[0], parts[1]


@contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the body in network namespace ``name`` (``ip netns`` name or a path), this thread only;
    sockets created inside stay in it. ``None``: the current namespace."""
    if name is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    path = name if "/" in name else f"/run/netns/{name}"
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        there = os.open(path, os.O_RDONLY)
    except OSError:
        os.close(here)
        raise
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
        try:
            yield
        finally:
            if libc.setns(here, CLONE_NEWNET) != 0:  # pragma: no cover - cannot fail as root
                err = ctypes.get_errno()
                raise OSError(err, f"setns back: {os.strerror(err)}")
    finally:
        os.close(there)
        os.close(here)


class Bridge:
    """An AF_PACKET bridge between ``if1`` and ``if2`` judged by the engine of ``engine_capsule``
    (``NativeEngine._engine.capsule()``).

    Options (all keyword): ``netns`` (open the interfaces in that network namespace),
    ``block_size``/``block_nr``/``tov_ms`` (TPACKET_V3 ring: block bytes, blocks, retire timeout),
    ``batch`` (frames per engine call), ``vnet_hdr`` (carry checksum/GSO offload state across;
    on by default), ``judge`` (False: a plain copy-through bridge, for baselines),
    ``forward_other``, ``nd_bypass``, ``fail_open`` (an engine error forwards the batch instead of
    dropping it), ``conntrack``, ``max_entries``, ``tcp_loose``, ``pod_allow``/``host_allow``
    (the defaults for endpoints no policy selects), ``vxlan_ports``/``geneve_ports``/``decapsulate``
    (the tunnels whose frames are judged by the packet inside, ``pyclassify.tunnels``).
    """

    def __init__(self, if1: str, if2: str, engine_capsule: Any, *, netns: str | None = None, **options: Any) -> None:
        self.if1, self.if2 = if1, if2
        try:
            with in_netns(netns):
                self._native = AfPacketBridge(if1, if2, engine_capsule, **options)
        except OSError as e:
            raise BridgeError(str(e)) from e
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: str, engine_capsule: Any, **options: Any) -> Bridge:
        """A bridge from ``--bridge IF1,IF2``."""
        if1, if2 = parse_bridge_spec(spec)
        return cls(if1, if2, engine_capsule, **options)

    # --- running -------------------------------------------------------------------------------

    def run(self) -> None:
        """Run the loop in this thread until ``stop()`` (from another thread or a signal
        handler); the rings are released when it returns."""
        try:
            self._native.run()
        except OSError as e:
            raise BridgeError(str(e)) from e
        finally:
            self._native.close()

    def start(self) -> Bridge:
        """Run the loop in a daemon thread; returns self."""
        with self._lock:
            if self._thread is not None:
                raise BridgeError("the bridge was already started")

            def target() -> None:
                try:
                    self.run()
                except BaseException as e:  # noqa: BLE001 - reported by stop()/error
                    self._error = e

            self._thread = threading.Thread(target=target, name=f"bridge {self.if1},{self.if2}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and release the rings; raises the loop's error if it failed."""
        self._native.stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise BridgeError(f"the bridge loop did not stop within {timeout} s")
        elif not self._native.closed and not self._native.running:
            self._native.close()
        if self._error is not None:
            err, self._error = self._error, None
            raise BridgeError(f"the bridge loop failed: {err}") from err

    @property
    def running(self) -> bool:
        return bool(self._native.running)

    @property
    def error(self) -> BaseException | None:
        return self._error

    def __enter__(self) -> Bridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- policy and counters -------------------------------------------------------------------

    def swap(self, engine_capsule: Any, timeout: float = 5.0) -> int:
        """Judge with a new engine from the next batch on. Tracked connections it denies are
        revoked first (their next packets are judged again and dropped). Returns once the loop
        uses the new engine; the old one is released only then. Returns how many connections
        this swap revoked."""
        return int(self._native.swap(engine_capsule, timeout))

    @property
    def counters(self) -> dict[str, Any]:
        """Counters of the loop (see ``BridgeCounters`` in native/afpacket.pxi): per-interface
        ``rx_frames``/``rx_bytes``/``tx_frames``/``tx_bytes`` (index 0 = if1), and ``judged``,
        ``allowed``, ``denied``, ``established``, ``arp``, ``nd``, ``other_forwarded``,
        ``other_dropped``, ``malformed``, ``decapsulated``, ``tunnel_unread``, ``tunnel_not_ip``,
        ``truncated``, ``vlan_stripped``, ``tx_failed``,
        ``engine_errors``, ``blocks``, ``batches``, ``judge_ns``, ``loop_cpu_ns`` (``loop_user_ns`` +
        ``loop_sys_ns``), ``swaps``,
        ``revoked``, ``expired``, ``kernel_packets``/``kernel_drops`` (ring overruns), ``tracked``."""
        return dict(self._native.counters)


def start_bridge(spec: str, engine_capsule: Any, **options: Any) -> Bridge:
    """``--bridge IF1,IF2`` in one call: open both rings and run the loop in a thread."""
    return Bridge.from_spec(spec, engine_capsule, **options).start()
