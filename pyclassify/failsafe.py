"""Failsafe ports of host endpoints, as Calico keeps them (docs/architecture.md §3: ``deny`` for Calico
HostEndpoints "apart from their failsafe ports").

Calico keeps a few ports of every host endpoint open whatever the policy says, so that a wrong
policy cannot cut a node off (SSH, DHCP, BGP, etcd, the API server): Felix's
``FailsafeInboundHostPorts`` and ``FailsafeOutboundHostPorts``. Here they are ordinary IR — one
policy per direction in a tier of their own, evaluated before every other tier, applying to host
endpoints only, with one Allow rule per entry and ``Pass`` at the end of the tier — so the
reference evaluator and the native engine (and ``enforce``, ``replay``, ``explain``) hold them
alike, and ``explain`` names the entry that allowed a flow (``Failsafe/inbound rule tcp:22``).

Configured as Calico configures them, by a ``FelixConfiguration`` named ``default`` among the
manifests::

    apiVersion: projectcalico.org/v3
    kind: FelixConfiguration
    metadata: {name: default}
    spec:
      failsafeInboundHostPorts: [{protocol: TCP, port: 22}, {protocol: TCP, port: 6443, net: 10.0.0.0/8}]
      failsafeOutboundHostPorts: []      # none: no outbound failsafe

A list left out keeps Calico's default for that direction; an empty list turns it off.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from pyclassify.documents import Document, Problems
from pyclassify.ir import (
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    IPNetwork,
    Policy,
    PortMatch,
    PortRange,
    Rule,
    Subject,
    Tier,
)
from pyclassify.kinds.common import K8S_PROTOCOL_NUMBERS

TIER = "failsafe"
#: Before every tier a manifest can name (tier orders are not negative in practice).
TIER_ORDER = -float(2**53)
KIND = "Failsafe"
CONFIG_KIND = ("projectcalico.org", "FelixConfiguration")
PROTOCOLS = K8S_PROTOCOL_NUMBERS
NAMES = {v: k.lower() for k, v in PROTOCOLS.items()}


@dataclass(frozen=True)
class FailsafePort:
    protocol: int
    port: int
    net: IPNetwork | None = None  # the peer's address (None: any)

    @property
    def label(self) -> str:
        text = f"{NAMES[self.protocol]}:{self.port}"
        return f"{self.net}:{text}" if self.net is not None else text


def _ports(text: str) -> tuple[FailsafePort, ...]:
    return tuple(FailsafePort(PROTOCOLS[p.split(":")[0].upper()], int(p.split(":")[1])) for p in text.split())


#: Calico's defaults (docs.tigera.io, "Failsafe rules"; Felix FailsafeInboundHostPorts and
#: FailsafeOutboundHostPorts).
DEFAULT_INBOUND = _ports("tcp:22 udp:68 tcp:179 tcp:2379 tcp:2380 tcp:5473 tcp:6443 tcp:6666 tcp:6667")
DEFAULT_OUTBOUND = _ports("udp:53 udp:67 tcp:179 tcp:2379 tcp:2380 tcp:5473 tcp:6443 tcp:6666 tcp:6667")


@dataclass(frozen=True)
class FailsafeConfig:
    inbound: tuple[FailsafePort, ...] = DEFAULT_INBOUND
    outbound: tuple[FailsafePort, ...] = DEFAULT_OUTBOUND


def is_config(doc: Document, key: tuple[str, str]) -> bool:
    return key == CONFIG_KIND


def read_config(doc: Document, problems: Problems, config: FailsafeConfig) -> FailsafeConfig:
    """``config`` with what a FelixConfiguration says about failsafe ports. Only the one named
    ``default`` is cluster-wide (per-node ``node.<name>`` ones are not applied: warned)."""
    if doc.name != "default":
        problems.warning(
            doc,
            ("metadata", "name"),
            f"FelixConfiguration {doc.name!r} is per node; only 'default' sets the failsafe ports here",
        )
        return config
    spec = doc.obj.get("spec") or {}
    if not isinstance(spec, dict):
        problems.error(doc, ("spec",), "must be an object")
        return config
    found: dict[str, tuple[FailsafePort, ...]] = {}
    for field_name, direction in (("failsafeInboundHostPorts", "inbound"), ("failsafeOutboundHostPorts", "outbound")):
        if field_name not in spec:
            continue
        value = spec[field_name]
        if value is None or value == "none":
            found[direction] = ()
            continue
        if not isinstance(value, list):
            problems.error(doc, ("spec", field_name), "must be a list of {protocol, port, net}")
            continue
        entries = []
        for i, item in enumerate(value):
            entry = _entry(doc, problems, ("spec", field_name, i), item)
            if entry is not None:
                entries.append(entry)
        found[direction] = tuple(entries)
    return FailsafeConfig(found.get("inbound", config.inbound), found.get("outbound", config.outbound))


def _entry(doc: Document, problems: Problems, path: tuple[Any, ...], item: Any) -> FailsafePort | None:
    if not isinstance(item, dict):
        problems.error(doc, path, "must be an object {protocol, port, net}")
        return None
    unknown = set(item) - {"protocol", "port", "net"}
    for key in sorted(unknown):
        problems.error(doc, path + (key,), f"unknown field {key!r}")
    protocol = PROTOCOLS.get(str(item.get("protocol", "TCP")).upper())  # Felix: TCP when left out
    if protocol is None:
        problems.error(doc, path + ("protocol",), "must be TCP, UDP or SCTP")
    port = item.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        problems.error(doc, path + ("port",), "must be a port number 0-65535")
        port = None
    net = None
    if item.get("net"):
        try:
            net = ipaddress.ip_network(str(item["net"]), strict=False)
        except ValueError:
            problems.error(doc, path + ("net",), f"invalid CIDR {item['net']!r}")
            return None
    if protocol is None or port is None or unknown:
        return None
    return FailsafePort(protocol, port, net)


def _rule(entry: FailsafePort, index: int, direction: Direction) -> Rule:
    """Inbound: to the host endpoint's port, from ``net`` (any address if none); outbound:
    from the host endpoint to the port on ``net`` (as Felix's failsafe chains match)."""
    port = PortMatch(None, PortRange(entry.port, entry.port))
    nets = (entry.net,) if entry.net is not None else ()
    if direction is Direction.INGRESS:
        sources, destinations = ((EntityMatch(nets=nets),) if nets else ()), (EntityMatch(ports=(port,)),)
    else:
        sources, destinations = (), (EntityMatch(nets=nets, ports=(port,)),)
    return Rule(
        action=Action.ALLOW,
        index=index,
        name=entry.label,
        protocols=frozenset({entry.protocol}),
        ip_version=None if entry.net is None else entry.net.version,
        sources=sources,
        destinations=destinations,
        path=f"failsafe{'Inbound' if direction is Direction.INGRESS else 'Outbound'}HostPorts[{index}]",
    )


def failsafe_ir(config: FailsafeConfig) -> tuple[list[Policy], list[Tier]]:
    """The failsafe policies (none for a direction whose list is empty) and their tier."""
    host = Subject(endpoint_kinds=frozenset({EndpointKind.HOST}))
    policies = []
    for name, direction, entries in (
        ("inbound", Direction.INGRESS, config.inbound),
        ("outbound", Direction.EGRESS, config.outbound),
    ):
        if not entries:
            continue
        rules = tuple(_rule(e, i, direction) for i, e in enumerate(entries))
        policies.append(
            Policy(
                kind=KIND,
                namespace=None,
                name=name,
                tier=TIER,
                order=0.0,
                subject=host,
                types=frozenset({direction}),
                ingress=rules if direction is Direction.INGRESS else (),
                egress=rules if direction is Direction.EGRESS else (),
            )
        )
    return policies, ([Tier(TIER, TIER_ORDER, Action.PASS)] if policies else [])
