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

from pyclassify._engine import ServiceIndex
from pyclassify.inventory import Inventory, Service, ServicePort
from pyclassify.ir import EndpointKind


def address_bytes(ip: Any) -> bytes:
    """An address as the header batch holds it (IPv4 mapped into IPv6)."""
    if not isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        ip = ipaddress.ip_address(ip)
    if ip.version == 4:
        return b"\0" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


def node_addresses(inventory: Inventory) -> set[Any]:
    """The addresses a NodePort answers on: the nodes' and the host endpoints'."""
    found = {a for n in inventory.nodes.values() for a in n.addresses}
    found |= {a for e in inventory.endpoints if e.kind is EndpointKind.HOST for a in e.ips}
    return found


def backend_port(inventory: Inventory, ip: Any, port: ServicePort) -> int | None:
    """The port kube-proxy delivers ``port`` of a Service to on backend ``ip``: its targetPort,
    a named one resolved on the backend pod (None when the pod has no such port), or the
    Service port itself."""
    target = port.target_port
    if isinstance(target, str):
        owner = inventory.owner_of(ip)
        found = owner.named_port(target, port.protocol) if owner is not None else []
        return found[0] if found else None
    return target if target is not None else port.port


def backends_of(inventory: Inventory, service: Service, port: ServicePort, version: int) -> list[tuple[Any, int]]:
    """(address, port) of every backend kube-proxy may deliver ``port`` of ``service`` to, for
    a virtual address of IP ``version`` (kube-proxy translates within one family)."""
    out = []
    for ip in service.endpoint_ips:
        if ip.version == version:
            number = backend_port(inventory, ip, port)
            if number is not None:
                out.append((ip, number))
    return out


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
        judged = (
            "the only backend"
            if len(self.backends) == 1
            else "every backend (a capture before DNAT does not show which one kube-proxy picked)"
            if self.backends
            else "no backend: kube-proxy delivers nothing"
        )
        return {
            "name": self.service,
            "via": self.via,
            "backends": [f"{text}:{port}" for _, port, text in self.backends],
            "judged": judged,
        }


class ServiceMap:
    def __init__(self, inventory: Inventory) -> None:
        self.entries: list[Entry] = []
        nodes = sorted(node_addresses(inventory), key=str)
        for svc in inventory.services.values():
            name = f"{svc.namespace}/{svc.name}"
            for port in svc.ports:
                vips = [("ClusterIP", ip, port.port) for ip in svc.cluster_ips]
                if port.node_port is not None:
                    vips += [("NodePort", ip, port.node_port) for ip in nodes]
                by_family: dict[int, tuple[tuple[bytes, int, str], ...]] = {}  # the same for every vip
                for via, vip, number in vips:
                    backends = by_family.get(vip.version)
                    if backends is None:
                        backends = by_family[vip.version] = tuple(
                            (address_bytes(ip), target, str(ip))
                            for ip, target in backends_of(inventory, svc, port, vip.version)
                        )
                    self.entries.append(Entry(name, via, address_bytes(vip), port.protocol, number, backends))
        # The native lookup over the entries (the first entry of an address:protocol:port wins).
        self._index = ServiceIndex([(e.address, e.protocol, e.port) for e in self.entries])
        #: Entries without any backend: kube-proxy delivers nothing there.
        self.no_backend = np.array([not e.backends for e in self.entries], dtype=bool)
        #: Per entry, the backend choices a packet to it is judged for (1 without backends).
        self.backend_count = np.array([max(1, len(e.backends)) for e in self.entries], dtype=np.int64)
        self._by_choice: dict[int, tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, headers: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Per packet: the entry its destination (a request) or source (a reply) is, -1 if none;
        and whether it is a request (destination translated) rather than a reply."""
        n = len(headers)
        if not self.entries or n == 0:
            return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)
        entry, forward = np.empty(n, dtype=np.int64), np.empty(n, dtype=bool)
        self._index.lookup(np.ascontiguousarray(headers), entry, forward)
        return entry, forward

    def _choice(self, choice: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """Per entry: the address and port of backend number ``choice`` (modulo their count)."""
        found = self._by_choice.get(choice)
        if found is None:
            picked = [
                e.backends[choice % len(e.backends)] if e.backends else (e.address, e.port, "") for e in self.entries
            ]
            found = self._by_choice[choice] = (
                np.frombuffer(b"".join(a for a, _, _ in picked), dtype=np.uint8).reshape(-1, 16),
                np.array([p for _, p, _ in picked], dtype=np.int64),
            )
        return found

    def rewrite(
        self, headers: npt.NDArray[Any], entry: npt.NDArray[np.int64], forward: npt.NDArray[np.bool_], choice: int
    ) -> npt.NDArray[Any]:
        """A copy of ``headers`` (every row a service packet) as kube-proxy delivers it to
        backend number ``choice`` of its entry (modulo their count); rows of an entry without
        backends stay as they are."""
        out = headers.copy()
        address, port = self._choice(choice)
        live = ~self.no_backend[entry]
        fwd, back = live & forward, live & ~forward
        out["dst_addr"][fwd] = address[entry[fwd]]
        out["dport"][fwd] = port[entry[fwd]]
        out["src_addr"][back] = address[entry[back]]
        out["sport"][back] = port[entry[back]]
        return out
