"""ClusterNetworkPolicy (policy.networking.k8s.io/v1alpha2) into the IR.

The successor of ANP/BANP: ``tier: Admin`` policies go to the ``kube-admin`` tier and
``tier: Baseline`` ones to ``kube-baseline``, ordered by ``priority``; actions Accept/Deny/Pass
are the IR's Allow/Deny/Pass; ports are ``protocols`` entries (tcp/udp/sctp with
``destinationPort: {number | range}``, or ``destinationNamedPort``).

Fail closed (the API's rule): a peer whose only fields are unknown to us (a newer CRD) cannot
be resolved. An Accept rule never matches through it; a Deny or Pass rule treats it as
"deny all" (``EntityMatch.unresolvable``, interpreted by the evaluator). ``domainNames`` peers
match the addresses DNS answers taught for those names (``Inventory.domains``).
"""

from __future__ import annotations

from typing import Any

from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.ir import (
    TIER_KUBE_ADMIN,
    TIER_KUBE_BASELINE,
    Action,
    Direction,
    EntityMatch,
    NamedPort,
    Policy,
    PortMatch,
    PortRange,
)
from pyclassify.kinds import adminnetworkpolicy as anp
from pyclassify.kinds import common

KIND = "ClusterNetworkPolicy"
MAX_RULES = 25
MAX_PEERS = 25
MAX_PROTOCOLS = 25
TIERS = {"Admin": TIER_KUBE_ADMIN, "Baseline": TIER_KUBE_BASELINE}
# The protocols field's keys are the Kubernetes protocols, lower-case.
_PROTOCOL_KEYS = {name.lower(): number for name, number in common.K8S_PROTOCOL_NUMBERS.items()}


def normalize_cnp(doc: Document, problems: Problems) -> list[Policy]:
    before = len(problems.errors)
    if not doc.name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    if "spec" not in doc.obj:
        problems.error(doc, ("spec",), "Required value")
        return []
    spec = common.expect_dict(doc, problems, ("spec",), doc.obj["spec"])
    if spec is None:
        return []
    common.check_keys(doc, problems, ("spec",), spec, {"tier", "priority", "subject", "ingress", "egress"})
    tier_name = spec.get("tier")
    tier = TIERS.get(tier_name) if tier_name is not None else None
    if tier is None:
        if spec.get("tier") is None:
            problems.error(doc, ("spec", "tier"), "Required value")
        else:
            problems.error(
                doc, ("spec", "tier"), f'Unsupported value: {spec.get("tier")!r}: supported values: "Admin", "Baseline"'
            )
    priority = spec.get("priority")
    if priority is None:
        problems.error(doc, ("spec", "priority"), "Required value")
    elif not common.is_int(priority) or not 0 <= priority <= anp.MAX_PRIORITY:
        problems.error(
            doc,
            ("spec", "priority"),
            f"Invalid value: {priority!r}: must be an integer between 0 and {anp.MAX_PRIORITY}",
        )
    if tier is None:
        tier = TIER_KUBE_ADMIN  # only to go on collecting errors; the policy is dropped
    return anp.build_policies(doc, problems, spec, CNP, tier, priority, before)


def read_protocols(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> tuple[PortMatch, ...] | None:
    if raw is None:
        return ()
    items = common.expect_list(doc, problems, path, raw)
    if not 1 <= len(items) <= MAX_PROTOCOLS:
        problems.error(doc, path, f"Invalid value: must have between 1 and {MAX_PROTOCOLS} items")
        return None
    out: list[PortMatch] = []
    ok = True
    for i, item in enumerate(items):
        where = path + (i,)
        item = common.expect_dict(doc, problems, where, item)
        if item is None:
            ok = False
            continue
        common.check_keys(doc, problems, where, item, {"tcp", "udp", "sctp", "destinationNamedPort"})
        present = [k for k in ("tcp", "udp", "sctp", "destinationNamedPort") if k in item]
        if len(present) != 1:
            problems.error(
                doc, where, "Invalid value: exactly one of tcp, udp, sctp or destinationNamedPort must be set"
            )
            ok = False
            continue
        key = present[0]
        if key == "destinationNamedPort":
            name = item[key]
            why = common.port_name_error(name) if isinstance(name, str) else "must be a string"
            if why:
                problems.error(doc, where + (key,), f"Invalid value: {name!r}: {why}")
                ok = False
                continue
            out.append(PortMatch(None, NamedPort(name)))
            continue
        match = _protocol_match(doc, problems, where + (key,), item[key], _PROTOCOL_KEYS[key])
        if match is None:
            ok = False
        else:
            out.append(match)
    return tuple(out) if ok else None


def _protocol_match(doc: Document, problems: Problems, path: FieldPath, raw: Any, protocol: int) -> PortMatch | None:
    raw = common.expect_dict(doc, problems, path, raw)
    if raw is None:
        return None
    common.check_keys(doc, problems, path, raw, {"destinationPort"})
    if not raw:
        problems.error(doc, path, "Invalid value: must have at least 1 property")
        return None
    port = common.expect_dict(doc, problems, path + ("destinationPort",), raw.get("destinationPort"))
    if port is None:
        return None
    where = path + ("destinationPort",)
    common.check_keys(doc, problems, where, port, {"number", "range"})
    present = [k for k in ("number", "range") if k in port]
    if len(present) != 1:
        problems.error(doc, where, "Invalid value: exactly one of number or range must be set")
        return None
    if present[0] == "number":
        n = common.port_number(doc, problems, where + ("number",), port["number"])
        return None if n is None else PortMatch(protocol, PortRange(n, n))
    rng = common.expect_dict(doc, problems, where + ("range",), port["range"])
    if rng is None:
        return None
    common.check_keys(doc, problems, where + ("range",), rng, {"start", "end"})
    r = common.port_range(doc, problems, where + ("range",), rng.get("start"), rng.get("end"))
    if r is not None and r.first == r.last:
        problems.error(doc, where + ("range", "end"), "Invalid value: Start port must be less than End port")
        return None
    return None if r is None else PortMatch(protocol, r)


def read_cnp_peer(
    doc: Document, problems: Problems, path: FieldPath, raw: Any, direction: Direction
) -> EntityMatch | None:
    """A peer; one that carries only fields this version does not know fails closed."""
    known = {"namespaces", "pods"} | ({"nodes", "networks", "domainNames"} if direction is Direction.EGRESS else set())
    if isinstance(raw, dict) and raw and not (set(raw) & known):
        problems.warning(
            doc, path, f"unknown peer type {sorted(raw)}: fails closed (Accept matches nothing, Deny/Pass deny)"
        )
        return EntityMatch(unresolvable=f"unknown peer type {', '.join(sorted(raw))}")
    if isinstance(raw, dict) and "namespaces" in raw and anp.is_namespace_set(raw["namespaces"]):
        problems.error(doc, path + ("namespaces",), "must be a label selector (matchLabels / matchExpressions)")
        return None
    if isinstance(raw, dict) and isinstance(raw.get("pods"), dict) and "namespaces" in raw["pods"]:
        problems.error(doc, path + ("pods", "namespaces"), "unknown field 'namespaces'")
        return None
    return anp.read_peer(doc, problems, path, raw, direction)


CNP = anp.Flavor(
    kind=KIND,
    actions={"Accept": Action.ALLOW, "Deny": Action.DENY, "Pass": Action.PASS},
    max_rules=MAX_RULES,
    max_peers=MAX_PEERS,
    ports_key="protocols",
    read_ports=read_protocols,
    read_peer=read_cnp_peer,
)
