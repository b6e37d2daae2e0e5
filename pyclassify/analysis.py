"""Offline questions about a project: one flow (``explain``) and all pod pairs (``matrix``).

The CLI formats what these return; the answers come from the reference evaluator.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Any

from pyclassify.documents import shown
from pyclassify.flow import Flow, FlowEnd, HttpRequest, Verdict
from pyclassify.hostpath import HookSets, HostPath, host_path
from pyclassify.inventory import Endpoint, Service, ServicePort
from pyclassify.ir import Direction, EndpointKind
from pyclassify.kinds.common import ICMP_PROTOCOLS, PROTOCOL_NUMBERS, protocol_name
from pyclassify.project import Project
from pyclassify.reference import evaluate
from pyclassify.services import backend_port, node_addresses


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
        raise ValueError(
            f"unknown protocol {shown(text)} (a name like TCP, UDP, SCTP, ICMP, ICMPv6, or 0-255)"
        ) from None
    if not 0 <= value <= 255:
        raise ValueError(f"protocol number {value} is outside 0-255")
    return value


def family_addresses(project: Project, ep: Endpoint) -> dict[int, Any]:
    """An endpoint's own address in each family it has (4, 6: the first it owns of each; an
    address another endpoint owns resolves to that one in a flow, so it is not this one's)."""
    out: dict[int, Any] = {}
    for ip in ep.ips:
        if ip.version not in out and project.inventory.owner_of(ip) is ep:
            out[ip.version] = ip
    return out


def family_ends(project: Project, a: Endpoint, b: Endpoint) -> list[tuple[int | None, FlowEnd, FlowEnd]]:
    """The flows between two endpoints named, one per address family both have (a dual-stack
    pair: IPv4 and IPv6), each end at its own address of that family: ``(family, src, dst)``.
    An endpoint without an address of its own takes the other's families (judged by name on
    its side); two without are one flow judged by name (family None); two whose addresses
    share no family (one IPv4 only, the other IPv6 only) have no flow: none."""
    fa, fb = family_addresses(project, a), family_addresses(project, b)
    if not fa and not fb:
        return [(None, FlowEnd(a), FlowEnd(b))]
    if not fa:
        return [(f, FlowEnd(a), FlowEnd(b, ip)) for f, ip in sorted(fb.items())]
    if not fb:
        return [(f, FlowEnd(a, ip), FlowEnd(b)) for f, ip in sorted(fa.items())]
    shared = sorted(f for f in fa if f in fb)
    return [(f, FlowEnd(a, fa[f]), FlowEnd(b, fb[f])) for f in shared]


def _flow_families(
    project: Project, src: FlowEnd, dst: FlowEnd, src_text: str, dst_text: str
) -> list[tuple[int | None, FlowEnd, FlowEnd]]:
    """The flows ``explain`` judges for two ends as a person gave them: an address keeps its
    family and the endpoint at the other end is taken at its address of that family; two
    endpoints named are judged in each family both have (``family_ends``)."""
    if src.ip is not None and dst.ip is not None:
        if src.ip.version != dst.ip.version:
            raise UnknownEnd(
                f"{shown(src_text)} is IPv{src.ip.version} and {shown(dst_text)} is "
                f"IPv{dst.ip.version}: a flow keeps one address family",
                "--to",
            )
        return [(src.ip.version, src, dst)]
    if src.ip is None and dst.ip is None:
        assert src.endpoint is not None and dst.endpoint is not None
        ends = family_ends(project, src.endpoint, dst.endpoint)
        if not ends:
            have = [
                ", ".join(str(a) for a in family_addresses(project, ep).values()) for ep in (src.endpoint, dst.endpoint)
            ]
            raise UnknownEnd(
                f"{shown(src.endpoint.ref)} ({have[0]}) and {shown(dst.endpoint.ref)} ({have[1]}) "
                "share no address family: no flow runs between them",
                "--to",
            )
        return ends
    given, named, option = (src, dst, "--to") if src.ip is not None else (dst, src, "--from")
    assert given.ip is not None and named.endpoint is not None
    family = given.ip.version
    if not named.endpoint.ips:
        return [(family, src, dst)]  # no address at all: judged by name
    ip = family_addresses(project, named.endpoint).get(family)
    if ip is None:
        addresses = ", ".join(str(a) for a in named.endpoint.ips)
        raise UnknownEnd(
            f"{shown(named.endpoint.ref)} has no IPv{family} address of its own (it has {addresses}), and "
            f"{shown(str(given.ip))} is IPv{family}: a flow keeps one address family",
            option,
        )
    placed = FlowEnd(named.endpoint, ip)
    return [(family, src, placed) if named is dst else (family, placed, dst)]


def resolve_end(project: Project, text: str, option: str | None = None) -> FlowEnd:
    """A flow end from what a person types: ``ns/pod``, a workload, a host endpoint name or an IP.

    An IP that no endpoint owns is an outside address (no policy of its own)."""
    endpoint = project.find_endpoint(text)
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if endpoint is None and ip is None:
        why = project.released.get(text)
        if why is not None:
            raise UnknownEnd(
                f"{shown(text)} is a pod that holds no address ({why}): it is no endpoint, "
                "no packet comes from it or goes to it",
                option,
            )
        raise UnknownEnd(
            f"{shown(text)} is not a pod (ns/name), workload, host endpoint or IP address in the inventory", option
        )
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
        return {
            "namespace": self.service.namespace,
            "name": self.service.name,
            "via": self.via,
            "port": None if self.port is None else self.port.port,
            "node_port": None if self.port is None else self.port.node_port,
        }


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
    #: the address family judged (4, 6; None: judged by name, no address at either end)
    family: int | None = None
    #: two dual-stack endpoints: the explanation of each family, IPv4 first (this one is the
    #: first that denies, else the first; its verdict allows only when every family does)
    families: list[Explanation] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = self._json()
        if self.families:
            doc["families"] = [{"family": e.family, **e._json()} for e in self.families]
        return doc

    def _json(self) -> dict[str, Any]:
        doc = self.verdict.to_json()
        doc["flow"] = flow_json(self.flow)
        doc["family"] = self.family
        if self.staged is not None:
            doc["staged"] = {**self.staged.to_json(), "summary": self.staged.would()}
        if self.host_path is not None:
            doc["host_path"] = self.host_path.to_json()
        if self.forward:
            doc["forward"] = [{"via": name, "direction": d.value, **path.to_json()} for d, name, path in self.forward]
        if self.service is not None:
            doc["service"] = {
                **self.service.to_json(),
                "backends": [b.to_json() for b in self.backends or []],
                "note": self.note,
            }
        return doc


def service_target(project: Project, flow: Flow) -> ServiceTarget | None:
    """The Service a flow's destination address is the virtual address of (kube-proxy would
    DNAT it): a ClusterIP (matched with its port and protocol), or a node's address with a
    NodePort. None when the destination is no Service address (or is an endpoint's own)."""
    ip = flow.dst.ip
    if ip is None or flow.dst.endpoint is not None and flow.dst.endpoint.kind is not EndpointKind.HOST:
        return None
    port_of = lambda svc, want: next(  # noqa: E731
        (p for p in svc.ports if p.protocol == flow.protocol and want(p)), None
    )
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
    if flow.protocol in ICMP_PROTOCOLS:
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
            self.native = (
                NativeEngine(project.policy_set, project.inventory)
                if base is None
                else base.update(project.policy_set, project.inventory)
            )

    def __call__(self, flow: Flow) -> Verdict:
        if self.native is not None:
            return self.native.evaluate(flow, **self.defaults)
        return evaluate(self.project.policy_set, self.project.inventory, flow, **self.defaults)

    def over(self, project: Project) -> _Judge:
        """A judge of ``project`` (the same inventory, another policy set), from this one's engine."""
        return _Judge(project, self.engine, self.default, self.native)

    def evaluator(self) -> Any:
        """``reference.evaluate``'s signature: the reference, or a native engine per policy set
        (this one's for its own set, deltas from it for the others: the host's hooks)."""
        base = self.native
        if base is None:
            return evaluate
        engines: dict[int, Any] = {id(self.project.policy_set): base}

        def native(policy_set: Any, inventory: Any, flow: Flow, **defaults: str) -> Verdict:
            e = engines.get(id(policy_set))
            if e is None:
                e = engines[id(policy_set)] = base.update(policy_set, inventory)
            return e.evaluate(flow, **defaults)

        return native


def explain(
    project: Project,
    src: str,
    dst: str,
    protocol: int,
    dport: int | None,
    sport: int | None = None,
    icmp_type: int | None = None,
    icmp_code: int | None = None,
    default: str | None = None,
    engine: str = "native",
    service_backend: str | None = None,
    pre_dnat: str | None = None,
    request: HttpRequest | None = None,
    via: tuple[tuple[Direction, str], ...] = (),
) -> Explanation:
    """The verdict of one flow. A flow to a Service's ClusterIP (or a NodePort on a node's
    address) is judged as kube-proxy delivers it: once per backend (``service_backend``, an
    address or endpoint, picks one); it is allowed when every backend judged allows it. A flow
    to or from a host endpoint goes through the host's hooks (doNotTrack, preDNAT, normal host
    policy); ``pre_dnat`` (``ADDR[:PORT]``) is where it was going before a DNAT on the host.
    ``request`` is the HTTP request the connection carries (``http`` rules); without it, a
    verdict that depends on one says it awaits it. ``via``: the host routes the flow in
    (ingress) or out (egress) by these host endpoints' interfaces, whose applyOnForward policy
    (and doNotTrack, preDNAT) judges it before the endpoints' own."""
    ends = _flow_families(project, resolve_end(project, src, "--from"), resolve_end(project, dst, "--to"), src, dst)
    judge = _Judge(project, engine, default)
    staged = project.staged()
    staged_judge = None if staged is None else judge.over(staged)
    results = []
    for family, a, b in ends:
        flow = Flow(a, b, protocol, sport, dport, icmp_type, icmp_code, request=request)
        result = _explain_flow(project, flow, judge, service_backend, dst)
        result.family = family
        _through_host(project, flow, result, judge, pre_dnat)
        _forwarded(project, flow, result, judge, via)
        if staged is not None:  # the same flow with the staged policies enforced, beside the real verdict
            assert staged_judge is not None
            result.staged = _explain_flow(staged, flow, staged_judge, service_backend, dst).verdict
        results.append(result)
    if len(results) == 1:
        return results[0]
    # Dual stack: allowed only when every family is; the first family that denies speaks.
    speaking = next((r for r in results if not r.verdict.allowed), results[0])
    return replace(speaking, families=results)


def _through_host(project: Project, flow: Flow, result: Explanation, judge: _Judge, pre_dnat: str | None) -> None:
    """A flow to (or from) a host endpoint, judged through the host's hooks when there is
    doNotTrack or preDNAT policy or a pre-DNAT destination was given: ``result.host_path``, and
    the verdict and host side's decision become the path's."""
    hooks = HookSets(project.policy_set)
    host_end = next(
        (e for e in (flow.dst, flow.src) if e.endpoint is not None and e.endpoint.kind is EndpointKind.HOST), None
    )
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
    path = host_path(
        judge.evaluator(),
        hooks,
        project.inventory,
        pre=pre,
        post=flow,
        side=side,
        host_traffic=True,
        default_host=judge.default or "deny",
    )
    result.host_path = path
    deciding = path.steps[-1].decision
    v = result.verdict
    other = v.egress if inbound else v.ingress
    other_ok = other is None or other.verdict == "allow" or not _local(project, flow.src if inbound else flow.dst)
    verdict = "allow" if path.verdict == "allow" and other_ok else "deny"
    result.verdict = Verdict(verdict, v.egress if inbound else deciding, deciding if inbound else v.ingress)


def _forwarded(
    project: Project, flow: Flow, result: Explanation, judge: _Judge, via: tuple[tuple[Direction, str], ...]
) -> None:
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
        path = host_path(
            judge.evaluator(),
            hooks,
            project.inventory,
            pre=subject,
            post=subject,
            side=side,
            host_traffic=False,
            default_host=judge.default or "deny",
        )
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


def _explain_flow(project: Project, flow: Flow, judge: _Judge, service_backend: str | None, dst: str) -> Explanation:
    target = service_target(project, flow)
    if target is None:
        if service_backend is not None:
            raise UnknownEnd(f"--service-backend: {dst} is not a Service's ClusterIP or a NodePort")
        return Explanation(flow, judge(flow))
    flows, note = service_backends(project, flow, target)
    if service_backend is not None:
        chosen = resolve_end(project, service_backend, "--service-backend")
        flows = [
            f
            for f in flows
            if (chosen.ip is not None and f.dst.ip == chosen.ip)
            or (chosen.ip is None and f.dst.endpoint == chosen.endpoint)
        ]
        if not flows:
            addresses = ", ".join(str(ip) for ip in target.service.endpoint_ips) or "none"
            raise UnknownEnd(
                f"--service-backend: {service_backend} is not a backend of Service "
                f"{target.service.namespace}/{target.service.name} (backends: {addresses})"
            )
    backends = [Backend(f, judge(f)) for f in flows]
    if not backends:
        return Explanation(flow, Verdict("deny", None, None), target, [], note)
    # Allowed only when every backend kube-proxy may pick is; else the first that denies speaks.
    speaking = next((b for b in backends if not b.verdict.allowed), backends[0])
    return Explanation(flow, speaking.verdict, target, backends, note)


@dataclass
class Matrix:
    """Reachability among pods (``pods``, ``allowed[i][j]`` from pod i to pod j), or with
    ``groups`` among the identity groups of those pods (``allowed`` over groups).

    Two pods are judged in each address family both have (a dual-stack pair: IPv4 and IPv6);
    ``allowed`` is true when every family judged allows, ``by_family[f]`` holds family ``f``'s
    verdicts (None where the pair has no flow of that family), and ``differs`` marks the cells
    whose families disagree."""

    pods: list[Endpoint]
    protocol: int
    port: int | None | str  # "any": allowed on some port class
    allowed: Any  # list of lists, or a numpy bool array
    groups: list[Any] | None = None  # reachability.Group, with --by identity
    group_json: list[dict[str, Any]] | None = None
    group_text: list[str] | None = None
    #: family -> (verdicts, judged): bool arrays shaped like ``allowed``
    by_family: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    #: cells without any flow (an IPv4 group and an IPv6 group; an IPv4-only pod and an
    #: IPv6-only pod): null in ``--json``, never counted as allowed
    no_flow: Any = None

    def rows(self) -> list[list[bool]]:
        return self.allowed.tolist() if hasattr(self.allowed, "tolist") else self.allowed

    @property
    def differs(self) -> Any:
        """Cells judged in both families with different verdicts (a bool array)."""
        import numpy as np

        shape = np.shape(self.allowed)
        if len(self.by_family) < 2:
            return np.zeros(shape, bool)
        (v4, j4), (v6, j6) = self.by_family[4], self.by_family[6]
        return j4 & j6 & (v4 != v6)

    def family_rows(self, family: int) -> list[list[bool | None]]:
        verdicts, judged = self.by_family[family]
        return [[bool(v) if j else None for v, j in zip(vr, jr)] for vr, jr in zip(verdicts.tolist(), judged.tolist())]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.groups is not None:
            doc["groups"] = self.group_json
        else:
            doc["pods"] = [p.ref for p in self.pods]
        rows: Any = self.rows()
        if self.no_flow is not None and self.no_flow.any():
            rows = [[None if n else v for v, n in zip(vr, nr)] for vr, nr in zip(rows, self.no_flow.tolist())]
        doc.update({"protocol": protocol_name(self.protocol), "port": self.port, "matrix": rows})
        doc["by_family"] = {str(f): self.family_rows(f) for f in sorted(self.by_family)}
        return doc


def matrix_pods(project: Project, namespaces: tuple[str, ...] = (), selector: Any = None) -> list[Endpoint]:
    """The pods a matrix has rows and columns for (sorted by ``ns/name``): host-network pods are
    the node's traffic and are left out; ``namespaces`` and ``selector`` (a ``Selector`` over
    the pods' labels) pick among the rest."""
    from pyclassify.flow import endpoint_labels

    return sorted(
        (
            p
            for p in project.inventory.pods()
            if not p.host_network
            and (not namespaces or p.namespace in namespaces)
            and (selector is None or selector.matches(endpoint_labels(p)))
        ),
        key=lambda p: p.ref,
    )


def matrix(
    project: Project,
    protocol: int,
    port: int | None | str,
    default: str | None = None,
    engine: str = "native",
    namespaces: tuple[str, ...] = (),
    selector: Any = None,
    by: str = "pod",
) -> Matrix:
    """Reachability among the pods ``matrix_pods`` picks: ``allowed[i][j]`` is traffic from pod
    i to pod j on ``port`` (``"any"``: on some port), in every address family both pods have.
    ``by="identity"``: among the groups of pods policy cannot tell apart, with their pods (a
    dual-stack pod is in one IPv4 and one IPv6 group).

    The native engine answers a representative flow per (group, group, port class) and the
    pods take their group's answer: exact, and at 10k pods a table of a few thousand groups.
    The reference evaluator judges every pod pair (the oracle; one port only)."""
    import numpy as np

    if by not in ("pod", "identity"):
        raise ValueError("by must be 'pod' or 'identity'")
    pods = matrix_pods(project, namespaces, selector)
    n = len(pods)
    if engine == "reference" or engine not in ENGINES:
        if port == "any" or by != "pod":
            raise ValueError(
                "the reference engine answers one port between pods: use the native engine "
                "for --port any and --by identity"
            )
        judge = _Judge(project, engine, default)
        allowed = np.ones((n, n), bool)
        no_flow = np.zeros((n, n), bool)
        by_family = {f: (np.zeros((n, n), bool), np.zeros((n, n), bool)) for f in (4, 6)}
        for i, a in enumerate(pods):
            for j, b in enumerate(pods):
                ends = family_ends(project, a, b)
                if not ends:
                    allowed[i, j], no_flow[i, j] = False, True
                for family, x, y in ends:
                    ok = judge(Flow(x, y, protocol, None, port)).allowed  # type: ignore[arg-type]
                    allowed[i, j] &= ok
                    if family is not None:
                        by_family[family][0][i, j], by_family[family][1][i, j] = ok, True
        return Matrix(pods, protocol, port, allowed.tolist(), by_family=_present(by_family), no_flow=no_flow)

    from pyclassify import reachability as reach
    from pyclassify.engine import NativeEngine

    native = NativeEngine(project.policy_set, project.inventory)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    space = reach.FlowSpace.build([native], [protocol], dport=port)
    groups = reach.endpoint_groups([native], pods)  # every address a pod owns, by family
    table, flows = reach.reach_table(native, groups, groups, space, defaults)
    if by == "identity":
        keys = reach.selector_keys([project.policy_set])
        order = sorted(range(len(groups)), key=lambda k: (groups[k].endpoints[0].ref, groups[k].family or 0))
        groups = [groups[k] for k in order]
        table, flows = table[np.ix_(order, order)], flows[np.ix_(order, order)]
        dual = reach.dual_stack(groups)
        by_family = {}
        fam = np.array([g.family or 0 for g in groups])
        for f in (4, 6):
            judged = flows & ((fam[:, None] == f) | (fam[None, :] == f))
            by_family[f] = (table & judged, judged)
        return Matrix(
            pods,
            protocol,
            port,
            table,
            groups,
            [reach.group_json(g, keys) for g in groups],
            [reach.group_text(g, keys, dual) for g in groups],
            by_family=_present(by_family),
            no_flow=~flows,
        )
    pos = {id(p): i for i, p in enumerate(pods)}
    # Each pod's group in each family (its first address of that family), or by name (0).
    index = {f: np.full(n, -1, np.intp) for f in (0, 4, 6)}
    for k, g in enumerate(groups):
        for ep, ip in g.members:
            f = 0 if ip is None else ip.version
            if index[f][pos[id(ep)]] < 0:
                index[f][pos[id(ep)]] = k
    allowed = np.ones((n, n), bool)
    judged_any = np.zeros((n, n), bool)
    by_family = {}
    for f in (4, 6):
        if not (index[f] >= 0).any():
            continue  # no pod has an address of this family
        # a pod judged by name takes part in every family of the pod at the other end
        rows = np.where(index[f] >= 0, index[f], index[0])
        has = index[f] >= 0
        judged = (rows[:, None] >= 0) & (rows[None, :] >= 0) & (has[:, None] | has[None, :])
        cells = table[np.ix_(np.maximum(rows, 0), np.maximum(rows, 0))] & judged
        allowed &= cells | ~judged
        judged_any |= judged
        by_family[f] = (cells, judged)
    # Both judged by name (no address at either end): their groups' cell.
    named = index[0] >= 0
    both = named[:, None] & named[None, :] & ~judged_any
    if both.any():
        by_name = np.maximum(index[0], 0)
        allowed[both] = table[np.ix_(by_name, by_name)][both]
    # Of different families only (a dual-stack cluster's single-stack pods): no address family
    # in common, so no flow between them.
    no_flow = ~judged_any & ~both
    allowed[no_flow] = False
    return Matrix(pods, protocol, port, allowed, by_family=_present(by_family), no_flow=no_flow)


def _present(by_family: dict[int, tuple[Any, Any]]) -> dict[int, tuple[Any, Any]]:
    """The families some cell was judged in."""
    return {f: v for f, v in by_family.items() if v[1].any()}
