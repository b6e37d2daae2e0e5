"""The endpoint inventory: what the addresses of a flow are, and their labels.

Built from Namespace, Pod (and workload controllers' pod templates), Node, Service,
EndpointSlice, ServiceAccount, HostEndpoint, GlobalNetworkSet and NetworkSet objects
(see ``pyclassify.kinds.inventory_kinds``). Plain typed data: the reference evaluator and the
native compiler both read it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pyclassify.ir import EndpointKind, IPNetwork

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ContainerPort:
    port: int
    protocol: int  # IP protocol number (K8s default TCP)
    name: str | None = None


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Endpoint:
    """A pod (or workload template), or a Calico HostEndpoint."""

    kind: EndpointKind
    name: str
    namespace: str | None  # None for host endpoints
    labels: Mapping[str, str]
    ips: tuple[IPAddress, ...] = ()
    ports: tuple[ContainerPort, ...] = ()  # named ports come from here
    service_account: str | None = None
    node: str | None = None
    host_network: bool = False
    profiles: tuple[str, ...] = ()  # Calico profiles (HostEndpoint spec.profiles)
    interface: str | None = None  # HostEndpoint interfaceName
    workload: str | None = None  # owning controller as "Kind/name" (Deployment/web), if any

    @property
    def ref(self) -> str:
        """``ns/name`` for pods, the bare name for host endpoints (as the CLI accepts them)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def named_port(self, name: str, protocol: int | None) -> list[int]:
        return [p.port for p in self.ports if p.name == name and (protocol is None or p.protocol == protocol)]


# A frozen dataclass sets each field through object.__setattr__: 5 µs for an Endpoint, 1 µs for
# a ContainerPort, most of the cost of reading a pod at cluster size. The two helpers below build
# the very same objects (equal, hashed alike) for the loaders' bulk paths.
_ENDPOINT_DEFAULTS = {f.name: f.default for f in fields(Endpoint) if f.default is not MISSING}
_ENDPOINT_REQUIRED = frozenset(f.name for f in fields(Endpoint) if f.default is MISSING)
_PORTS: dict[tuple[int, int, str | None], ContainerPort] = {}


def endpoint(**values: Any) -> Endpoint:
    """``Endpoint(**values)`` without the per-field cost; every field without a default given."""
    if not _ENDPOINT_REQUIRED <= values.keys() or not values.keys() <= _ENDPOINT_DEFAULTS.keys() | _ENDPOINT_REQUIRED:
        raise TypeError(f"endpoint() fields: {sorted(values)}")
    e = object.__new__(Endpoint)
    e.__dict__.update(_ENDPOINT_DEFAULTS)
    e.__dict__.update(values)
    return e


def container_port(port: int, protocol: int, name: str | None) -> ContainerPort:
    """One shared ContainerPort per (port, protocol, name): every replica of a workload repeats
    its template's ports."""
    key = (port, protocol, name)
    found = _PORTS.get(key)
    if found is None:
        if len(_PORTS) >= 1 << 16:  # bounded however many distinct ports a daemon's reloads see
            _PORTS.clear()
        found = _PORTS[key] = ContainerPort(port, protocol, name)
    return found


@dataclass(frozen=True)
class NetworkSet:
    """GlobalNetworkSet (namespace None) or NetworkSet: labelled CIDRs that rule selectors match."""

    name: str
    namespace: str | None
    labels: Mapping[str, str]
    nets: tuple[IPNetwork, ...]
    domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    addresses: tuple[IPAddress, ...] = ()


@dataclass(frozen=True)
class ServicePort:
    port: int
    target_port: int | str | None
    protocol: int
    name: str | None = None
    node_port: int | None = None  # type NodePort / LoadBalancer: the port on every node's addresses


@dataclass(frozen=True)
class Service:
    name: str
    namespace: str
    selector: Mapping[str, str] | None
    cluster_ips: tuple[IPAddress, ...] = ()
    ports: tuple[ServicePort, ...] = ()
    endpoint_ips: tuple[IPAddress, ...] = ()  # from EndpointSlices (or the selector's pods)
    from_slices: bool = False  # endpoint_ips came from EndpointSlices, not from the selector


@dataclass(frozen=True)
class ServiceAccount:
    name: str
    namespace: str
    labels: Mapping[str, str]


@dataclass
class Inventory:
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    endpoints: list[Endpoint] = field(default_factory=list)
    network_sets: list[NetworkSet] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    services: dict[tuple[str, str], Service] = field(default_factory=dict)  # (namespace, name)
    service_accounts: dict[tuple[str, str], ServiceAccount] = field(default_factory=dict)
    #: Enforce for this node's endpoints only (``enforce --node``): another node's pods and host
    #: endpoints stay peers for every selector, but their own policy is their node's to enforce.
    #: None: every endpoint's policy applies (the offline commands, a single-node firewall).
    enforcing_node: str | None = None
    #: What DNS answers taught (``pyclassify._engine.DomainFacts``: name -> addresses, each for
    #: its TTL): the addresses ``domains``/``domainNames`` rules match. None: nothing learned.
    domains: Any = None

    def enforces(self, e: Endpoint) -> bool:
        """Whether this inventory's node enforces ``e``'s own policy (see ``enforcing_node``)."""
        return self.enforcing_node is None or e.node == self.enforcing_node

    def namespace_labels(self, namespace: str | None) -> Mapping[str, str]:
        """Labels of a namespace; a namespace with no manifest exists implicitly with the
        ``kubernetes.io/metadata.name`` label the API server always sets."""
        if namespace is None:
            return {}
        ns = self.namespaces.get(namespace)
        if ns is None:
            return {"kubernetes.io/metadata.name": namespace}
        return ns.labels

    def endpoints_at(self, ip: IPAddress) -> list[Endpoint]:
        return list(self._address_index().get(ip, ()))

    def owner_of(self, ip: IPAddress) -> Endpoint | None:
        """The endpoint an address resolves to: a pod's own address wins over host-network pods
        sharing their node's address; then by namespace, name and kind (the native engine's
        rule, so both evaluators name the same endpoint)."""
        owners = self._address_index().get(ip)
        if not owners:
            return None
        return min(owners, key=lambda e: (e.host_network, e.namespace or "", e.name, e.kind.value))

    def _address_index(self) -> dict[IPAddress, list[Endpoint]]:
        # Built on first use and again when the endpoint list was replaced or grew.
        cached = self.__dict__.get("_by_address")
        if cached is not None and cached[0] is self.endpoints and cached[1] == len(self.endpoints):
            return cached[2]
        index: dict[IPAddress, list[Endpoint]] = {}
        for e in self.endpoints:
            for ip in e.ips:
                index.setdefault(ip, []).append(e)
        self.__dict__["_by_address"] = (self.endpoints, len(self.endpoints), index)
        return index

    def find(self, ref: str) -> Endpoint | None:
        """An endpoint by ``ns/name`` (pod) or name (host endpoint)."""
        cached = self.__dict__.get("_by_ref")
        if cached is None or cached[0] is not self.endpoints or cached[1] != len(self.endpoints):
            index: dict[str, Endpoint] = {}
            for e in self.endpoints:
                index.setdefault(e.ref, e)
            cached = (self.endpoints, len(self.endpoints), index)
            self.__dict__["_by_ref"] = cached
        return cached[2].get(ref)

    def pods(self) -> Iterable[Endpoint]:
        return (e for e in self.endpoints if e.kind is EndpointKind.POD)
