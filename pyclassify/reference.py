"""The reference evaluator: is one flow allowed by a PolicySet, and why (docs/architecture.md §3).

Pure Python over the IR and the inventory, one flow at a time, no compilation: it is the
oracle the native engine is tested against, so every step is written out plainly.

A flow is allowed when the egress side of its source endpoint allows it AND the ingress side
of its destination endpoint allows it. Each side walks the tiers in order; within a tier only
the policies whose subject matches the endpoint and whose types include the direction take
part; their rules run in order (Allow/Deny decide, Pass leaves the tier, Log records and goes
on); a tier in which some policy applied but no rule decided ends with the tier's default
action. After the tiers come the endpoint's profiles, then the configured default.

The flow vocabulary (``Flow``, ``FlowEnd``, ``Decision``, ``Verdict``) and the labels as policy
sees them live in ``pyclassify.flow``, shared with the native engine; they are re-exported here
for the callers that import them from this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyclassify.flow import (
    VERDICTS,
    Decision,
    Flow,
    FlowEnd,
    Verdict,
    endpoint_labels,
    namespace_labels,
    service_account_labels,
)
from pyclassify.inventory import Endpoint, Inventory, IPAddress, Service
from pyclassify.ir import (
    PROTO_TCP,
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    IcmpMatch,
    NamedPort,
    Policy,
    PolicySet,
    PortMatch,
    PortRange,
    Relation,
    Rule,
    Subject,
)
from pyclassify.kinds.common import ICMP_PROTOCOLS, PORT_PROTOCOLS


def evaluate(
    policy_set: PolicySet, inventory: Inventory, flow: Flow, default_pod: str = "allow", default_host: str = "deny"
) -> Verdict:
    if default_pod not in VERDICTS or default_host not in VERDICTS:
        raise ValueError("defaults must be 'allow' or 'deny'")
    src = _resolve(inventory, flow.src)
    dst = _resolve(inventory, flow.dst)
    ctx = _Context(policy_set, inventory, flow, src, dst, default_pod, default_host)
    egress = ctx.side(src, Direction.EGRESS)
    ingress = ctx.side(dst, Direction.INGRESS)
    sides = [
        (_side_verdict(d, ctx.default_for(e)), d is not None and d.awaits_request)
        for d, e in ((egress, src), (ingress, dst))
        if _is_local(inventory, e)
    ]
    allowed = all(v == "allow" for v, _ in sides)
    awaits = not allowed and all(v == "allow" or awaits for v, awaits in sides)
    return Verdict("allow" if allowed else "deny", egress, ingress, awaits_request=awaits)


def _side_verdict(decision: Decision | None, default: str) -> str:
    return decision.verdict if decision is not None else default


def _resolve(inventory: Inventory, end: FlowEnd) -> FlowEnd:
    """Fill in the endpoint of an address the inventory knows (``Inventory.owner_of``: a pod's
    own IP wins over a hostNetwork pod sharing its node's address)."""
    if end.endpoint is not None or end.ip is None:
        return end
    owner = inventory.owner_of(end.ip)
    return FlowEnd(owner, end.ip) if owner is not None else end


def _is_local(inventory: Inventory, end: FlowEnd) -> bool:
    """Whether policy applies to this end: a known endpoint this node enforces for
    (``Inventory.enforces``), except hostNetwork pods (their traffic is the node's, which pod
    policy does not govern)."""
    ep = end.endpoint
    return ep is not None and not (ep.kind is EndpointKind.POD and ep.host_network) and inventory.enforces(ep)


@dataclass
class _Context:
    policy_set: PolicySet
    inventory: Inventory
    flow: Flow
    src: FlowEnd
    dst: FlowEnd
    default_pod: str
    default_host: str
    awaits: bool = False  # the side being decided passed an http rule for want of a request

    def default_for(self, end: FlowEnd) -> str:
        ep = end.endpoint
        return self.default_host if ep is not None and ep.kind is EndpointKind.HOST else self.default_pod

    # -- one side -----------------------------------------------------------------------
    def side(self, end: FlowEnd, direction: Direction) -> Decision | None:
        """The decision for ``end``'s policy in ``direction``; None when nothing applies."""
        if not _is_local(self.inventory, end):
            return None
        subject = end.endpoint
        assert subject is not None
        self.awaits = False
        decision = self._side(subject, end, direction)
        if decision is not None and decision.verdict == "deny" and self.awaits:
            decision.awaits_request = True
        return decision

    def _side(self, subject: Endpoint, end: FlowEnd, direction: Direction) -> Decision | None:
        logs: list[tuple[str | None, str, str | int]] = []
        anything_applied = False
        for tier in self.policy_set.tiers:
            applied: list[str] = []  # the policies of this tier that select the endpoint
            passed = False
            for policy in self.policy_set.policies:
                if policy.tier != tier.name or direction not in policy.types:
                    continue
                if not self.subject_matches(policy.subject, subject):
                    continue
                applied.append(policy.ref)
                for rule in policy.rules(direction):
                    action = self.rule_action(rule, subject)
                    if action is None:
                        continue
                    if action is Action.LOG:
                        logs.append((tier.name, policy.ref, rule.label))
                        continue
                    if action is Action.PASS:
                        passed = True
                        break
                    verdict = "allow" if action is Action.ALLOW else "deny"
                    return Decision(verdict, tier.name, policy.ref, rule.label, "rule", logs)
                if passed:
                    break  # Pass: the rest of this tier is skipped, the next tier decides
            anything_applied = anything_applied or bool(applied)
            if applied and not passed and tier.default_action is not Action.PASS:
                verdict = "allow" if tier.default_action is Action.ALLOW else "deny"
                return Decision(verdict, tier.name, None, None, "end-of-tier", logs, policies=applied)

        decision = self.profiles(subject, direction, logs)
        if decision is not None:
            return decision
        if not anything_applied:
            return None
        return Decision(self.default_for(end), None, None, None, "default", logs)

    def profiles(self, subject: Endpoint, direction: Direction, logs: list) -> Decision | None:
        """Calico profiles: their rules in order; an endpoint with profiles that no rule
        allowed is denied (the profiles' implicit end)."""
        by_name = {p.name: p for p in self.policy_set.profiles}
        present = [by_name[n] for n in subject.profiles if n in by_name]
        if not present:
            return None
        for profile in present:
            ref = f"Profile/{profile.name}"
            for rule in profile.rules(direction):
                action = self.rule_action(rule, subject)
                if action is None:
                    continue
                if action is Action.LOG:
                    logs.append((None, ref, rule.label))
                    continue
                if action is Action.PASS:
                    break  # nothing left to pass to but the next profile
                verdict = "allow" if action is Action.ALLOW else "deny"
                return Decision(verdict, None, ref, rule.label, "profile", logs)
        return Decision("deny", None, None, None, "profile", logs)

    # -- subjects -----------------------------------------------------------------------
    def subject_matches(self, subject: Subject, ep: Endpoint) -> bool:
        if ep.kind not in subject.endpoint_kinds:
            return False
        if subject.namespace is not None and ep.namespace != subject.namespace:
            return False
        if not subject.selector.matches(self.endpoint_labels(ep)):
            return False
        if subject.namespace_selector is not None:
            if ep.namespace is None or not subject.namespace_selector.matches(self.namespace_labels(ep.namespace)):
                return False
        if subject.service_account_selector is not None:
            if not subject.service_account_selector.matches(self.service_account_labels(ep)):
                return False
        return True

    # -- rules --------------------------------------------------------------------------
    def rule_action(self, rule: Rule, subject: Endpoint) -> Action | None:
        """The rule's action if it matches the flow (a Pass that matched only through an
        unresolvable peer becomes Deny: fail closed), else None."""
        flow = self.flow
        if rule.ip_version is not None:
            version = _ip_version(self.src, self.dst)
            if version is not None and version != rule.ip_version:
                return None
        if rule.protocols is not None and flow.protocol not in rule.protocols:
            return None
        if flow.protocol in rule.not_protocols:
            return None
        if rule.icmp is not None and not self.icmp_matches(rule.icmp):
            return None
        if rule.not_icmp is not None and self.icmp_matches(rule.not_icmp):
            return None
        src_hit = self.any_entity(rule.sources, self.src, subject, rule.action, source=True)
        if src_hit is None:
            return None
        dst_hit = self.any_entity(rule.destinations, self.dst, subject, rule.action, source=False)
        if dst_hit is None:
            return None
        if rule.action is Action.PASS and "unresolvable" in (src_hit, dst_hit):
            return Action.DENY
        if rule.http is not None:
            # Only a TCP connection carries requests; until its request is known the rule
            # matches nothing, and the side's decision awaits it.
            if flow.protocol != PROTO_TCP:
                return None
            if flow.request is None:
                self.awaits = True
                return None
            if not rule.http.matches(flow.request.method, flow.request.path):
                return None
        return rule.action

    def icmp_matches(self, icmp: IcmpMatch) -> bool:
        flow = self.flow
        if flow.protocol not in ICMP_PROTOCOLS:
            return False
        if icmp.type is not None and flow.icmp_type != icmp.type:
            return False
        if icmp.code is not None and flow.icmp_code != icmp.code:
            return False
        return True

    def any_entity(
        self, entities: tuple[EntityMatch, ...], end: FlowEnd, subject: Endpoint, action: Action, source: bool
    ) -> str | None:
        """ "match" / "unresolvable" for the first entity that matches, None if none does.
        An empty tuple matches anything."""
        if not entities:
            return "match"
        for entity in entities:
            if entity.unresolvable is not None:
                # Fail closed: an Allow never matches through it, Deny/Pass always do.
                if action in (Action.ALLOW, Action.LOG):
                    continue
                if self.ports_match(entity, source):
                    return "unresolvable"
                continue
            if self.entity_matches(entity, end, subject, source):
                return "match"
        return None

    def entity_matches(self, m: EntityMatch, end: FlowEnd, subject: Endpoint, source: bool) -> bool:
        ip = end.address
        if m.nets and (ip is None or not any(_contains(n, ip) for n in m.nets)):
            return False
        if m.not_nets and ip is not None and any(_contains(n, ip) for n in m.not_nets):
            return False
        if m.node_selector is not None and not self.node_matches(m.node_selector, ip):
            return False
        if m.domains:
            # the addresses DNS answers taught for these names, valid when the packet was seen
            facts = self.inventory.domains
            if ip is None or facts is None or not facts.matches(str(ip), list(m.domains), self.flow.ts_ns):
                return False
        if m.service is not None and not self.service_matches(m, end, source):
            return False
        if _needs_labels(m) and not any(
            self.labelled_matches(m, c, subject) for c in self.candidates(m, end, m.selector is not None)
        ):
            return False
        if m.not_selector is not None and any(m.not_selector.matches(c.labels) for c in self.candidates(m, end, True)):
            return False
        return self.ports_match(m, source)

    def ports_match(self, m: EntityMatch, source: bool) -> bool:
        """Ports of a source entity are the flow's source port, of a destination entity its
        destination port; named ports resolve against the endpoint on that side."""
        flow = self.flow
        port = flow.sport if source else flow.dport
        owner = (self.src if source else self.dst).endpoint
        if m.ports and not any(_port_matches(p, flow.protocol, port, owner) for p in m.ports):
            return False
        if m.not_ports and any(_port_matches(p, flow.protocol, port, owner) for p in m.not_ports):
            return False
        return True

    def candidates(self, m: EntityMatch, end: FlowEnd, network_sets: bool) -> list[_Labelled]:
        """What label-based fields can see at this end: the endpoint itself, and (when
        ``network_sets``) the network sets containing the address, of any namespace; both only
        if ``m.endpoint_kinds`` admits their kind.

        The positive fields see network sets through a ``selector`` only; a ``notSelector``
        always does, as felix renders it: "address not in the IP set of everything the
        notSelector matches" (workload and host endpoints, and network sets)."""
        out: list[_Labelled] = []
        ep = end.endpoint
        kinds = m.endpoint_kinds
        # A hostNetwork pod's traffic carries the node's address: pod selectors never see it.
        if ep is not None and not (ep.kind is EndpointKind.POD and ep.host_network):
            if kinds is None or ep.kind in kinds:
                out.append(_Labelled(ep.namespace, self.endpoint_labels(ep), ep))
        ip = end.address
        if ip is not None and (kinds is None or EndpointKind.NETWORK_SET in kinds) and network_sets:
            for ns in self.inventory.network_sets:
                if any(_contains(n, ip) for n in ns.nets):
                    out.append(_Labelled(ns.namespace, dict(ns.labels), None))
        return out

    def labelled_matches(self, m: EntityMatch, c: _Labelled, subject: Endpoint) -> bool:
        if m.selector is not None and not m.selector.matches(c.labels):
            return False
        if m.namespace is not None and c.namespace != m.namespace:
            return False
        if m.namespace_selector is not None:
            if m.namespace_selector.is_global:
                if c.namespace is not None:  # global(): only cluster-scoped things
                    return False
            elif c.namespace is None or not m.namespace_selector.matches(self.namespace_labels(c.namespace)):
                return False
        if m.namespace_relation is not None:
            same = c.namespace is not None and c.namespace == subject.namespace
            if same != (m.namespace_relation is Relation.SELF):
                return False
        if m.same_labels or m.not_same_labels:
            if c.namespace is None:
                return False
            mine = self.namespace_labels(subject.namespace)
            theirs = self.namespace_labels(c.namespace)
            for key in m.same_labels:
                if key not in mine or key not in theirs or mine[key] != theirs[key]:
                    return False
            for key in m.not_same_labels:
                if mine.get(key) == theirs.get(key):
                    return False
        if m.service_account_names is not None:
            if c.endpoint is None or c.endpoint.service_account not in m.service_account_names:
                return False
        if m.service_account_selector is not None:
            if c.endpoint is None or not m.service_account_selector.matches(self.service_account_labels(c.endpoint)):
                return False
        return True

    def node_matches(self, selector, ip: IPAddress | None) -> bool:
        if ip is None:
            return False
        return any(ip in node.addresses and selector.matches(node.labels) for node in self.inventory.nodes.values())

    def service_matches(self, m: EntityMatch, end: FlowEnd, source: bool) -> bool:
        """A Calico ``services`` match: an address of the service (cluster IP or backend), and
        as destination without explicit ports, one of its target ports."""
        ref = m.service
        assert ref is not None  # called for a match with a service only
        svc = self.inventory.services.get((ref.namespace, ref.name))
        if svc is None:
            return False
        ip = end.address
        ep = end.endpoint
        if not service_member(svc, ep, ip):
            return False
        if source or m.ports or not svc.ports:
            return True
        flow = self.flow
        for sp in svc.ports:
            if sp.protocol != flow.protocol:
                continue
            target = sp.target_port if sp.target_port is not None else sp.port
            if isinstance(target, str):
                if ep is not None and flow.dport in ep.named_port(target, flow.protocol):
                    return True
            elif flow.dport in (target, sp.port):
                return True
        return False

    # -- labels ----------------------------------------------------------------------------
    def endpoint_labels(self, ep: Endpoint) -> Mapping[str, str]:
        return endpoint_labels(ep)

    def namespace_labels(self, namespace: str | None) -> Mapping[str, str]:
        return namespace_labels(self.inventory, namespace)

    def service_account_labels(self, ep: Endpoint) -> Mapping[str, str]:
        return service_account_labels(self.inventory, ep)


@dataclass(frozen=True)
class _Labelled:
    namespace: str | None
    labels: Mapping[str, str]
    endpoint: Endpoint | None  # None for a network set


def _needs_labels(m: EntityMatch) -> bool:
    """Whether the entity has a positive label condition: some identity at the address must
    satisfy it. ``not_selector`` is not one (an address nothing owns passes it: felix's
    "not in the IP set"); a namespaced Calico policy's scoping of it is the ``namespace``."""
    return (
        m.selector is not None
        or m.endpoint_kinds is not None
        or m.namespace is not None
        or m.namespace_selector is not None
        or m.namespace_relation is not None
        or bool(m.same_labels)
        or bool(m.not_same_labels)
        or m.service_account_names is not None
        or m.service_account_selector is not None
    )


def _contains(net, ip: IPAddress) -> bool:
    return net.version == ip.version and ip in net


def _ip_version(src: FlowEnd, dst: FlowEnd) -> int | None:
    for end in (src, dst):
        if end.address is not None:
            return end.address.version
    return None


def _port_matches(p: PortMatch, protocol: int, port: int | None, owner: Endpoint | None) -> bool:
    if p.protocol is not None and p.protocol != protocol:
        return False
    if p.port is None:
        return True
    if port is None or protocol not in PORT_PROTOCOLS:
        return False
    if isinstance(p.port, PortRange):
        return p.port.first <= port <= p.port.last
    assert isinstance(p.port, NamedPort)
    if owner is None:
        return False  # an outside address has no named ports
    return port in owner.named_port(p.port.name, protocol)


def service_member(svc: Service, ep: Endpoint | None, ip: IPAddress | None) -> bool:
    """Whether an address (or the endpoint it belongs to) is one of a Service's: its cluster IP
    or a backend's, or a pod its selector picks in its namespace."""
    if ip is not None and (ip in svc.cluster_ips or ip in svc.endpoint_ips):
        return True
    return (
        ep is not None
        and bool(svc.selector)
        and ep.namespace == svc.namespace
        and all(ep.labels.get(k) == v for k, v in svc.selector.items())  # type: ignore[union-attr]
    )


def policy_applies(policy: Policy, endpoint: Endpoint, inventory: Inventory, direction: Direction) -> bool:
    """Whether ``policy`` takes part for ``endpoint`` in ``direction`` (explain and tests)."""
    ctx = _Context(
        PolicySet((), ()),
        inventory,
        Flow(FlowEnd(endpoint), FlowEnd(endpoint), 0),
        FlowEnd(endpoint),
        FlowEnd(endpoint),
        "allow",
        "deny",
    )
    return direction in policy.types and ctx.subject_matches(policy.subject, endpoint)
