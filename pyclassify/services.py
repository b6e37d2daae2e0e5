"""Service virtual addresses as kube-proxy translates them, for ``replay``.

A capture taken on a node before DNAT shows a Service's ClusterIP (or a node address and a
NodePort) as the destination, and the same address as the source of the replies. Policy never
sees those: it judges the backend kube-proxy picked (``explain`` does the same per flow, in
``pyclassify.analysis``). ``ServiceMap`` finds such packets in a header batch and rewrites them
as kube-proxy delivers them to one backend — destination (replies: source) address and port —
so the engine judges the backend, with connection tracking per backend choice.

A pre-DNAT capture cannot tell which backend kube-proxy picked. A Service with one backend is
judged against it; one with several is judged against every backend, and a packet is allowed
only when every backend allows it (``Replay`` runs one pass per backend choice).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify.batch import FLAG_HAS_PORTS, FLAG_MALFORMED
from pyclassify.inventory import Inventory
from pyclassify.ir import EndpointKind


def address_bytes(ip: Any) -> bytes:
    """An address as the header batch holds it (IPv4 mapped into IPv6)."""
    ip = ipaddress.ip_address(ip)
    if ip.version == 4:
        return b"\0" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


@dataclass(frozen=True)
class Entry:
    """One virtual address:port of a Service and the backends behind it."""

    service: str  # ns/name
    via: str  # "ClusterIP" or "NodePort"
    address: bytes  # as in the header batch
    protocol: int
    port: int
    backends: tuple[tuple[bytes, int, str], ...]  # (address, target port, address text)

    def to_json(self) -> dict[str, Any]:
        judged = ("the only backend" if len(self.backends) == 1 else
                  "every backend (a capture before DNAT does not show which one kube-proxy picked)"
                  if self.backends else "no backend: kube-proxy delivers nothing")
        return {"name": self.service, "via": self.via,
                "backends": [f"{text}:{port}" for _, port, text in self.backends], "judged": judged}


class ServiceMap:
    def __init__(self, inventory: Inventory) -> None:
        self.entries: list[Entry] = []
        node_ips = {a for n in inventory.nodes.values() for a in n.addresses}
        node_ips |= {a for e in inventory.endpoints if e.kind is EndpointKind.HOST for a in e.ips}
        for svc in inventory.services.values():
            for port in svc.ports:
                vips = [("ClusterIP", ip, port.port) for ip in svc.cluster_ips]
                if port.node_port is not None:
                    vips += [("NodePort", ip, port.node_port) for ip in sorted(node_ips, key=str)]
                for via, vip, number in vips:
                    backends = []
                    for ip in svc.endpoint_ips:
                        if ip.version != vip.version:
                            continue
                        target = port.target_port
                        if isinstance(target, str):
                            owner = inventory.owner_of(ip)
                            found = owner.named_port(target, port.protocol) if owner is not None else []
                            if not found:
                                continue  # kube-proxy has no endpoint port for it
                            target = found[0]
                        backends.append((address_bytes(ip), target if target is not None else port.port, str(ip)))
                    self.entries.append(Entry(f"{svc.namespace}/{svc.name}", via, address_bytes(vip),
                                              port.protocol, number, tuple(backends)))
        self._keys: dict[tuple[bytes, int, int], int] = {}
        for i, e in enumerate(self.entries):
            self._keys.setdefault((e.address, e.protocol, e.port), i)
        self._addresses = np.array(sorted({_word_key(e.address) for e in self.entries}), dtype=np.uint64)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, headers: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Per packet: the entry its destination (a request) or source (a reply) is, -1 if none;
        and whether it is a request (destination translated) rather than a reply."""
        n = len(headers)
        entry = np.full(n, -1, dtype=np.int64)
        forward = np.zeros(n, dtype=bool)
        if not self.entries or n == 0:
            return entry, forward
        usable = ((headers["flags"] & FLAG_HAS_PORTS) != 0) & ((headers["flags"] & FLAG_MALFORMED) == 0)
        dst = np.isin(_words(headers["dst_addr"]), self._addresses) & usable
        src = np.isin(_words(headers["src_addr"]), self._addresses) & usable & ~dst
        for i in np.flatnonzero(dst | src).tolist():
            h = headers[i]
            proto = int(h["protocol"])
            if dst[i]:
                found = self._keys.get((bytes(h["dst_addr"]), proto, int(h["dport"])))
                if found is not None:
                    entry[i], forward[i] = found, True
                    continue
            found = self._keys.get((bytes(h["src_addr"]), proto, int(h["sport"])))
            if found is not None:
                entry[i] = found
        return entry, forward

    def rewrite(self, headers: npt.NDArray[Any], entry: npt.NDArray[np.int64], forward: npt.NDArray[np.bool_],
                choice: int) -> npt.NDArray[Any]:
        """A copy of ``headers`` (every row a service packet) as kube-proxy delivers it to
        backend number ``choice`` of its entry (modulo their count)."""
        out = headers.copy()
        for e in np.unique(entry).tolist():
            backends = self.entries[e].backends
            if not backends:
                continue
            addr, port, _ = backends[choice % len(backends)]
            rows = entry == e
            raw = np.frombuffer(addr, dtype=np.uint8)
            out["dst_addr"][rows & forward] = raw
            out["dport"][rows & forward] = port
            out["src_addr"][rows & ~forward] = raw
            out["sport"][rows & ~forward] = port
        return out


def _word_key(address: bytes) -> int:
    hi = int.from_bytes(address[:8], "little")
    lo = int.from_bytes(address[8:], "little")
    return (hi * 0x9E3779B97F4A7C15 ^ lo) & 0xFFFFFFFFFFFFFFFF


def _words(addresses: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    words = np.ascontiguousarray(addresses).view(np.uint64).reshape(-1, 2)
    with np.errstate(over="ignore"):
        return words[:, 0] * np.uint64(0x9E3779B97F4A7C15) ^ words[:, 1]
