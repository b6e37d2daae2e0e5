"""Reachability at cluster size: endpoints grouped into what policy can tell apart, and flows
into the classes the engine's decisions are made of.

A side decision reads an endpoint only through its identity (the labels selectors mention, its
namespace, service account, named ports and profiles) and its address's class (the longest rule,
network-set or node prefix holding it); it reads an outside address only through its class, and
ports only through comparisons with rule boundaries (``rust/core/src/engine/classes.rs``). So the
reachability of 10,000 pods is a table over a few thousand groups and a few hundred flow classes,
exact, and one representative flow per cell answers for the whole cell. ``matrix`` and ``diff``
build on this; the engine's batch ``judge`` evaluates the representatives natively.

A group is made against one or more engines at once (``diff`` passes the old and the new): two
addresses share a group only when every engine puts them in the same identity and class, so one
representative speaks for the group under each engine.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import netaddr
import numpy as np
import numpy.typing as npt

from pyclassify.batch import FLAG_HAS_PORTS, HEADER_DTYPE, SIDE_DTYPE, VERDICT_DTYPE
from pyclassify.engine import HTTP_AWAITS, NativeEngine
from pyclassify.inventory import Endpoint, Inventory, IPAddress
from pyclassify.ir import PROTO_ICMP, PROTO_ICMPV6, EndpointKind, EntityMatch, PolicySet, Rule
from pyclassify.kinds.common import ICMP_PROTOCOLS, K8S_PROTOCOL_NUMBERS, PORT_PROTOCOLS, protocol_name
from pyclassify.reference import service_member
from pyclassify.services import address_bytes

#: The protocols every table shows (those a Kubernetes port names), beside ICMP and the ones rules name.
SHOWN_PROTOCOLS = tuple(K8S_PROTOCOL_NUMBERS.values())
#: A source port for flows when no rule distinguishes source ports (any port would do).
EPHEMERAL = 49152
#: Flows judged per native call: bounds the header and verdict arrays (~110 MB at most).
CHUNK = 1 << 20


# --- groups ------------------------------------------------------------------------------------


@dataclass
class Group:
    """Addresses every engine given judges alike: endpoints' addresses of one identity and
    class, or a region of outside addresses (``cidrs`` minus ``excluded``)."""

    family: int | None  # 4 or 6; None for endpoints without an address of their own
    representative: IPAddress | None
    endpoint: Endpoint | None  # the representative endpoint; None for outside addresses
    members: list[tuple[Endpoint, IPAddress | None]] = field(default_factory=list)
    cidrs: list[str] = field(default_factory=list)  # outside: the prefixes of the region
    excluded: list[str] = field(default_factory=list)  # outside: more specific prefixes carved out

    @property
    def outside(self) -> bool:
        return self.endpoint is None

    @property
    def endpoints(self) -> list[Endpoint]:
        """Distinct endpoints, in member order (a dual-stack pod is in one v4 and one v6 group)."""
        seen: dict[int, Endpoint] = {}
        for ep, _ in self.members:
            seen.setdefault(id(ep), ep)
        return list(seen.values())


def selector_keys(policy_sets: Sequence[PolicySet]) -> set[str]:
    """The endpoint label keys some selector of the policy sets mentions: the labels that make
    an identity, and so the ones that describe a group."""
    keys: set[str] = {k for ps in policy_sets for p in ps.policies for k in p.subject.selector.keys()}
    for rule in _rules(policy_sets):
        for m, _ in _entities(rule):
            for sel in (m.selector, m.not_selector):
                if sel is not None:
                    keys.update(sel.keys())
    return keys


def _rules(policy_sets: Iterable[PolicySet]) -> Iterator[Rule]:
    for ps in policy_sets:
        for p in ps.policies:
            yield from p.ingress
            yield from p.egress
        for prof in ps.profiles:
            yield from prof.ingress
            yield from prof.egress


def _entities(rule: Rule) -> Iterator[tuple[EntityMatch, bool]]:
    for m in rule.sources:
        yield m, True
    for m in rule.destinations:
        yield m, False


def uses_services(policy_sets: Sequence[PolicySet]) -> bool:
    """Whether a rule matches Calico ``services``: membership is read per endpoint, beyond
    identity and class, so groups must then hold it too."""
    return any(m.service is not None for r in _rules(policy_sets) for m, _ in _entities(r))


def _service_key(inventory: Inventory, ep: Endpoint, ip: IPAddress | None) -> frozenset:
    return frozenset(key for key, svc in inventory.services.items() if service_member(svc, ep, ip))


def table_endpoints(inventory: Inventory) -> list[Endpoint]:
    """The endpoints a reachability table has rows for: pods (host-network pods are the node's
    traffic and are left out, as ``matrix`` always did) and host endpoints, by reference."""
    return sorted(
        (
            e
            for e in inventory.endpoints
            if (e.kind is EndpointKind.POD and not e.host_network) or e.kind is EndpointKind.HOST
        ),
        key=lambda e: (e.kind is not EndpointKind.POD, e.ref),
    )


def endpoint_groups(
    engines: Sequence[NativeEngine], endpoints: Iterable[Endpoint], first_address_only: bool = False
) -> list[Group]:
    """``endpoints``' addresses grouped by (family, then identity and class under each engine).

    An address another endpoint owns resolves to that one in a flow, so it is not this
    endpoint's; an endpoint with no address of its own is grouped by identity alone (family
    None) and judged by name. ``first_address_only``: each endpoint's first address only
    (what ``matrix`` judges a pod by)."""
    inventory = engines[0].inventory
    services = uses_services([e.policy_set for e in engines])
    natives = [(e, e._engine) for e in engines]
    groups: dict[tuple, Group] = {}
    for ep in endpoints:
        ids = [e._endpoint_id(ep) for e, _ in natives]
        owned: list[IPAddress | None] = [ip for ip in ep.ips if inventory.owner_of(ip) is ep]
        if first_address_only:
            owned = owned[:1] if ep.ips and owned and owned[0] == ep.ips[0] else []
        for ip in owned or [None]:
            text = None if ip is None else str(ip)
            key: tuple = (
                None if ip is None else ip.version,
                tuple(
                    (n.identity_of(i), -1 if text is None else n.address_class(text)) for (_, n), i in zip(natives, ids)
                ),
            )
            if ip is None:
                key += (ep.ref,)  # judged by name: one endpoint, one group
            if services:
                key += (_service_key(inventory, ep, ip),)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(None if ip is None else ip.version, ip, ep)
            group.members.append((ep, ip))
    return list(groups.values())


def outside_groups(engines: Sequence[NativeEngine], families: Iterable[int] = (4, 6)) -> list[Group]:
    """The outside addresses, in regions every engine classes alike: each prefix any engine
    classes by, less the longer prefixes inside it and the endpoints' addresses, and the rest of
    the address space. Regions with the same classes under every engine are one group."""
    inventory = engines[0].inventory
    prefixes: set[netaddr.IPNetwork] = set()
    for e in engines:
        prefixes.update(netaddr.IPNetwork(p) for p in e._engine.class_prefixes())
    if uses_services([e.policy_set for e in engines]):
        for svc in inventory.services.values():
            prefixes.update(netaddr.IPNetwork(f"{ip}/{ip.max_prefixlen}") for ip in svc.cluster_ips)
    owned = {(ip.version, int(ip)) for ep in inventory.endpoints for ip in ep.ips}
    groups: dict[tuple, Group] = {}
    for family in families:
        root = netaddr.IPNetwork("0.0.0.0/0" if family == 4 else "::/0")
        nets = sorted({root, *(n for n in prefixes if n.version == family)}, key=lambda n: (n.prefixlen, n.value))
        for i, net in enumerate(nets):
            inner = [n for n in nets[i + 1 :] if n.prefixlen > net.prefixlen and n in net]
            region = netaddr.IPSet([net]) - netaddr.IPSet(inner)
            rep = _outside_address(region, owned)
            if rep is None:
                continue  # every address of it is more specific or an endpoint's
            text = str(rep)
            key = (family, tuple((None, e._engine.address_class(text)) for e in engines))
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(family, ipaddress.ip_address(text), None)
            group.cidrs.append(str(net))
            # Only the outermost carved-out prefixes: the inner ones are their own regions.
            outer = [n for n in inner if not any(o != n and n in o for o in inner)]
            group.excluded.extend(str(n) for n in outer)
    return list(groups.values())


def _outside_address(region: netaddr.IPSet, owned: AbstractSet[tuple[int, int]]) -> netaddr.IPAddress | None:
    """An address of the region no endpoint owns (None: there is none), preferring one that is
    not a network's first (0.0.0.0 reads as "no address" to a person). At most one more
    candidate than there are owned addresses is tried in each block of the region."""
    for cidr in region.iter_cidrs():
        start = cidr.first + 1 if cidr.size > 2 else cidr.first
        for value in range(start, min(cidr.last, start + len(owned)) + 1):
            if (cidr.version, value) not in owned:
                return netaddr.IPAddress(value, cidr.version)
        if cidr.first != start and (cidr.version, cidr.first) not in owned:
            return netaddr.IPAddress(cidr.first, cidr.version)
    return None


# --- flow classes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowClass:
    """Flows the engines judge alike: one protocol, and for port protocols a destination port
    range (and a source port range where a rule distinguishes source ports), or one ICMP type
    and code (None: every type or code no rule names)."""

    protocol: int  # -1: every protocol no rule names
    dport: tuple[int, int] | None = None  # inclusive range
    sport: tuple[int, int] | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None
    #: the representative's type/code when ``icmp_type``/``icmp_code`` is None (one no rule names)
    icmp_rep: tuple[int | None, int | None] = (None, None)
    other_protocol: int | None = None  # the representative protocol number when protocol is -1

    @property
    def number(self) -> int:
        return self.other_protocol if self.protocol == -1 else self.protocol  # type: ignore[return-value]

    def protocol_text(self) -> str:
        return "other protocols" if self.protocol == -1 else protocol_name(self.protocol)


def port_ranges(bounds: Iterable[int]) -> list[tuple[int, int]]:
    """The port classes of a set of boundaries, as inclusive ranges covering 0-65535."""
    b = sorted(set(bounds))
    starts = ([0] if not b or b[0] > 0 else []) + b
    return [(s, (starts[i + 1] - 1) if i + 1 < len(starts) else 65535) for i, s in enumerate(starts)]


@dataclass
class FlowSpace:
    """Every class of flow some rule of the engines distinguishes, per address family."""

    classes: dict[int, list[FlowClass]]  # family -> classes

    @staticmethod
    def build(
        engines: Sequence[NativeEngine], protocols: Iterable[int] | None = None, dport: int | None | str = "any"
    ) -> FlowSpace:
        """``protocols`` None: every protocol some rule names, the port protocols, ICMP, and one
        class for the rest. ``dport`` ``"any"``: every port class; an int: that port alone."""
        policy_sets = [e.policy_set for e in engines]
        bounds: set[int] = set()
        for e in engines:
            bounds.update(e._engine.port_bounds())
        ranges = port_ranges(bounds)
        named: set[int] = set()
        icmp: dict[int | None, set[int | None]] = {}
        source_ports = False
        for rule in _rules(policy_sets):
            named.update(rule.protocols or ())
            named.update(rule.not_protocols)
            for m in (rule.icmp, rule.not_icmp):
                if m is not None and m.type is not None:
                    icmp.setdefault(m.type, set()).add(m.code)
            for entity, source in _entities(rule):
                named.update(p.protocol for p in (*entity.ports, *entity.not_ports) if p.protocol is not None)
                source_ports = source_ports or (source and bool(entity.ports or entity.not_ports))
        sports = ranges if source_ports else [(EPHEMERAL, EPHEMERAL)]
        out: dict[int, list[FlowClass]] = {}
        for family in (4, 6):
            icmp_proto = PROTO_ICMP if family == 4 else PROTO_ICMPV6
            if protocols is None:
                chosen = sorted({*SHOWN_PROTOCOLS, icmp_proto, *(n for n in named if n not in ICMP_PROTOCOLS)})
                chosen.append(-1)
            else:
                chosen = list(protocols)
            classes: list[FlowClass] = []
            for proto in chosen:
                if proto in PORT_PROTOCOLS:
                    dranges = ranges if dport == "any" else [(dport, dport)] if isinstance(dport, int) else [None]
                    for d in dranges:
                        for s in sports if d is not None else [None]:
                            classes.append(FlowClass(proto, d, s))
                elif proto in ICMP_PROTOCOLS:
                    other_type = next(t for t in range(256) if t not in icmp)
                    if dport != "any":
                        # One cell for "ICMP, no type given": a type no rule names is judged so.
                        classes.append(FlowClass(proto, icmp_rep=(other_type, 0)))
                        continue
                    for t in sorted(k for k in icmp if k is not None):
                        codes = icmp[t]
                        for c in sorted(c for c in codes if c is not None):
                            classes.append(FlowClass(proto, icmp_type=t, icmp_code=c))
                        other_code = next(c for c in range(256) if c not in codes)
                        classes.append(FlowClass(proto, icmp_type=t, icmp_rep=(t, other_code)))
                    classes.append(FlowClass(proto, icmp_rep=(other_type, 0)))
                elif proto == -1:
                    taken = {*named, *PORT_PROTOCOLS, *ICMP_PROTOCOLS}
                    rep = next(n for n in (47, *range(2, 256)) if n not in taken)  # GRE unless named
                    classes.append(FlowClass(-1, other_protocol=rep))
                else:
                    classes.append(FlowClass(proto))
            out[family] = classes
        return FlowSpace(out)

    def class_of(
        self,
        family: int,
        protocol: int,
        dport: int | None = None,
        sport: int | None = None,
        icmp_type: int | None = None,
        icmp_code: int | None = None,
    ) -> FlowClass | None:
        """The class a flow falls in (the first that holds it, in build order: an ICMP type's
        named codes before its other codes, named types before the other types)."""
        other = None
        for c in self.classes[family]:
            if c.protocol == -1:
                other = c
                continue
            if c.protocol != protocol:
                continue
            if c.dport is not None and (dport is None or not c.dport[0] <= dport <= c.dport[1]):
                continue
            if (
                c.sport is not None
                and c.sport != (EPHEMERAL, EPHEMERAL)
                and (sport is None or not c.sport[0] <= sport <= c.sport[1])
            ):
                continue
            if c.icmp_type is not None and c.icmp_type != icmp_type:
                continue
            if c.icmp_code is not None and c.icmp_code != icmp_code:
                continue
            return c
        known = {c.protocol for c in self.classes[family]}
        return other if protocol not in known else None


# --- judging -----------------------------------------------------------------------------------


def _headers(
    src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], family: int, classes: Sequence[FlowClass]
) -> npt.NDArray[Any]:
    """Headers for every (pair, class): pair-major, class-minor."""
    n_pairs, n_classes = len(src), len(classes)
    h = np.zeros(n_pairs * n_classes, HEADER_DTYPE)
    h["src_addr"] = np.repeat(src, n_classes, axis=0)
    h["dst_addr"] = np.repeat(dst, n_classes, axis=0)
    h["ip_version"] = family
    proto = np.array([c.number for c in classes], np.uint8)
    has_ports = np.array([c.dport is not None for c in classes])
    sport = np.array([c.sport[0] if c.sport else 0 for c in classes], np.uint16)
    dport = np.array([c.dport[0] if c.dport else 0 for c in classes], np.uint16)
    itype = np.array([(c.icmp_type if c.icmp_type is not None else (c.icmp_rep[0] or 0)) for c in classes], np.uint8)
    icode = np.array([(c.icmp_code if c.icmp_code is not None else (c.icmp_rep[1] or 0)) for c in classes], np.uint8)
    h["protocol"] = np.tile(proto, n_pairs)
    h["flags"] = np.tile(np.where(has_ports, FLAG_HAS_PORTS, 0).astype(np.uint8), n_pairs)
    h["sport"] = np.tile(sport, n_pairs)
    h["dport"] = np.tile(dport, n_pairs)
    h["icmp_type"] = np.tile(itype, n_pairs)
    h["icmp_code"] = np.tile(icode, n_pairs)
    return h


def _side_record(raw: Any) -> npt.NDArray[Any]:
    rec = np.zeros((), SIDE_DTYPE)
    if raw is None:
        return rec
    allowed, tier, source, rule, reason, logs, awaits = raw
    rec["present"] = 1
    rec["awaits"] = awaits
    rec["allow"] = allowed
    rec["reason"] = reason
    rec["tier"] = -1 if tier is None else tier
    rec["rule"] = -1 if rule is None else rule
    if source is not None:
        rec["source_kind"] = 1 if source[0] == "policy" else 2
        rec["source"] = source[1]
    else:
        rec["source"] = -1
    rec["logs"] = min(len(logs), 255)
    return rec


def address_rows(groups: Sequence[Group]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    """Each group's representative as 16 header bytes, and whether it has one."""
    raw = np.zeros((len(groups), 16), np.uint8)
    has = np.zeros(len(groups), bool)
    for k, g in enumerate(groups):
        if g.representative is not None:
            raw[k] = np.frombuffer(address_bytes(g.representative), np.uint8)
            has[k] = True
    return raw, has


def judge_pairs(
    engine: NativeEngine,
    src: Sequence[Group],
    dst: Sequence[Group],
    si: npt.NDArray[np.intp],
    di: npt.NDArray[np.intp],
    classes: Sequence[FlowClass],
    family: int | None,
    defaults: dict[str, str],
    records: bool = True,
) -> npt.NDArray[Any]:
    """The flows from ``src[si[k]]`` to ``dst[di[k]]`` of every class, shaped (pairs, classes):
    verdict records (``VERDICT_DTYPE``), or with ``records=False`` only whether each is allowed.
    Pairs where both ends have an address go through the native batch ``judge`` (chunked); an
    endpoint without an address of its own is judged by name."""
    n = len(si)
    out = np.zeros((n, len(classes)), VERDICT_DTYPE if records else bool)
    if not n or not classes:
        return out
    pod_allow = defaults.get("default_pod", "allow") == "allow"
    host_allow = defaults.get("default_host", "deny") == "allow"
    s_raw, s_has = address_rows(src)
    d_raw, d_has = (s_raw, s_has) if dst is src else address_rows(dst)
    addressed = s_has[si] & d_has[di]
    rows = np.flatnonzero(addressed) if family is not None else np.zeros(0, np.intp)
    step = max(1, CHUNK // len(classes))
    if records and len(rows) == n:
        # Every pair has addresses (the usual case): judge straight into the output.
        flat = out.reshape(-1)
        for at in range(0, n, step):
            h = _headers(s_raw[si[at : at + step]], d_raw[di[at : at + step]], family, classes)  # type: ignore[arg-type]
            engine._engine.judge(
                h, flat[at * len(classes) : at * len(classes) + len(h)], pod_allow, host_allow, None, None, False
            )
        return out
    for at in range(0, len(rows), step):
        part = rows[at : at + step]
        h = _headers(s_raw[si[part]], d_raw[di[part]], family, classes)  # type: ignore[arg-type]
        verdicts = np.zeros(len(h), VERDICT_DTYPE)
        engine._engine.judge(h, verdicts, pod_allow, host_allow, None, None, False)
        per_pair = verdicts.reshape(-1, len(classes))
        out[part] = per_pair if records else per_pair["allow"].astype(bool)
    for k in np.flatnonzero(~addressed) if family is not None else range(n):
        for c, fc in enumerate(classes):
            rec = _judge_named(engine, src[si[k]], dst[di[k]], fc, pod_allow, host_allow)
            out[k, c] = rec if records else bool(rec["allow"])
    return out


def _judge_named(
    engine: NativeEngine, src: Group, dst: Group, fc: FlowClass, pod_allow: bool, host_allow: bool
) -> npt.NDArray[Any]:
    ends = []
    for g in (src, dst):
        ep = None if g.endpoint is None else engine._endpoint_id(g.endpoint)
        ends.append((None if g.representative is None else str(g.representative), ep))
    itype = fc.icmp_type if fc.icmp_type is not None else fc.icmp_rep[0]
    icode = fc.icmp_code if fc.icmp_code is not None else fc.icmp_rep[1]
    allowed, egress, ingress, awaits = engine._engine.evaluate(
        ends[0][0],
        ends[0][1],
        ends[1][0],
        ends[1][1],
        fc.number,
        None if fc.sport is None or fc.sport == (EPHEMERAL, EPHEMERAL) else fc.sport[0],
        None if fc.dport is None else fc.dport[0],
        itype,
        icode,
        pod_allow,
        host_allow,
    )
    rec = np.zeros((), VERDICT_DTYPE)
    rec["allow"] = allowed
    rec["http"] = HTTP_AWAITS if awaits else 0
    rec["egress"] = _side_record(egress)
    rec["ingress"] = _side_record(ingress)
    return rec


def pair_families(rows: Sequence[Group], cols: Sequence[Group]) -> npt.NDArray[np.int8]:
    """For each (row, column): the family its flows have (4, 6), 0 when both are judged by
    name, -1 when no flow goes between them (different families, or outside to outside)."""
    fr = np.array([g.family or 0 for g in rows], np.int8)[:, None]
    fc = np.array([g.family or 0 for g in cols], np.int8)[None, :]
    fam = np.where(fr != 0, fr, fc)
    fam = np.where((fr != 0) & (fc != 0) & (fr != fc), -1, fam)
    out_r = np.array([g.outside for g in rows], bool)[:, None]
    out_c = np.array([g.outside for g in cols], bool)[None, :]
    return np.where(out_r & out_c, -1, fam).astype(np.int8)


def reach_table(
    engine: NativeEngine, rows: Sequence[Group], cols: Sequence[Group], space: FlowSpace, defaults: dict[str, str]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Whether each row group may reach each column group by some flow class of ``space``, and
    which cells have flows at all."""
    fam = pair_families(rows, cols)
    allowed = np.zeros(fam.shape, bool)
    for family in (4, 6, 0):
        idx = np.flatnonzero(fam == family)
        if not len(idx):
            continue
        si, di = np.divmod(idx, len(cols))
        classes = space.classes[family or 4]
        got = judge_pairs(engine, rows, cols, si, di, classes, family or None, defaults, records=False)
        allowed.flat[idx] = got.any(axis=1)
    return allowed, fam >= 0


# --- how a person reads a group ----------------------------------------------------------------


def group_labels(group: Group, keys: set[str]) -> dict[str, str]:
    """The labels of ``keys`` every member of the group has, with the same value: what the
    policies see of it (other labels cannot change a verdict)."""
    eps = group.endpoints
    if not eps:
        return {}
    first = eps[0].labels
    return {k: first[k] for k in sorted(keys) if k in first and all(e.labels.get(k) == first[k] for e in eps[1:])}


def group_json(group: Group, keys: set[str]) -> dict[str, Any]:
    if group.outside:
        return {"kind": "outside", "family": group.family, "cidrs": group.cidrs, "except": group.excluded}
    eps = group.endpoints
    namespaces = sorted({e.namespace or "" for e in eps})
    return {
        "kind": eps[0].kind.value,
        "namespace": namespaces[0] if len(namespaces) == 1 else None,
        "labels": group_labels(group, keys),
        "count": len(eps),
        "endpoints": [e.ref for e in eps],
        "family": group.family,
    }


def group_text(group: Group, keys: set[str], families: bool = False) -> str:
    """``namespace payments, pods app=api (12 pods)``; ``outside 203.0.113.0/24``. With
    ``families`` (a dual-stack table, where a pod is in one group per family), the endpoints'
    family is said: ``namespace payments, pods app=api (12 pods: ...), IPv6``."""
    text = _group_text(group, keys)
    if families and not group.outside and group.family is not None:
        text += f", IPv{group.family}"
    return text


def dual_stack(groups: Sequence[Group]) -> bool:
    """Whether endpoint groups of both families are among ``groups`` (their text says which)."""
    return len({g.family for g in groups if not g.outside and g.family is not None}) > 1


def _group_text(group: Group, keys: set[str]) -> str:
    if group.outside:
        text = "outside " + ", ".join(group.cidrs)
        if group.excluded:
            shown = group.excluded[:3]
            more = f" and {len(group.excluded) - 3} more" if len(group.excluded) > 3 else ""
            text += f" (except {', '.join(shown)}{more})"
        return text
    doc = group_json(group, keys)
    labels = ",".join(f"{k}={v}" for k, v in doc["labels"].items())
    count = doc["count"]
    if doc["kind"] == "host":
        what = "host endpoint" + ("s" if count > 1 else "")
        return f"{what} {labels or 'without labels a policy selects'} ({count}: {_sample(doc['endpoints'])})"
    noun = "pod" if count == 1 else "pods"
    where = f"namespace {doc['namespace']}, " if doc["namespace"] is not None else ""
    who = f"{noun} {labels}" if labels else f"{noun} with no label a policy selects"
    return f"{where}{who} ({count} {noun}: {_sample([r.split('/', 1)[-1] for r in doc['endpoints']])})"


def _sample(names: list[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f", … {len(names) - n} more" if len(names) > n else "")
