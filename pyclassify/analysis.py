"""Offline questions about a project: one flow (``explain``) and all pod pairs (``matrix``).

The CLI formats what these return; the answers come from the reference evaluator.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Any

from pyclassify.flow import Flow, FlowEnd, HttpRequest, Verdict
from pyclassify.hostpath import HookSets, HostPath, host_path
from pyclassify.inventory import Endpoint, Service, ServicePort
from pyclassify.ir import PROTO_ICMP, PROTO_ICMPV6, Direction, EndpointKind
from pyclassify.kinds.common import PROTOCOL_NUMBERS, protocol_name
from pyclassify.project import Project
from pyclassify.reference import evaluate
from pyclassify.services import backend_port, node_addresses
from pyclassify.source import shown


class UnknownEnd(ValueError):
    """A ``--from``/``--to`` that names nothing in the inventory and is not an IP address;
    ``option`` says which (None if unknown)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def parse_protocol(text: str) -> int:
    """``TCP``/``udp``/``ICMPv6``/... or an IP protocol number 0-255."""
    number = PROTOCOL_NUMBERS.get(text.upper())
    if number is not None:
        return number
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"unknown protocol {shown(text)} (a name like TCP, UDP, SCTP, ICMP, ICMPv6, or 0-255)") from None
    if not 0 <= value <= 255:
        raise ValueError(f"protocol number {value} is outside 0-255")
    return value


def resolve_end(project: Project, text: str, option: str | None = None) -> FlowEnd:
    """A flow end from what a person types: ``ns/pod``, a workload, a host endpoint name or an IP.

    An IP that no endpoint owns is an outside address (no policy of its own)."""
    endpoint = project.find_endpoint(text)
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if endpoint is None and ip is None:
        raise UnknownEnd(f"{shown(text)} is not a pod (ns/name), workload, host endpoint or IP address in the "
                         "inventory", option)
    return FlowEnd(endpoint, ip)


@dataclass
class Backend:
    """One backend a Service delivers to, the flow as kube-proxy delivers it (destination
    rewritten to the backend and its target port), and its verdict."""

    flow: Flow
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return {**end_json(self.flow.dst), "port": self.flow.dport, **self.verdict.to_json()}


@dataclass
class ServiceTarget:
    """A flow to a Service's virtual address: its ClusterIP, or a node address and NodePort."""

    service: Service
    port: ServicePort | None  # None: the Service has no such port (kube-proxy delivers nothing)
    via: str  # "ClusterIP" or "NodePort"

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.service.namespace, "name": self.service.name, "via": self.via,
                "port": None if self.port is None else self.port.port,
                "node_port": None if self.port is None else self.port.node_port}


@dataclass
class Explanation:
    flow: Flow
    verdict: Verdict
    #: when the destination is a Service's virtual address: the Service and each backend judged
    service: ServiceTarget | None = None
    backends: list[Backend] | None = None
    note: str | None = None  # why no backend was judged, when none was
    #: the verdict with the staged policies enforced (``Project.staged``); None if none is staged
    staged: Verdict | None = None
    #: to or from a host endpoint, with doNotTrack or preDNAT policy (or a pre-DNAT
    #: destination given): the packet's path through the host's hooks (``pyclassify.hostpath``)
    host_path: HostPath | None = None
    #: routed by the host through host endpoints' interfaces (``via``): (direction, host
    #: endpoint, its path through the hooks: untracked, pre-DNAT, forward)
    forward: list[tuple[Direction, str, HostPath]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = self.verdict.to_json()
        doc["flow"] = flow_json(self.flow)
        if self.staged is not None:
            doc["staged"] = {**self.staged.to_json(), "summary": self.staged.would()}
        if self.host_path is not None:
            doc["host_path"] = self.host_path.to_json()
        if self.forward:
            doc["forward"] = [{"via": name, "direction": d.value, **path.to_json()} for d, name, path in self.forward]
        if self.service is not None:
            doc["service"] = {**self.service.to_json(), "backends": [b.to_json() for b in self.backends or []],
                              "note": self.note}
        return doc


def service_target(project: Project, flow: Flow) -> ServiceTarget | None:
    """The Service a flow's destination address is the virtual address of (kube-proxy would
    DNAT it): a ClusterIP (matched with its port and protocol), or a node's address with a
    NodePort. None when the destination is no Service address (or is an endpoint's own)."""
    ip = flow.dst.ip
    if ip is None or flow.dst.endpoint is not None and flow.dst.endpoint.kind is not EndpointKind.HOST:
        return None
    port_of = lambda svc, want: next(  # noqa: E731
        (p for p in svc.ports if p.protocol == flow.protocol and want(p)), None)
    for svc in project.inventory.services.values():
        if ip in svc.cluster_ips:
            return ServiceTarget(svc, port_of(svc, lambda p: p.port == flow.dport), "ClusterIP")
    if flow.dport is not None and ip in node_addresses(project.inventory):
        for svc in project.inventory.services.values():
            port = port_of(svc, lambda p: p.node_port == flow.dport)
            if port is not None:
                return ServiceTarget(svc, port, "NodePort")
    return None


def service_backends(project: Project, flow: Flow, target: ServiceTarget) -> tuple[list[Flow], str | None]:
    """The flows kube-proxy makes of ``flow``, one per backend (EndpointSlice addresses, or the
    pods the selector picks), with the destination port its targetPort (a named one resolved
    on each backend pod); and a note when there is none."""
    if target.port is None:
        return [], f"the Service has no {protocol_name(flow.protocol)} port {flow.dport}: kube-proxy delivers nothing"
    flows = []
    unresolved = []
    version = flow.dst.ip.version if flow.dst.ip is not None else None
    for ip in target.service.endpoint_ips:
        if ip.version != version:
            continue  # kube-proxy translates within one address family
        port = backend_port(project.inventory, ip, target.port)
        if port is None:
            unresolved.append(str(ip))
            continue
        flows.append(replace(flow, dst=FlowEnd(project.inventory.owner_of(ip), ip), dport=port))
    if flows:
        return flows, None
    if unresolved:
        return [], f"no backend has the named target port {target.port.target_port!r} ({', '.join(unresolved)})"
    return [], "the Service has no endpoints: kube-proxy delivers nothing"


def end_json(end: FlowEnd) -> dict[str, Any]:
    ep = end.endpoint
    return {
        "endpoint": ep.ref if ep is not None else None,
        "kind": ep.kind.value if ep is not None else "outside",
        "ip": str(end.address) if end.address is not None else None,
    }


def flow_json(flow: Flow) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "src": end_json(flow.src),
        "dst": end_json(flow.dst),
        "protocol": protocol_name(flow.protocol),
        "sport": flow.sport,
        "dport": flow.dport,
    }
    if flow.protocol in (PROTO_ICMP, PROTO_ICMPV6):
        doc["icmp_type"] = flow.icmp_type
        doc["icmp_code"] = flow.icmp_code
    if flow.request is not None:
        doc["request"] = {"method": flow.request.method, "path": flow.request.path}
    return doc


ENGINES = ("native", "reference")


class _Judge:
    """Answers flows with the native engine (compiled once) or the reference evaluator."""

    def __init__(self, project: Project, engine: str, default: str | None, base: Any = None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}")
        self.project = project
        self.engine = engine
        self.default = default
        self.defaults = {} if default is None else {"default_pod": default, "default_host": default}
        self.native = None
        if engine == "native":
            from pyclassify.engine import NativeEngine

            # Another policy set over the same inventory (staged, a hook's) is a delta from an
            # engine already built, not a second build.
            self.native = (NativeEngine(project.policy_set, project.inventory) if base is None
                           else base.update(project.policy_set, project.inventory))

    def __call__(self, flow: Flow) -> Verdict:
        if self.native is not None:
            return self.native.evaluate(flow, **self.defaults)
        return evaluate(self.project.policy_set, self.project.inventory, flow, **self.defaults)

    def over(self, project: Project) -> "_Judge":
        """A judge of ``project`` (the same inventory, another policy set), from this one's engine."""
        return _Judge(project, self.engine, self.default, self.native)

    def evaluator(self) -> Any:
        """``reference.evaluate``'s signature: the reference, or a native engine per policy set
        (this one's for its own set, deltas from it for the others: the host's hooks)."""
        if self.native is None:
            return evaluate
        engines: dict[int, Any] = {id(self.project.policy_set): self.native}

        def native(policy_set: Any, inventory: Any, flow: Flow, **defaults: str) -> Verdict:
            e = engines.get(id(policy_set))
            if e is None:
                e = engines[id(policy_set)] = self.native.update(policy_set, inventory)
            return e.evaluate(flow, **defaults)

        return native


def explain(project: Project, src: str, dst: str, protocol: int, dport: int | None,
            sport: int | None = None, icmp_type: int | None = None, icmp_code: int | None = None,
            default: str | None = None, engine: str = "native", service_backend: str | None = None,
            pre_dnat: str | None = None, request: HttpRequest | None = None,
            via: tuple[tuple[Direction, str], ...] = ()) -> Explanation:
    """The verdict of one flow. A flow to a Service's ClusterIP (or a NodePort on a node's
    address) is judged as kube-proxy delivers it: once per backend (``service_backend``, an
    address or endpoint, picks one); it is allowed when every backend judged allows it. A flow
    to or from a host endpoint goes through the host's hooks (doNotTrack, preDNAT, normal host
    policy); ``pre_dnat`` (``ADDR[:PORT]``) is where it was going before a DNAT on the host.
    ``request`` is the HTTP request the connection carries (``http`` rules); without it, a
    verdict that depends on one says it awaits it. ``via``: the host routes the flow in
    (ingress) or out (egress) by these host endpoints' interfaces, whose applyOnForward policy
    (and doNotTrack, preDNAT) judges it before the endpoints' own."""
    flow = Flow(resolve_end(project, src, "--from"), resolve_end(project, dst, "--to"), protocol, sport, dport,
                icmp_type, icmp_code, request=request)
    judge = _Judge(project, engine, default)
    result = _explain_flow(project, flow, judge, service_backend, dst)
    _through_host(project, flow, result, judge, pre_dnat)
    _forwarded(project, flow, result, judge, via)
    staged = project.staged()
    if staged is not None:  # the same flow with the staged policies enforced, beside the real verdict
        result.staged = _explain_flow(staged, flow, judge.over(staged), service_backend, dst).verdict
    return result


def _through_host(project: Project, flow: Flow, result: Explanation, judge: _Judge, pre_dnat: str | None) -> None:
    """A flow to (or from) a host endpoint, judged through the host's hooks when there is
    doNotTrack or preDNAT policy or a pre-DNAT destination was given: ``result.host_path``, and
    the verdict and host side's decision become the path's."""
    hooks = HookSets(project.policy_set)
    host_end = next((e for e in (flow.dst, flow.src) if e.endpoint is not None and e.endpoint.kind is EndpointKind.HOST), None)
    if pre_dnat is not None and (host_end is not flow.dst or result.service is not None):
        raise UnknownEnd("--to must be a host endpoint (where the DNAT sent the flow)", "--pre-dnat")
    if host_end is None or result.service is not None or not (hooks.has_early() or pre_dnat):
        return
    inbound = host_end is flow.dst
    pre = flow
    if pre_dnat is not None:
        ip, port = _address_port(pre_dnat, flow.dport)
        pre = replace(flow, dst=FlowEnd(flow.dst.endpoint, ip), dport=port)
    side = Direction.INGRESS if inbound else Direction.EGRESS
    path = host_path(judge.evaluator(), hooks, project.inventory, pre=pre, post=flow, side=side,
                     host_traffic=True, default_host=judge.default or "deny")
    result.host_path = path
    deciding = path.steps[-1].decision
    v = result.verdict
    other = v.egress if inbound else v.ingress
    other_ok = other is None or other.verdict == "allow" or not _local(project, flow.src if inbound else flow.dst)
    verdict = "allow" if path.verdict == "allow" and other_ok else "deny"
    result.verdict = Verdict(verdict, v.egress if inbound else deciding, deciding if inbound else v.ingress)


def _forwarded(project: Project, flow: Flow, result: Explanation, judge: _Judge,
               via: tuple[tuple[Direction, str], ...]) -> None:
    """A flow the host routes in or out by host endpoints' interfaces: each one's hooks judge it
    with the host endpoint as the subject of that side (the addresses stay the packet's); one
    that drops it makes the verdict deny (the endpoints' own policy judged it otherwise)."""
    hooks = HookSets(project.policy_set) if via else None
    for side, name in via:
        option = "--in-via" if side is Direction.INGRESS else "--out-via"
        hep = project.find_endpoint(name)
        if hep is None or hep.kind is not EndpointKind.HOST:
            raise UnknownEnd(f"{shown(name)} is not a host endpoint", option)
        if hep in (flow.src.endpoint, flow.dst.endpoint):
            raise UnknownEnd(f"{shown(name)} is an end of the flow: traffic to or from the host is not routed", option)
        if side is Direction.INGRESS:
            subject = replace(flow, dst=FlowEnd(hep, flow.dst.address))
        else:
            subject = replace(flow, src=FlowEnd(hep, flow.src.address))
        assert hooks is not None
        path = host_path(judge.evaluator(), hooks, project.inventory, pre=subject, post=subject, side=side,
                         host_traffic=False, default_host=judge.default or "deny")
        result.forward.append((side, hep.name, path))
        if path.verdict == "deny":
            v = result.verdict
            result.verdict = Verdict("deny", v.egress, v.ingress)


def _local(project: Project, end: FlowEnd) -> bool:
    return end.endpoint is not None and project.inventory.enforces(end.endpoint)


def _address_port(text: str, default_port: int | None) -> tuple[Any, int | None]:
    """``ADDR``, ``ADDR:PORT`` or ``[V6]:PORT``."""
    host, port_text = text, None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    try:
        port = default_port if port_text is None else int(port_text)
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(port)
        return ipaddress.ip_address(host), port
    except ValueError:
        raise UnknownEnd(f"{shown(text)} is not ADDRESS[:PORT]", "--pre-dnat") from None


def _explain_flow(project: Project, flow: Flow, judge: _Judge, service_backend: str | None,
                  dst: str) -> Explanation:
    target = service_target(project, flow)
    if target is None:
        if service_backend is not None:
            raise UnknownEnd(f"--service-backend: {dst} is not a Service's ClusterIP or a NodePort")
        return Explanation(flow, judge(flow))
    flows, note = service_backends(project, flow, target)
    if service_backend is not None:
        chosen = resolve_end(project, service_backend, "--service-backend")
        flows = [f for f in flows if (chosen.ip is not None and f.dst.ip == chosen.ip)
                 or (chosen.ip is None and f.dst.endpoint == chosen.endpoint)]
        if not flows:
            backends = ", ".join(str(ip) for ip in target.service.endpoint_ips) or "none"
            raise UnknownEnd(f"--service-backend: {service_backend} is not a backend of Service "
                             f"{target.service.namespace}/{target.service.name} (backends: {backends})")
    backends = [Backend(f, judge(f)) for f in flows]
    if not backends:
        return Explanation(flow, Verdict("deny", None, None), target, [], note)
    # Allowed only when every backend kube-proxy may pick is; else the first that denies speaks.
    speaking = next((b for b in backends if not b.verdict.allowed), backends[0])
    return Explanation(flow, speaking.verdict, target, backends, note)


@dataclass
class Matrix:
    """Reachability among pods (``pods``, ``allowed[i][j]`` from pod i to pod j), or with
    ``groups`` among the identity groups of those pods (``allowed`` over groups)."""

    pods: list[Endpoint]
    protocol: int
    port: int | None | str  # "any": allowed on some port class
    allowed: Any  # list of lists, or a numpy bool array
    groups: list[Any] | None = None  # reachability.Group, with --by identity
    group_json: list[dict[str, Any]] | None = None
    group_text: list[str] | None = None

    def rows(self) -> list[list[bool]]:
        return self.allowed.tolist() if hasattr(self.allowed, "tolist") else self.allowed

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.groups is not None:
            doc["groups"] = self.group_json
        else:
            doc["pods"] = [p.ref for p in self.pods]
        doc.update({"protocol": protocol_name(self.protocol), "port": self.port, "matrix": self.rows()})
        return doc


def matrix_pods(project: Project, namespaces: tuple[str, ...] = (), selector: Any = None) -> list[Endpoint]:
    """The pods a matrix has rows and columns for (sorted by ``ns/name``): host-network pods are
    the node's traffic and are left out; ``namespaces`` and ``selector`` (a ``Selector`` over
    the pods' labels) pick among the rest."""
    from pyclassify.flow import endpoint_labels

    return sorted((p for p in project.inventory.pods() if not p.host_network
                   and (not namespaces or p.namespace in namespaces)
                   and (selector is None or selector.matches(endpoint_labels(p)))), key=lambda p: p.ref)


def matrix(project: Project, protocol: int, port: int | None | str, default: str | None = None,
           engine: str = "native", namespaces: tuple[str, ...] = (), selector: Any = None,
           by: str = "pod") -> Matrix:
    """Reachability among the pods ``matrix_pods`` picks: ``allowed[i][j]`` is traffic from pod
    i to pod j on ``port`` (``"any"``: on some port). ``by="identity"``: among the groups of
    pods policy cannot tell apart, with their pods.

    The native engine answers a representative flow per (group, group, port class) and the
    pods take their group's answer: exact, and at 10k pods a table of a few thousand groups.
    The reference evaluator judges every pod pair (the oracle; one port only)."""
    if by not in ("pod", "identity"):
        raise ValueError("by must be 'pod' or 'identity'")
    pods = matrix_pods(project, namespaces, selector)
    if engine == "reference" or engine not in ENGINES:
        if port == "any" or by != "pod":
            raise ValueError("the reference engine answers one port between pods: use the native engine "
                             "for --port any and --by identity")
        judge = _Judge(project, engine, default)
        allowed = [[judge(Flow(FlowEnd(a), FlowEnd(b), protocol, None, port)).allowed for b in pods] for a in pods]
        return Matrix(pods, protocol, port, allowed)
    import numpy as np

    from pyclassify import reachability as reach
    from pyclassify.engine import NativeEngine

    native = NativeEngine(project.policy_set, project.inventory)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    space = reach.FlowSpace.build([native], [protocol], dport=port)
    groups = reach.endpoint_groups([native], pods, first_address_only=True)
    table, _ = reach.reach_table(native, groups, groups, space, defaults)
    if by == "identity":
        keys = reach.selector_keys([project.policy_set])
        order = sorted(range(len(groups)), key=lambda k: groups[k].endpoints[0].ref)
        groups = [groups[k] for k in order]
        table = table[np.ix_(order, order)]
        return Matrix(pods, protocol, port, table, groups, [reach.group_json(g, keys) for g in groups],
                      [reach.group_text(g, keys) for g in groups])
    where = {id(ep): k for k, g in enumerate(groups) for ep, _ in g.members}
    index = np.array([where[id(p)] for p in pods], np.intp)
    allowed = table[np.ix_(index, index)]
    # A pod of one family to a pod of the other: no shared address family; judged by name as the
    # reference does (a dual-stack cluster's single-stack pods).
    fam = np.array([groups[k].family or 0 for k in index], np.int8)
    mixed = np.argwhere((fam[:, None] != fam[None, :]) & (fam[:, None] != 0) & (fam[None, :] != 0))
    for i, j in mixed:
        ports = [port] if port != "any" else [None] if protocol not in reach.WITH_PORTS else [
            lo for lo, _ in reach.port_ranges(native._engine.port_bounds())]
        allowed[i, j] = any(native.evaluate(Flow(FlowEnd(pods[i]), FlowEnd(pods[j]), protocol, None, p), **defaults).allowed
                            for p in ports)
    return Matrix(pods, protocol, port, allowed)
