"""AdminNetworkPolicy and BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1).

ANPs live in the ``kube-admin`` tier ordered by ``priority``; the one BANP (named
``default``) lives in ``kube-baseline``. Both tiers end in Pass, so traffic no rule decided
goes on to NetworkPolicy and, after the baseline, to the default.

Two shapes of v1alpha1 exist and both are read:

- the KEP (seed 003) and network-policy-api up to v0.1.1 (policy-assistant uses it): peers
  ``namespaces: {namespaceSelector | related: Self|NotSelf | sameLabels | notSameLabels}`` and
  ``pods: {namespaces: {...same...}, podSelector}``;
- the released API (v0.1.5+, the conformance suite): peers ``namespaces: <LabelSelector>``,
  ``pods: {namespaceSelector, podSelector}``, and for egress ``nodes``, ``networks`` and
  ``domainNames``.

The subject is the same in both. A ``namespaces`` peer is told apart by its keys: a
LabelSelector has only matchLabels/matchExpressions; ``{}`` selects every namespace.

The peer/port readers here are shared with ClusterNetworkPolicy (v1alpha2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from pyclassify.documents import Document, FieldPath, Problems, format_path
from pyclassify.ir import (
    TIER_KUBE_ADMIN,
    TIER_KUBE_BASELINE,
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    NamedPort,
    Policy,
    PortMatch,
    Relation,
    Rule,
    SourceRef,
    Subject,
)
from pyclassify.kinds import common
from pyclassify.names import WILDCARD_DOMAIN_NAME
from pyclassify.selector import Selector

PODS = frozenset({EndpointKind.POD})
MAX_PRIORITY = 1000
MAX_RULES = 100  # per direction (ANP/BANP v1alpha1)
MAX_PEERS = 100
MAX_PORTS = 100
MAX_NETWORKS = 25
MAX_DOMAINS = 25
MAX_RULE_NAME = 100

_LABEL_SELECTOR_KEYS = {"matchLabels", "matchExpressions"}
_NAMESPACE_SET_KEYS = {"namespaceSelector", "related", "sameLabels", "notSameLabels"}
_RELATIONS = {"Self": Relation.SELF, "NotSelf": Relation.NOT_SELF}
# The CRD pattern for a DomainName: optional leading "*." then DNS labels.
_DOMAIN = re.compile(WILDCARD_DOMAIN_NAME)  # with fullmatch: "$" would let a trailing newline in


@dataclass
class Flavor:
    """What differs between ANP, BANP and CNP when reading rules."""

    kind: str
    actions: dict[str, Action]
    max_rules: int
    max_peers: int
    ports_key: str  # "ports" (ANP/BANP) or "protocols" (CNP)
    read_ports: Callable[..., tuple[PortMatch, ...] | None]
    read_peer: Callable[..., EntityMatch | None] | None = None  # default: read_peer below


def normalize_anp(doc: Document, problems: Problems) -> list[Policy]:
    before = len(problems.errors)
    spec = _spec(doc, problems)
    if spec is None:
        return []
    common.check_keys(doc, problems, ("spec",), spec, {"priority", "subject", "ingress", "egress"})
    priority = spec.get("priority")
    if priority is None:
        problems.error(doc, ("spec", "priority"), "Required value")
    elif not common.is_int(priority) or not 0 <= priority <= MAX_PRIORITY:
        problems.error(
            doc, ("spec", "priority"), f"Invalid value: {priority!r}: must be an integer between 0 and {MAX_PRIORITY}"
        )
    return build_policies(doc, problems, spec, ANP, TIER_KUBE_ADMIN, priority, before)


def normalize_banp(doc: Document, problems: Problems) -> list[Policy]:
    before = len(problems.errors)
    if doc.name and doc.name != "default":
        problems.error(
            doc,
            ("metadata", "name"),
            f'Invalid value: {doc.name!r}: Only one baseline admin network policy with metadata.name="default" can be created in the cluster',
        )
    spec = _spec(doc, problems)
    if spec is None:
        return []
    common.check_keys(doc, problems, ("spec",), spec, {"subject", "ingress", "egress"})
    return build_policies(doc, problems, spec, BANP, TIER_KUBE_BASELINE, None, before)


def _spec(doc: Document, problems: Problems) -> dict | None:
    if not doc.name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    if "spec" not in doc.obj:
        problems.error(doc, ("spec",), "Required value")
        return None
    return common.expect_dict(doc, problems, ("spec",), doc.obj["spec"])


def build_policies(
    doc: Document, problems: Problems, spec: dict, flavor: Flavor, tier: str, order: Any, before: int
) -> list[Policy]:
    """The policies of one admin policy of ``flavor`` (AdminNetworkPolicy, its baseline, or a
    ClusterNetworkPolicy) in ``tier``, or none when its spec has errors."""
    subject = read_subject(doc, problems, ("spec", "subject"), spec.get("subject"))
    ingress = read_rules(doc, problems, spec, Direction.INGRESS, flavor)
    egress = read_rules(doc, problems, spec, Direction.EGRESS, flavor)
    if len(problems.errors) > before or subject is None:
        return []
    types = frozenset(d for d, rules in ((Direction.INGRESS, ingress), (Direction.EGRESS, egress)) if rules)
    return [
        Policy(
            kind=flavor.kind,
            namespace=None,
            name=doc.name,
            tier=tier,
            order=float(order) if order is not None else None,
            subject=subject,
            types=types,
            ingress=ingress,
            egress=egress,
            source=SourceRef(doc.file, doc.line),
        )
    ]


def read_subject(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> Subject | None:
    """``namespaces: <LabelSelector>`` or ``pods: {namespaceSelector, podSelector}`` (exactly one).
    hostNetwork pods are never subjects; the evaluator leaves them out."""
    if raw is None:
        problems.error(doc, path, "Required value")
        return None
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    common.check_keys(doc, problems, path, raw, {"namespaces", "pods"})
    present = [k for k in ("namespaces", "pods") if k in raw]
    if len(present) != 1:
        problems.error(doc, path, "Invalid value: exactly one of namespaces or pods must be set")
        return None
    if present[0] == "namespaces":
        ns = common.label_selector(doc, problems, path + ("namespaces",), raw["namespaces"])
        return None if ns is None else Subject(endpoint_kinds=PODS, namespace_selector=ns)
    pods = common.expect_dict(doc, problems, path + ("pods",), raw["pods"])
    if pods is None:
        return None
    common.check_keys(doc, problems, path + ("pods",), pods, {"namespaceSelector", "podSelector"})
    if "podSelector" not in pods:
        # The CRD marks it required, but Go clients decode a missing one as {} (all pods) and
        # tools such as np-guard analyse it that way: warn, and read it as {}.
        problems.warning(doc, path + ("pods", "podSelector"), "Required value: read as {} (all pods)")
    ns = common.label_selector(doc, problems, path + ("pods", "namespaceSelector"), pods.get("namespaceSelector"))
    pod = common.label_selector(doc, problems, path + ("pods", "podSelector"), pods.get("podSelector"))
    if ns is None or pod is None:
        return None
    return Subject(selector=pod, endpoint_kinds=PODS, namespace_selector=ns)


def read_rules(doc: Document, problems: Problems, spec: dict, direction: Direction, flavor: Flavor) -> tuple[Rule, ...]:
    key = "ingress" if direction is Direction.INGRESS else "egress"
    raw_rules = common.expect_list(doc, problems, ("spec", key), spec.get(key))
    if len(raw_rules) > flavor.max_rules:
        problems.error(doc, ("spec", key), f"Too many: {len(raw_rules)}: must have at most {flavor.max_rules} items")
    rules = []
    for i, raw in enumerate(raw_rules):
        rule = _rule(doc, problems, ("spec", key, i), raw, direction, flavor)
        if rule is not None:
            rules.append(rule)
    return tuple(rules)


def _rule(
    doc: Document, problems: Problems, path: FieldPath, raw: Any, direction: Direction, flavor: Flavor
) -> Rule | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    peers_key = "from" if direction is Direction.INGRESS else "to"
    common.check_keys(doc, problems, path, raw, {"name", "action", peers_key, flavor.ports_key})
    ok = True
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > MAX_RULE_NAME):
        problems.error(doc, path + ("name",), f"Too long: may not be longer than {MAX_RULE_NAME}")
        ok = False
    action = flavor.actions.get(raw.get("action"))
    if action is None:
        supported = ", ".join(f'"{a}"' for a in flavor.actions)
        if raw.get("action") is None:
            problems.error(doc, path + ("action",), "Required value")
        else:
            problems.error(
                doc, path + ("action",), f"Unsupported value: {raw.get('action')!r}: supported values: {supported}"
            )
        ok = False
    raw_peers = raw.get(peers_key)
    if not raw_peers:
        problems.error(doc, path + (peers_key,), "Required value: must have at least 1 item")
        ok = False
    raw_peers = common.expect_list(doc, problems, path + (peers_key,), raw_peers)
    if len(raw_peers) > flavor.max_peers:
        problems.error(
            doc, path + (peers_key,), f"Too many: {len(raw_peers)}: must have at most {flavor.max_peers} items"
        )
        ok = False
    peers = []
    for i, entry in enumerate(raw_peers):
        peer = (flavor.read_peer or read_peer)(doc, problems, path + (peers_key, i), entry, direction)
        if peer is None:
            ok = False
        else:
            peers.append(peer)
    ports = flavor.read_ports(doc, problems, path + (flavor.ports_key,), raw.get(flavor.ports_key))
    if ports is None:
        ok = False
    if not ok or ports is None or action is None:  # (action None has made ok False)
        return None
    if any(isinstance(p.port, NamedPort) for p in ports):
        for peer in peers:
            if peer.nets or peer.node_selector is not None or peer.domains or peer.unresolvable:
                problems.error(
                    doc,
                    path + (flavor.ports_key,),
                    "Invalid value: networks/nodes/domainNames peer cannot be set with named ports since there are no named ports for networks/nodes/domainNames",
                )
                return None
    # Ports are the destination's: for ingress the subject's, for egress each peer's.
    destinations: tuple[EntityMatch, ...]
    if direction is Direction.INGRESS:
        sources = tuple(peers)
        destinations = (EntityMatch(ports=ports),) if ports else ()
    else:
        sources = ()
        destinations = tuple(replace(p, ports=ports) for p in peers)
    return Rule(
        action=action,
        index=cast(int, path[-1]),
        name=name,
        sources=sources,
        destinations=destinations,
        path=format_path(path),
    )


def read_peer(doc: Document, problems: Problems, path: FieldPath, raw: Any, direction: Direction) -> EntityMatch | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    allowed = ["namespaces", "pods"]
    if direction is Direction.EGRESS:
        allowed += ["nodes", "networks", "domainNames"]
    common.check_keys(doc, problems, path, raw, set(allowed))
    present = [k for k in allowed if k in raw]
    if len(present) != 1:
        problems.error(doc, path, f"Invalid value: exactly one of {', '.join(allowed)} must be set")
        return None
    key = present[0]
    value = raw[key]
    where = path + (key,)
    if key == "namespaces":
        return _namespaces_peer(doc, problems, where, value)
    if key == "pods":
        return _pods_peer(doc, problems, where, value)
    if key == "nodes":
        sel = common.label_selector(doc, problems, where, value)
        return None if sel is None else EntityMatch(node_selector=sel)
    if key == "networks":
        items = common.expect_list(doc, problems, where, value)
        if not 1 <= len(items) <= MAX_NETWORKS:
            problems.error(doc, where, f"Invalid value: must have between 1 and {MAX_NETWORKS} items")
            return None
        nets = [common.cidr(doc, problems, where + (i,), text) for i, text in enumerate(items)]
        valid = [n for n in nets if n is not None]
        if len(valid) < len(nets):
            return None
        return EntityMatch(nets=tuple(valid))
    items = common.expect_list(doc, problems, where, value)
    if not 1 <= len(items) <= MAX_DOMAINS:
        problems.error(doc, where, f"Invalid value: must have between 1 and {MAX_DOMAINS} items")
        return None
    bad = False
    for i, name in enumerate(items):
        if not isinstance(name, str) or not _DOMAIN.fullmatch(name):
            problems.error(
                doc, where + (i,), f"Invalid value: {name!r}: must be a domain name, optionally starting with '*.'"
            )
            bad = True
    if bad:
        return None
    return EntityMatch(domains=tuple(items))  # the addresses DNS answers taught for them


def is_namespace_set(value: Any) -> bool:
    """The KEP shape ({namespaceSelector|related|sameLabels|notSameLabels}) rather than a
    LabelSelector."""
    return isinstance(value, dict) and bool(set(value) & _NAMESPACE_SET_KEYS)


def _namespaces_peer(doc: Document, problems: Problems, path: FieldPath, value: Any) -> EntityMatch | None:
    if is_namespace_set(value):
        return _namespace_set(doc, problems, path, value, EntityMatch(endpoint_kinds=PODS))
    sel = common.label_selector(doc, problems, path, value)
    return None if sel is None else EntityMatch(endpoint_kinds=PODS, namespace_selector=sel)


def _pods_peer(doc: Document, problems: Problems, path: FieldPath, value: Any) -> EntityMatch | None:
    value = common.expect_dict(doc, problems, path, value)
    if value is None:
        return None
    if "namespaces" in value:  # KEP shape: pods: {namespaces: {...}, podSelector}
        common.check_keys(doc, problems, path, value, {"namespaces", "podSelector"})
        pod = _required_selector(doc, problems, path, value, "podSelector")
        ns = value["namespaces"]
        base = EntityMatch(selector=pod, endpoint_kinds=PODS)
        if is_namespace_set(ns):
            peer = _namespace_set(doc, problems, path + ("namespaces",), ns, base)
        else:
            sel = common.label_selector(doc, problems, path + ("namespaces",), ns)
            peer = None if sel is None else replace(base, namespace_selector=sel)
        return peer if pod is not None else None
    common.check_keys(doc, problems, path, value, {"namespaceSelector", "podSelector"})
    pod = _required_selector(doc, problems, path, value, "podSelector")
    ns = common.label_selector(doc, problems, path + ("namespaceSelector",), value.get("namespaceSelector"))
    if pod is None or ns is None:
        return None
    return EntityMatch(selector=pod, endpoint_kinds=PODS, namespace_selector=ns)


def _required_selector(doc: Document, problems: Problems, path: FieldPath, value: dict, key: str) -> Selector | None:
    if key not in value:
        # Required by the CRD; Go clients decode a missing one as {} (all): warn, read as {}.
        problems.warning(doc, path + (key,), "Required value: read as {} (all pods)")
    return common.label_selector(doc, problems, path + (key,), value.get(key))


def _namespace_set(
    doc: Document, problems: Problems, path: FieldPath, value: dict, base: EntityMatch
) -> EntityMatch | None:
    """The KEP's NamespacedPeer: exactly one of namespaceSelector, related, sameLabels,
    notSameLabels."""
    common.check_keys(doc, problems, path, value, _NAMESPACE_SET_KEYS)
    present = [k for k in ("namespaceSelector", "related", "sameLabels", "notSameLabels") if k in value]
    if len(present) != 1:
        problems.error(
            doc,
            path,
            "Invalid value: exactly one of namespaceSelector, related, sameLabels or notSameLabels must be set",
        )
        return None
    key = present[0]
    raw = value[key]
    if key == "namespaceSelector":
        sel = common.label_selector(doc, problems, path + (key,), raw)
        return None if sel is None else replace(base, namespace_selector=sel)
    if key == "related":
        if raw not in _RELATIONS:
            problems.error(doc, path + (key,), f'Unsupported value: {raw!r}: supported values: "Self", "NotSelf"')
            return None
        return replace(base, namespace_relation=_RELATIONS[raw])
    keys = common.expect_list(doc, problems, path + (key,), raw)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        problems.error(doc, path + (key,), "Invalid value: must be a non-empty list of label keys")
        return None
    if key == "sameLabels":
        return replace(base, same_labels=tuple(keys))
    return replace(base, not_same_labels=tuple(keys))


def read_anp_ports(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> tuple[PortMatch, ...] | None:
    """ANP ``ports``: each exactly one of portNumber{protocol, port}, namedPort,
    portRange{protocol, start, end}; protocol defaults to TCP."""
    items = common.expect_list(doc, problems, path, raw)
    if len(items) > MAX_PORTS:
        problems.error(doc, path, f"Too many: {len(items)}: must have at most {MAX_PORTS} items")
        return None
    out: list[PortMatch] = []
    ok = True
    for i, item in enumerate(items):
        where = path + (i,)
        item = common.expect_dict(doc, problems, where, item)
        if item is None:
            ok = False
            continue
        common.check_keys(doc, problems, where, item, {"portNumber", "namedPort", "portRange"})
        present = [k for k in ("portNumber", "namedPort", "portRange") if k in item]
        if len(present) != 1:
            problems.error(doc, where, "Invalid value: exactly one of portNumber, namedPort or portRange must be set")
            ok = False
            continue
        key = present[0]
        value = item[key]
        if key == "namedPort":
            port = (
                common.port_or_name(doc, problems, where + (key,), value)
                if isinstance(value, str) and not value.isdigit()
                else None
            )
            if port is None:
                if not isinstance(value, str) or value.isdigit():
                    problems.error(doc, where + (key,), f"Invalid value: {value!r}: must be a port name")
                ok = False
                continue
            out.append(PortMatch(protocol=None, port=port))  # the container port's own protocol
            continue
        value = common.expect_dict(doc, problems, where + (key,), value)
        if value is None:
            ok = False
            continue
        protocol = common.k8s_protocol(doc, problems, where + (key, "protocol"), value.get("protocol"))
        if key == "portNumber":
            common.check_keys(doc, problems, where + (key,), value, {"protocol", "port"})
            number = common.port_number(doc, problems, where + (key, "port"), value.get("port"))
            if protocol is None or number is None:
                ok = False
                continue
            out.append(PortMatch(protocol, common.PortRange(number, number)))
        else:
            common.check_keys(doc, problems, where + (key,), value, {"protocol", "start", "end"})
            rng = common.port_range(doc, problems, where + (key,), value.get("start"), value.get("end"))
            if rng is not None and rng.first == rng.last:
                problems.error(doc, where + (key, "end"), "Invalid value: Start port must be less than End port")
                rng = None
            if protocol is None or rng is None:
                ok = False
                continue
            out.append(PortMatch(protocol, rng))
    return tuple(out) if ok else None


ANP = Flavor(
    kind="AdminNetworkPolicy",
    actions={"Allow": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS},
    max_rules=MAX_RULES,
    max_peers=MAX_PEERS,
    ports_key="ports",
    read_ports=read_anp_ports,
)
BANP = Flavor(
    kind="BaselineAdminNetworkPolicy",
    actions={"Allow": Action.ALLOW, "Deny": Action.DENY},
    max_rules=MAX_RULES,
    max_peers=MAX_PEERS,
    ports_key="ports",
    read_ports=read_anp_ports,
)
