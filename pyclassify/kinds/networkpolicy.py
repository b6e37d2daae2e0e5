"""Kubernetes NetworkPolicy (networking.k8s.io/v1) into the IR, validated as the API server does.

A NetworkPolicy is a policy of the ``default`` tier with no order: every policy that selects a
pod isolates it for its policy types (the tier's end-of-tier Deny), and each rule is an Allow.
Also here: the v1beta1 namespace isolation annotation of the original proposal (seed 001),
turned into one default-deny ingress policy for the pods of that namespace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, cast

from pyclassify.documents import Document, FieldPath, Problems, format_path
from pyclassify.ir import (
    TIER_DEFAULT,
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    NamedPort,
    Policy,
    PortMatch,
    PortRange,
    Rule,
    SourceRef,
    Subject,
)
from pyclassify.kinds import common

KIND = "NetworkPolicy"
PODS = frozenset({EndpointKind.POD})
ISOLATION_ANNOTATION = "net.beta.kubernetes.io/network-policy"
_POLICY_TYPES = {"Ingress": Direction.INGRESS, "Egress": Direction.EGRESS}


def normalize_networkpolicy(doc: Document, problems: Problems) -> list[Policy]:
    before = len(problems.errors)
    name = doc.name
    if not name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    namespace = doc.namespace or "default"  # kubectl puts unnamespaced objects in "default"
    spec = common.expect_dict(doc, problems, ("spec",), doc.obj.get("spec"))
    if spec is None:
        return []
    common.check_keys(doc, problems, ("spec",), spec, {"podSelector", "policyTypes", "ingress", "egress"})

    pod_selector = common.label_selector(doc, problems, ("spec", "podSelector"), spec.get("podSelector"))
    types = _policy_types(doc, problems, spec)
    ingress = tuple(
        r
        for r in (
            _rule(doc, problems, ("spec", "ingress", i), raw, Direction.INGRESS, namespace)
            for i, raw in enumerate(common.expect_list(doc, problems, ("spec", "ingress"), spec.get("ingress")))
        )
        if r is not None
    )
    egress = tuple(
        r
        for r in (
            _rule(doc, problems, ("spec", "egress", i), raw, Direction.EGRESS, namespace)
            for i, raw in enumerate(common.expect_list(doc, problems, ("spec", "egress"), spec.get("egress")))
        )
        if r is not None
    )
    if len(problems.errors) > before or pod_selector is None or types is None:
        return []  # an invalid policy is rejected whole, as the API server does
    return [
        Policy(
            kind=KIND,
            namespace=namespace,
            name=name,
            tier=TIER_DEFAULT,
            order=None,
            subject=Subject(selector=pod_selector, endpoint_kinds=PODS, namespace=namespace),
            types=types,
            ingress=ingress,
            egress=egress,
            source=SourceRef(doc.file, doc.line),
        )
    ]


def _policy_types(doc: Document, problems: Problems, spec: dict[str, Any]) -> frozenset[Direction] | None:
    raw = spec.get("policyTypes")
    if raw is None or raw == []:
        # API server defaulting: Ingress always, Egress when egress rules are given.
        types = {Direction.INGRESS}
        if spec.get("egress"):
            types.add(Direction.EGRESS)
        return frozenset(types)
    if not isinstance(raw, list):
        problems.error(doc, ("spec", "policyTypes"), "must be a list of Ingress and/or Egress")
        return None
    if len(raw) > 2:
        problems.error(doc, ("spec", "policyTypes"), "Invalid value: may not specify more than two policyTypes")
        return None
    out: set[Direction] = set()
    ok = True
    for i, t in enumerate(raw):
        if t not in _POLICY_TYPES:
            problems.error(
                doc, ("spec", "policyTypes", i), f'Unsupported value: {t!r}: supported values: "Ingress", "Egress"'
            )
            ok = False
        elif _POLICY_TYPES[t] in out:
            problems.error(doc, ("spec", "policyTypes", i), f"Duplicate value: {t!r}")
            ok = False
        else:
            out.add(_POLICY_TYPES[t])
    return frozenset(out) if ok else None


def _rule(
    doc: Document, problems: Problems, path: FieldPath, raw: Any, direction: Direction, namespace: str
) -> Rule | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    peers_key = "from" if direction is Direction.INGRESS else "to"
    common.check_keys(doc, problems, path, raw, {peers_key, "ports"})
    ports = tuple(
        p
        for p in (
            _port(doc, problems, path + ("ports", i), entry)
            for i, entry in enumerate(common.expect_list(doc, problems, path + ("ports",), raw.get("ports")))
        )
        if p is not None
    )
    peers = tuple(
        p
        for p in (
            _peer(doc, problems, path + (peers_key, i), entry, namespace)
            for i, entry in enumerate(common.expect_list(doc, problems, path + (peers_key,), raw.get(peers_key)))
        )
        if p is not None
    )
    # Ports are always the destination's: for ingress the subject's own ports, for egress the
    # ports of each peer. Named ports resolve against that destination endpoint.
    destinations: tuple[EntityMatch, ...]
    if direction is Direction.INGRESS:
        sources = peers
        destinations = (EntityMatch(ports=ports),) if ports else ()
    else:
        sources = ()
        if peers:
            destinations = tuple(_with_ports(p, ports) for p in peers)
        else:
            destinations = (EntityMatch(ports=ports),) if ports else ()
    return Rule(
        action=Action.ALLOW,
        index=cast(int, path[-1]),
        sources=sources,
        destinations=destinations,
        path=format_path(path),
    )


def _with_ports(peer: EntityMatch, ports: tuple[PortMatch, ...]) -> EntityMatch:
    return replace(peer, ports=ports) if ports else peer


def _port(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> PortMatch | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    common.check_keys(doc, problems, path, raw, {"protocol", "port", "endPort"})
    protocol = common.k8s_protocol(doc, problems, path + ("protocol",), raw.get("protocol"))
    port: PortRange | NamedPort | None = None
    ok = protocol is not None
    if raw.get("port") is not None:
        port = common.port_or_name(doc, problems, path + ("port",), raw["port"])
        ok = ok and port is not None
    end = raw.get("endPort")
    if end is not None:
        if raw.get("port") is None:
            problems.error(
                doc, path + ("endPort",), "Required value: may not be specified when `port` is not specified"
            )
            return None
        if isinstance(port, NamedPort):
            problems.error(doc, path + ("endPort",), "Invalid value: may not be specified when `port` is non-numeric")
            return None
        last = common.port_number(doc, problems, path + ("endPort",), end)
        if last is None or port is None:
            return None
        if last < port.first:
            problems.error(doc, path + ("endPort",), f"Invalid value: {last}: must be greater than or equal to `port`")
            return None
        port = PortRange(port.first, last)
    return PortMatch(protocol=protocol, port=port) if ok else None


def _peer(doc: Document, problems: Problems, path: FieldPath, raw: Any, namespace: str) -> EntityMatch | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    common.check_keys(doc, problems, path, raw, {"podSelector", "namespaceSelector", "ipBlock"})
    present = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if raw.get(k) is not None]
    if not present:
        problems.error(doc, path, "Required value: must specify a peer")
        return None
    if "ipBlock" in present and len(present) > 1:
        problems.error(doc, path, "Forbidden: may not specify both ipBlock and another peer")
        return None
    if "ipBlock" in present:
        block = common.ip_block(doc, problems, path + ("ipBlock",), raw["ipBlock"])
        if block is None:
            return None
        net, excepts = block
        return EntityMatch(nets=(net,), not_nets=excepts)
    pods = ns = None
    if "podSelector" in present:
        pods = common.label_selector(doc, problems, path + ("podSelector",), raw["podSelector"])
        if pods is None:
            return None
    if "namespaceSelector" in present:
        ns = common.label_selector(doc, problems, path + ("namespaceSelector",), raw["namespaceSelector"])
        if ns is None:
            return None
        # namespaceSelector (with or without podSelector): pods in the matching namespaces.
        return EntityMatch(selector=pods, endpoint_kinds=PODS, namespace_selector=ns)
    # podSelector alone: pods of the policy's own namespace.
    return EntityMatch(selector=pods, endpoint_kinds=PODS, namespace=namespace)


def normalize_namespace_isolation(doc: Document, problems: Problems) -> list[Policy]:
    """The v1beta1 annotation ``net.beta.kubernetes.io/network-policy`` on a Namespace:
    ``{"ingress": {"isolation": "DefaultDeny"}}`` isolates every pod of the namespace for
    ingress, so only traffic that some NetworkPolicy allows reaches them (seed 001)."""
    annotations = doc.metadata.get("annotations") or {}
    raw = annotations.get(ISOLATION_ANNOTATION) if isinstance(annotations, dict) else None
    if raw is None:
        return []
    path = ("metadata", "annotations", ISOLATION_ANNOTATION)
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError as e:
        problems.error(doc, path, f"invalid JSON: {e.msg}")
        return []
    if not isinstance(value, dict):
        problems.error(doc, path, 'must be a JSON object like {"ingress": {"isolation": "DefaultDeny"}}')
        return []
    isolation = (value.get("ingress") or {}).get("isolation") if isinstance(value.get("ingress"), dict) else None
    if isolation is None:
        return []
    if isolation != "DefaultDeny":
        problems.error(
            doc, path, f'Unsupported value: ingress.isolation {isolation!r}: supported values: "DefaultDeny"'
        )
        return []
    name = doc.name
    return [
        Policy(
            kind="Namespace",
            namespace=None,
            name=name,
            tier=TIER_DEFAULT,
            order=None,
            subject=Subject(endpoint_kinds=PODS, namespace=name),
            types=frozenset({Direction.INGRESS}),
            source=SourceRef(doc.file, doc.line),
        )
    ]


def isolation_policies(documents: Iterable[Document], problems: Problems) -> list[Policy]:
    """Default-deny ingress policies of every Namespace document carrying the v1beta1
    isolation annotation (the loader hands all documents; non-Namespaces are ignored)."""
    out: list[Policy] = []
    for doc in documents:
        if doc.kind == "Namespace" and doc.api_version in ("v1", ""):
            out.extend(normalize_namespace_isolation(doc, problems))
    return out
