"""The native engine: the IR and inventory compiled once into the Rust engine, then asked per flow
or per batch of packet headers.

``NativeEngine(policy_set, inventory)`` hands the engine a plain JSON description (the *spec*:
every endpoint with the labels policy sees, every tier, policy and rule) and keeps the tables
that turn the engine's numeric answers back into names. Its verdicts must equal
``pyclassify.reference.evaluate`` on every flow: tests/test_engine_differential.py holds them to it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from pyclassify import _engine
from pyclassify.batch import HEADER_DTYPE
from pyclassify.inventory import Endpoint, Inventory
from pyclassify.ir import (
    Direction,
    EntityMatch,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Rule,
    Subject,
)
from pyclassify.reference import (
    Decision,
    Flow,
    Verdict,
    endpoint_labels,
    namespace_labels,
    service_account_labels,
)

REASONS = ("rule", "end-of-tier", "profile", "default")

# PacketVerdict.reason (rust/core/src/engine/mod.rs).
PACKET_POLICY = 0  # policy judged the packet
PACKET_ESTABLISHED = 1  # it belongs to a connection already allowed (or answers one)
PACKET_MALFORMED = 2  # it could not be decoded far enough to judge: denied
PACKET_INVALID = 3  # connection tracking found it invalid (opens nothing): denied

#: One direction's decision in a verdict record (``SideVerdict``): source_kind 0 none, 1 policy,
#: 2 profile; tier/source/rule -1 when absent; reason indexes ``REASONS``.
SIDE_DTYPE = np.dtype(
    {
        "names": ["present", "allow", "reason", "source_kind", "tier", "source", "rule"],
        "formats": ["u1", "u1", "u1", "u1", "<i4", "<i4", "<i4"],
        "offsets": [0, 1, 2, 3, 4, 8, 12],
        "itemsize": 16,
    }
)
#: The engine's per-packet output record (``PacketVerdict``, 36 bytes).
VERDICT_DTYPE = np.dtype(
    {
        "names": ["allow", "reason", "ct_state", "reserved", "egress", "ingress"],
        "formats": ["u1", "u1", "u1", "u1", SIDE_DTYPE, SIDE_DTYPE],
        "offsets": [0, 1, 2, 3, 4, 20],
        "itemsize": 36,
    }
)
assert VERDICT_DTYPE.itemsize == _engine.VERDICT_SIZE


def Tracker(**config: Any) -> Any:  # noqa: N802 - a factory named like the thing it makes
    """A connection tracker for ``NativeEngine.judge`` (``pyclassify._engine.ConnTrack``)."""
    return _engine.ConnTrack(**config)


def _selector(sel: Any) -> str | None:
    return None if sel is None else sel.canonical


def _port(p: PortMatch) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": p.protocol}
    if isinstance(p.port, PortRange):
        out["first"], out["last"] = p.port.first, p.port.last
    elif isinstance(p.port, NamedPort):
        out["name"] = p.port.name
    return out


def _icmp(m: IcmpMatch | None) -> dict[str, Any] | None:
    return None if m is None else {"type": m.type, "code": m.code}


def _entity(m: EntityMatch) -> dict[str, Any]:
    return {
        "nets": [str(n) for n in m.nets],
        "not_nets": [str(n) for n in m.not_nets],
        "selector": _selector(m.selector),
        "not_selector": _selector(m.not_selector),
        "endpoint_kinds": None if m.endpoint_kinds is None else sorted(k.value for k in m.endpoint_kinds),
        "namespace": m.namespace,
        "namespace_selector": _selector(m.namespace_selector),
        "namespace_relation": None if m.namespace_relation is None else m.namespace_relation.value,
        "same_labels": list(m.same_labels),
        "not_same_labels": list(m.not_same_labels),
        "service_account_names": None if m.service_account_names is None else sorted(m.service_account_names),
        "service_account_selector": _selector(m.service_account_selector),
        "service": None if m.service is None else [m.service.namespace, m.service.name],
        "node_selector": _selector(m.node_selector),
        "has_domains": bool(m.domains),
        "ports": [_port(p) for p in m.ports],
        "not_ports": [_port(p) for p in m.not_ports],
        "unresolvable": m.unresolvable is not None,
    }


def _rule(r: Rule) -> dict[str, Any]:
    return {
        "action": r.action.value,
        "ip_version": r.ip_version,
        "protocols": None if r.protocols is None else sorted(r.protocols),
        "not_protocols": sorted(r.not_protocols),
        "icmp": _icmp(r.icmp),
        "not_icmp": _icmp(r.not_icmp),
        "sources": [_entity(e) for e in r.sources],
        "destinations": [_entity(e) for e in r.destinations],
    }


def _subject(s: Subject) -> dict[str, Any]:
    return {
        "selector": s.selector.canonical,
        "endpoint_kinds": sorted(k.value for k in s.endpoint_kinds),
        "namespace": s.namespace,
        "namespace_selector": _selector(s.namespace_selector),
        "service_account_selector": _selector(s.service_account_selector),
    }


def engine_spec(policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()) -> dict[str, Any]:
    """The JSON-able description the Rust engine compiles (see rust/core/src/engine/spec.rs).

    ``extra_endpoints`` are endpoints a caller names in flows without their being part of the
    inventory: policy applies to them, but their addresses do not resolve to them."""
    endpoints = [(e, True) for e in inventory.endpoints] + [(e, False) for e in extra_endpoints]
    namespaces = {e.namespace for e, _ in endpoints if e.namespace} | set(inventory.namespaces)
    namespaces |= {n.namespace for n in inventory.network_sets if n.namespace}
    return {
        "namespaces": {ns: namespace_labels(inventory, ns) for ns in sorted(namespaces)},
        "endpoints": [
            {
                "kind": e.kind.value,
                "namespace": e.namespace,
                "labels": endpoint_labels(e),
                "raw_labels": dict(e.labels),
                "sa_labels": service_account_labels(inventory, e),
                "service_account": e.service_account,
                "ips": [str(ip) for ip in e.ips],
                "ports": [{"name": p.name, "protocol": p.protocol, "port": p.port} for p in e.ports],
                "host_network": e.host_network,
                "profiles": list(e.profiles),
                "addressable": addressable,
            }
            for e, addressable in endpoints
        ],
        "network_sets": [
            {"namespace": n.namespace, "labels": dict(n.labels), "nets": [str(x) for x in n.nets]}
            for n in inventory.network_sets
        ],
        "nodes": [
            {"labels": dict(n.labels), "addresses": [str(a) for a in n.addresses]} for n in inventory.nodes.values()
        ],
        "services": [
            {
                "namespace": s.namespace,
                "name": s.name,
                "selector": None if s.selector is None else dict(s.selector),
                "ips": [str(ip) for ip in (*s.cluster_ips, *s.endpoint_ips)],
                "ports": [
                    {"port": p.port, "protocol": p.protocol, "target_port": p.target_port} for p in s.ports
                ],
            }
            for s in inventory.services.values()
        ],
        "tiers": [{"name": t.name, "default_action": t.default_action.value} for t in policy_set.tiers],
        "policies": [
            {
                "tier": p.tier,
                "types": sorted(d.value for d in p.types),
                "subject": _subject(p.subject),
                "ingress": [_rule(r) for r in p.ingress],
                "egress": [_rule(r) for r in p.egress],
            }
            for p in policy_set.policies
        ],
        "profiles": [
            {"name": p.name, "ingress": [_rule(r) for r in p.ingress], "egress": [_rule(r) for r in p.egress]}
            for p in policy_set.profiles
        ],
    }


class NativeEngine:
    """An immutable compiled snapshot of a policy set and inventory."""

    def __init__(self, policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()) -> None:
        self.policy_set = policy_set
        self.inventory = inventory
        self.extra_endpoints = tuple(extra_endpoints)
        all_endpoints = (*inventory.endpoints, *self.extra_endpoints)
        self._endpoint_ids = {id(e): i for i, e in enumerate(all_endpoints)}
        self._engine = _engine.Engine(json.dumps(engine_spec(policy_set, inventory, self.extra_endpoints)))
        self._tier_names = [t.name for t in policy_set.tiers]
        self._policies: list[Policy] = list(policy_set.policies)

    @property
    def stats(self) -> dict[str, int]:
        return dict(self._engine.stats())

    def evaluate(self, flow: Flow, default_pod: str = "allow", default_host: str = "deny") -> Verdict:
        """One flow, with the same answer and explanation as the reference evaluator."""
        ends = []
        for end in (flow.src, flow.dst):
            ep = None if end.endpoint is None else self._endpoint_id(end.endpoint)
            ip = None if end.ip is None else str(end.ip)
            ends.append((ip, ep))
        allowed, egress, ingress = self._engine.evaluate(
            ends[0][0], ends[0][1], ends[1][0], ends[1][1],
            flow.protocol, flow.sport, flow.dport, flow.icmp_type, flow.icmp_code,
            default_pod == "allow", default_host == "allow",
        )
        return Verdict("allow" if allowed else "deny", self._decision(egress, Direction.EGRESS),
                       self._decision(ingress, Direction.INGRESS))

    side_dtype = SIDE_DTYPE

    def judge(self, headers: npt.NDArray[Any], quotes: npt.NDArray[Any] | None = None, tracker: Any = None,
              default_pod: str = "allow", default_host: str = "deny", interpret: bool = False) -> npt.NDArray[Any]:
        """Verdict records (``VERDICT_DTYPE``) for a header batch (``HEADER_DTYPE``), computed
        without the GIL through the compiled classifier tables; with a ``Tracker``, connection
        tracking decides established traffic. ``interpret=True`` (untracked batches only) answers
        by the rule interpreter instead: the same verdicts, the benchmarks' baseline."""
        if headers.dtype != HEADER_DTYPE:
            raise TypeError(f"expected a header batch of HEADER_DTYPE, got {headers.dtype}")
        headers = np.ascontiguousarray(headers)
        out = np.zeros(len(headers), dtype=VERDICT_DTYPE)
        if quotes is not None:
            quotes = np.ascontiguousarray(quotes)
        self._engine.judge(headers, out, default_pod == "allow", default_host == "allow", tracker, quotes, interpret)
        return out

    def classify(self, headers: npt.NDArray[Any], default_pod: str = "allow",
                 default_host: str = "deny") -> npt.NDArray[np.uint8]:
        """Verdicts (1 allow, 0 deny) for a header batch, each packet judged alone."""
        return self.judge(headers, None, None, default_pod, default_host)["allow"].copy()

    def side_decision(self, side: Any, direction: Direction) -> Decision | None:
        """A ``SIDE_DTYPE`` record of ``judge``'s output as the reference's ``Decision``."""
        if not side["present"]:
            return None
        kind = int(side["source_kind"])
        source = None if kind == 0 else ("policy" if kind == 1 else "profile", int(side["source"]))
        rule = None if int(side["rule"]) < 0 else int(side["rule"])
        tier = None if int(side["tier"]) < 0 else int(side["tier"])
        return self._decision((bool(side["allow"]), tier, source, rule, int(side["reason"]), []), direction)

    @property
    def compiled_stats(self) -> dict[str, int]:
        """Figures of the compiled tables (shared sides, entries, bytes)."""
        return dict(self._engine.compiled_stats())

    def compiled_listing(self, endpoint: Endpoint, direction: Direction, family: int) -> list[Any]:
        """The compiled stages of ``endpoint``'s ``direction`` side for IPv4 or IPv6 (``render``):
        see ``pyclassify._engine.Engine.compiled_listing``."""
        return self._engine.compiled_listing(self._endpoint_id(endpoint), direction.value, family)

    def _endpoint_id(self, ep: Endpoint) -> int:
        try:
            return self._endpoint_ids[id(ep)]
        except KeyError:
            raise ValueError(f"endpoint {ep.ref} is not in this engine's inventory") from None

    def _decision(self, raw: Any, direction: Direction) -> Decision | None:
        if raw is None:
            return None
        allowed, tier, source, rule, reason, logs = raw
        policy_ref, label = self._source(source, rule, direction)
        decision = Decision(
            "allow" if allowed else "deny",
            None if tier is None else self._tier_names[tier],
            policy_ref,
            label,
            REASONS[reason],
        )
        for log_tier, log_source, log_rule in logs:
            ref, log_label = self._source(log_source, log_rule, direction)
            decision.logs.append((None if log_tier is None else self._tier_names[log_tier], ref or "", log_label))
        return decision

    def _source(self, source: Any, rule: int | None, direction: Direction) -> tuple[str | None, Any]:
        """``("policy", i)`` / ``("profile", i)`` / None -> (reference, rule label)."""
        if source is None:
            return None, None
        kind, index = source
        if kind == "policy":
            policy = self._policies[index]
            return policy.ref, None if rule is None else policy.rules(direction)[rule].label
        profile = self.policy_set.profiles[index]
        return f"Profile/{profile.name}", None if rule is None else profile.rules(direction)[rule].label


__all__ = ["NativeEngine", "engine_spec"]
