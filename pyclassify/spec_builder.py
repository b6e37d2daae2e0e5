"""The IR and the inventory written as the engine's spec: the dicts the Rust engine reads
(``rust/core/src/engine/spec.rs``), typed by the TypedDicts generated from it
(``engine_spec.py``), so a misspelt field is mypy's error here and the engine's at run time.
``EngineState`` sends them as deltas; ``engine_spec`` is a whole world at once."""

from __future__ import annotations

from typing import Any

import orjson

from pyclassify.engine_spec import (
    EndpointSpec,
    EntitySpec,
    IcmpSpec,
    NetworkSetSpec,
    NodeSpec,
    PolicySpec,
    PortSpec,
    ProfileSpec,
    RuleSpec,
    RuleSpecs,
    ServiceSpec,
    Spec,
    SubjectSpec,
    TierSpec,
)
from pyclassify.flow import namespace_labels, service_account_labels
from pyclassify.inventory import Endpoint, Inventory, NetworkSet, Node, Service
from pyclassify.ir import (
    EntityMatch,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Profile,
    Rule,
    Subject,
    Tier,
)


def _selector(sel: Any) -> str | None:
    return None if sel is None else sel.canonical


def _port(p: PortMatch) -> PortSpec:
    out: PortSpec = {"protocol": p.protocol}
    if isinstance(p.port, PortRange):
        out["first"], out["last"] = p.port.first, p.port.last
    elif isinstance(p.port, NamedPort):
        out["name"] = p.port.name
    return out


def _icmp(m: IcmpMatch | None) -> IcmpSpec | None:
    return None if m is None else {"type": m.type, "code": m.code}


def _entity(m: EntityMatch) -> EntitySpec:
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
        "service": None if m.service is None else (m.service.namespace, m.service.name),
        "node_selector": _selector(m.node_selector),
        "domains": list(m.domains),
        "ports": [_port(p) for p in m.ports],
        "not_ports": [_port(p) for p in m.not_ports],
        "unresolvable": m.unresolvable is not None,
    }


def _rule(r: Rule) -> RuleSpec:
    return {
        "action": r.action.value,
        "ip_version": r.ip_version,
        "protocols": None if r.protocols is None else sorted(r.protocols),
        "not_protocols": sorted(r.not_protocols),
        "icmp": _icmp(r.icmp),
        "not_icmp": _icmp(r.not_icmp),
        "sources": [_entity(e) for e in r.sources],
        "destinations": [_entity(e) for e in r.destinations],
        "http": None if r.http is None else {"methods": list(r.http.methods), "paths": list(r.http.paths)},
    }


def _subject(s: Subject) -> SubjectSpec:
    return {
        "selector": s.selector.canonical,
        "endpoint_kinds": sorted(k.value for k in s.endpoint_kinds),
        "namespace": s.namespace,
        "namespace_selector": _selector(s.namespace_selector),
        "service_account_selector": _selector(s.service_account_selector),
    }


def _endpoint_spec(inventory: Inventory, e: Endpoint, id_: int, addressable: bool) -> EndpointSpec:
    return endpoint_spec_with(e, service_account_labels(inventory, e), id_, addressable, inventory.enforces(e))


def endpoint_spec_with(
    e: Endpoint, sa_labels: dict[str, str], id_: int, addressable: bool, enforced: bool
) -> EndpointSpec:
    # The labels policy sees (``flow.endpoint_labels``) are derived by the engine from the
    # written ones, so each endpoint crosses once.
    return {
        "id": id_,
        "name": e.name,
        "kind": e.kind.value,
        "namespace": e.namespace,
        "raw_labels": e.labels if type(e.labels) is dict else dict(e.labels),
        "sa_labels": sa_labels,
        "service_account": e.service_account,
        "ips": [str(ip) for ip in e.ips],
        "ports": [{"name": p.name, "protocol": p.protocol, "port": p.port} for p in e.ports],
        "host_network": e.host_network,
        "profiles": list(e.profiles),
        "addressable": addressable,
        "enforced": enforced,
    }


def network_set_spec(n: NetworkSet, id_: int) -> NetworkSetSpec:
    return {"id": id_, "namespace": n.namespace, "labels": dict(n.labels), "nets": [str(x) for x in n.nets]}


def node_spec(n: Node, id_: int) -> NodeSpec:
    return {"id": id_, "labels": dict(n.labels), "addresses": [str(a) for a in n.addresses]}


def service_spec(s: Service, id_: int) -> ServiceSpec:
    return {
        "id": id_,
        "namespace": s.namespace,
        "name": s.name,
        "selector": None if s.selector is None else dict(s.selector),
        "ips": [str(ip) for ip in (*s.cluster_ips, *s.endpoint_ips)],
        "ports": [{"port": p.port, "protocol": p.protocol, "target_port": p.target_port} for p in s.ports],
    }


class RuleLists:
    """The rule lists of one delta (``rule_lists``, rust/core/src/engine/spec.rs ``RuleSpecs``):
    each distinct tuple of rules sent once and named by its position. Distinct by identity:
    the IR holds equal rules once (``pyclassify.sharing``), so policies pasted per namespace
    send their rules once and the engine compiles them once. Their subjects likewise: one spec
    per subject object, however many policies share it."""

    def __init__(self) -> None:
        self._positions: dict[int, int] = {}
        self._held: list[Any] = []  # each id() stays its object's while the delta is built
        #: Each list encoded as it is added (``orjson.Fragment``): a set of 100,000 distinct
        #: ipBlocks held its rule dicts at three times their JSON until the delta was sent.
        self.specs: list[orjson.Fragment] = []
        self._subjects: dict[int, SubjectSpec] = {}

    def subject(self, s: Subject) -> SubjectSpec:
        spec = self._subjects.get(id(s))
        if spec is None:
            spec = self._subjects[id(s)] = _subject(s)
            self._held.append(s)
        return spec

    def position(self, rules: tuple[Rule, ...]) -> int:
        at = self._positions.get(id(rules))
        if at is None:
            at = self._positions[id(rules)] = len(self.specs)
            self._held.append(rules)
            self.specs.append(orjson.Fragment(orjson.dumps([_rule(r) for r in rules])))
        return at


def policy_spec(p: Policy, id_: int, lists: RuleLists | None = None) -> PolicySpec:
    ingress, egress = _rules_spec(p, lists)
    return {
        "id": id_,
        "order": p.order,
        "kind": p.kind,
        "namespace": p.namespace,
        "name": p.name,
        "tier": p.tier,
        "types": sorted(d.value for d in p.types),
        "subject": _subject(p.subject) if lists is None else lists.subject(p.subject),
        "ingress": ingress,
        "egress": egress,
    }


def _rules_spec(p: Policy | Profile, lists: RuleLists | None) -> tuple[RuleSpecs, RuleSpecs]:
    """Ingress and egress rules: in place, or positions in the delta's rule lists."""
    if lists is None:
        return [_rule(r) for r in p.ingress], [_rule(r) for r in p.egress]
    return lists.position(p.ingress), lists.position(p.egress)


def profile_spec(p: Profile, id_: int, lists: RuleLists | None = None) -> ProfileSpec:
    ingress, egress = _rules_spec(p, lists)
    return {"id": id_, "name": p.name, "ingress": ingress, "egress": egress}


def tier_spec(t: Tier, id_: int) -> TierSpec:
    return {"id": id_, "name": t.name, "order": t.order, "default_action": t.default_action.value}


def namespaces_of(inventory: Inventory, endpoints: tuple[Endpoint, ...]) -> set[str]:
    names = {e.namespace for e in endpoints if e.namespace} | set(inventory.namespaces)
    return names | {n.namespace for n in inventory.network_sets if n.namespace}


def _unique_keys(keys: Any) -> list[tuple]:
    """The keys made unique in order (a repeated key gets its occurrence number appended)."""
    out: list[tuple] = []
    seen: dict[tuple, int] = {}
    for key in keys:
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(key if n == 0 else (*key, n))
    return out


def endpoint_key(e: Endpoint) -> tuple:
    """What identifies an endpoint across updates: kind, namespace, name, workload."""
    return (e.kind.value, e.namespace, e.name, e.workload)


def policy_key(p: Policy) -> tuple:
    """What identifies a policy across updates: tier, kind, namespace, name."""
    return (p.tier, p.kind, p.namespace, p.name)


def unique_endpoint_keys(endpoints: Any) -> list[tuple]:
    return _unique_keys(endpoint_key(e) for e in endpoints)


def unique_policy_keys(policies: Any) -> list[tuple]:
    return _unique_keys(policy_key(p) for p in policies)


def engine_spec(policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()) -> Spec:
    """The whole world as one JSON-able spec (rust/core/src/engine/spec.rs ``Spec``): what the
    Rust benchmarks read (``ENGINE_SPEC``). Ids are positions.
    ``extra_endpoints`` are endpoints a caller names in flows without their being part of the
    inventory: policy applies to them, but their addresses do not resolve to them."""
    endpoints = [(e, True) for e in inventory.endpoints] + [(e, False) for e in extra_endpoints]
    names = namespaces_of(inventory, tuple(e for e, _ in endpoints))
    return {
        "namespaces": {ns: namespace_labels(inventory, ns) for ns in sorted(names)},
        "endpoints": [_endpoint_spec(inventory, e, i, a) for i, (e, a) in enumerate(endpoints)],
        "network_sets": [network_set_spec(n, i) for i, n in enumerate(inventory.network_sets)],
        "nodes": [node_spec(n, i) for i, n in enumerate(inventory.nodes.values())],
        "services": [service_spec(s, i) for i, s in enumerate(inventory.services.values())],
        "tiers": [{"name": t.name, "default_action": t.default_action.value} for t in policy_set.tiers],
        "policies": [policy_spec(p, i) for i, p in enumerate(policy_set.policies)],
        "profiles": [profile_spec(p, i) for i, p in enumerate(policy_set.profiles)],
    }
