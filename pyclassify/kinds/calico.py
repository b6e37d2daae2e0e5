"""Calico policy kinds: GlobalNetworkPolicy, NetworkPolicy, Tier and Profile into the IR. One
concept, in one module although it is long: libcalico-go's v3 validation of these kinds, whose
rules and entity rules (``_Rule``, ``_Entity``) are validated in the context of their policy.

Both ``projectcalico.org/v3`` (as calicoctl prints them) and the stored CRDs
``crd.projectcalico.org/v1`` (as kubectl prints them) arrive here; their specs are the same.
Validation follows libcalico-go's v3 validator (the messages are its reasons), so a manifest
Calico would refuse is refused here, with every problem of the document reported in one run.

Semantics that matter for evaluation, as felix implements them:

* A rule's entity selectors in a namespaced NetworkPolicy are scoped to the policy's namespace
  as soon as any of selector, notSelector or serviceAccounts is used, unless the rule has a
  namespaceSelector (``all()``: every namespaced entity; ``global()``: only non-namespaced ones).
* ``notSelector`` is not scoped and not part of that positive condition: felix renders it as
  "address not in the IP set of everything it matches" (pods, host endpoints, network sets of
  any namespace). So in a GlobalNetworkPolicy a notSelector-only entity matches outside
  addresses; in a namespaced one the namespace scoping still asks for something of its namespace.
* A rule's nets fix its IP family: felix does not render a rule for the other family at all,
  so ``notNets: [10.0.0.0/8]`` never matches IPv6 traffic.
* ``domains`` match the addresses DNS answers taught for those names (``Inventory.domains``),
  while the answer's TTL lasts. ``http`` (ingress Allow rules only) matches the connection's
  HTTP requests, read off its payload without a proxy (``Rule.http``, ``Flow.request``).
* doNotTrack / preDNAT policies only ever apply to host endpoints.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pyclassify.documents import Document, FieldPath, Problems, format_path
from pyclassify.ir import (
    DEFAULT_TIER_ORDER,
    KUBE_ADMIN_ORDER,
    KUBE_BASELINE_ORDER,
    PROTO_ICMP,
    PROTO_ICMPV6,
    PROTO_TCP,
    TIER_DEFAULT,
    TIER_KUBE_ADMIN,
    TIER_KUBE_BASELINE,
    Action,
    Direction,
    EndpointKind,
    EntityMatch,
    HttpMatch,
    IcmpMatch,
    IPNetwork,
    NamedPort,
    Policy,
    PortMatch,
    PortRange,
    Profile,
    Rule,
    ServiceRef,
    SourceRef,
    Subject,
    Tier,
)
from pyclassify.kinds.common import (
    ICMP_PROTOCOLS,
    K8S_PROTOCOL_NUMBERS,
    PROTOCOL_NAMES,
    PROTOCOL_NUMBERS,
    calico_selector,
    check_keys,
    expect_dict,
    expect_list,
    is_int,
    port_name_error,
)
from pyclassify.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from pyclassify.selector import Selector

# --- names ------------------------------------------------------------------------------------

_LABEL = DNS1123_LABEL
_SUBDOMAIN = DNS1123_SUBDOMAIN
_TIER_NAME = re.compile(_LABEL)  # these are used with fullmatch: a "$" would let a trailing newline in
_GNP_NAME = re.compile(rf"({_LABEL}\.)?{_LABEL}")
_NP_NAME = re.compile(rf"(({_LABEL})(\.{_LABEL})?|((?:knp|ossg)\.default\.({_SUBDOMAIN})))")
_MAX_NAME = 253  # DNS-1123 subdomain
_MAX_TIER_NAME = 63  # tier names must fit in a label value

# Fixed orders of the tiers Calico creates itself (libcalico-go api.*TierOrder).
_BUILTIN_TIER_ORDERS = {
    TIER_DEFAULT: DEFAULT_TIER_ORDER,
    TIER_KUBE_ADMIN: KUBE_ADMIN_ORDER,
    TIER_KUBE_BASELINE: KUBE_BASELINE_ORDER,
}

# --- field sets (anything else is an unknown field, as strict decoding rejects it) ------------

_POLICY_COMMON = {
    "order",
    "tier",
    "selector",
    "serviceAccountSelector",
    "types",
    "ingress",
    "egress",
    "performanceHints",
}
_GNP_SPEC = _POLICY_COMMON | {"namespaceSelector", "doNotTrack", "preDNAT", "applyOnForward"}
_NP_SPEC = _POLICY_COMMON
_PROFILE_SPEC = {"ingress", "egress", "labelsToApply"}
_TIER_SPEC = {"order", "defaultAction"}
_RULE = {
    "metadata",
    "action",
    "protocol",
    "notProtocol",
    "icmp",
    "notICMP",
    "ipVersion",
    "source",
    "destination",
    "http",
}
_ENTITY = {
    "nets",
    "notNets",
    "selector",
    "notSelector",
    "namespaceSelector",
    "ports",
    "notPorts",
    "serviceAccounts",
    "services",
    "domains",
}
_ICMP = {"type", "code"}
_HTTP = {"methods", "paths"}
_HTTP_PATH = {"exact", "prefix"}
_SERVICE_ACCOUNTS = {"names", "selector"}
_SERVICES = {"name", "namespace"}

_ACTIONS = {a.value: a for a in (Action.ALLOW, Action.DENY, Action.LOG, Action.PASS)}
_TYPES = {"Ingress": Direction.INGRESS, "Egress": Direction.EGRESS}
_PERFORMANCE_HINTS = {"AssumeNeededOnEveryNode"}
# Calico's v3 validator spells protocol names exactly as the table does.
_PROTOCOL_SPELLINGS = tuple(PROTOCOL_NAMES.values())
# numorstring.Protocol.SupportsPorts: only these carry ports in Calico rules (Kubernetes' three,
# not UDPLite, although its packets carry ports).
_PORT_PROTOCOLS = frozenset(K8S_PROTOCOL_NUMBERS.values())

_PORT_RANGE = re.compile(r"(\d+):(\d+)")
_DNS_LABEL = re.compile(DNS1123_LABEL, re.IGNORECASE)

_GLOBAL = "global()"
_GLOBAL_ONLY_IN_NS_SELECTOR = f"{_GLOBAL} can only be used in an EntityRule namespaceSelector"
_PORTS_NEED_PROTOCOL = "rules that specify ports must set protocol to TCP or UDP or SCTP"


# --- the public normalizers (registered in pyclassify.kinds) ------------------------------------


def normalize_gnp(doc: Document, problems: Problems) -> list[Policy]:
    """GlobalNetworkPolicy: cluster-wide, applies to pods and host endpoints."""
    return _normalize_policy(doc, problems, namespace=None)


def normalize_calico_np(doc: Document, problems: Problems) -> list[Policy]:
    """Calico NetworkPolicy: namespaced; its subject and (unscoped) rule selectors stay in it."""
    # kubectl and calicoctl put an object without a namespace into the default namespace.
    return _normalize_policy(doc, problems, namespace=doc.namespace or "default")


def normalize_tier(doc: Document, problems: Problems) -> list[Tier]:
    before = len(problems.errors)
    name = doc.name
    if not name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    else:
        if len(name) > _MAX_TIER_NAME:
            problems.error(doc, ("metadata", "name"), f"name is too long by {len(name) - _MAX_TIER_NAME} bytes")
        if not _TIER_NAME.fullmatch(name):
            problems.error(
                doc,
                ("metadata", "name"),
                f"name must consist of lower case alphanumeric characters or '-' (regex: {_LABEL})",
            )
    spec = expect_dict(doc, problems, ("spec",), doc.obj.get("spec"))
    order: float | None = None
    action = Action.DENY
    if spec is not None:
        check_keys(doc, problems, ("spec",), spec, _TIER_SPEC)
        order = _order(doc, problems, ("spec", "order"), spec.get("order"))
        fixed = _BUILTIN_TIER_ORDERS.get(name)
        if fixed is not None and order != fixed:
            problems.error(doc, ("spec", "order"), f"{name} tier order must be {fixed:g}")
        raw = spec.get("defaultAction")
        if raw is not None:
            if raw == "Deny":
                action = Action.DENY
            elif raw == "Pass":
                action = Action.PASS
            else:
                problems.error(
                    doc, ("spec", "defaultAction"), f'Unsupported value: {raw!r}: supported values: "Deny", "Pass"'
                )
    if len(problems.errors) > before:
        return []
    return [Tier(name, order, action)]


def normalize_profile(doc: Document, problems: Problems) -> list[Profile]:
    """Profile: rules applied after every tier to the endpoints that carry it; rules are global."""
    before = len(problems.errors)
    if not doc.name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    spec = expect_dict(doc, problems, ("spec",), doc.obj.get("spec"))
    if spec is None:
        return []
    check_keys(doc, problems, ("spec",), spec, _PROFILE_SPEC)
    ingress = _rules(doc, problems, Direction.INGRESS, spec.get("ingress"), None)
    egress = _rules(doc, problems, Direction.EGRESS, spec.get("egress"), None)
    labels = _labels_to_apply(doc, problems, spec.get("labelsToApply"))
    if len(problems.errors) > before:
        return []
    return [Profile(doc.name, ingress, egress, labels, SourceRef(doc.file, doc.line))]


# --- policies -----------------------------------------------------------------------------------


def _normalize_policy(doc: Document, problems: Problems, namespace: str | None) -> list[Policy]:
    before = len(problems.errors)
    is_global = namespace is None
    _policy_name(doc, problems, is_global)
    spec = expect_dict(doc, problems, ("spec",), doc.obj.get("spec"))
    if spec is None:
        return []
    check_keys(doc, problems, ("spec",), spec, _GNP_SPEC if is_global else _NP_SPEC)

    order = _order(doc, problems, ("spec", "order"), spec.get("order"))
    tier = _tier_ref(doc, problems, spec.get("tier"))
    subject = _subject(doc, problems, spec, namespace)
    _performance_hints(doc, problems, spec.get("performanceHints"))

    # Host-endpoint options exist on GlobalNetworkPolicy only (check_keys refused them above).
    host_spec = spec if is_global else {}
    do_not_track = _bool(doc, problems, ("spec", "doNotTrack"), host_spec.get("doNotTrack"))
    pre_dnat = _bool(doc, problems, ("spec", "preDNAT"), host_spec.get("preDNAT"))
    apply_on_forward = _bool(doc, problems, ("spec", "applyOnForward"), host_spec.get("applyOnForward"))

    ingress = _rules(doc, problems, Direction.INGRESS, spec.get("ingress"), namespace)
    egress = _rules(doc, problems, Direction.EGRESS, spec.get("egress"), namespace)
    types = _types(doc, problems, spec, bool(spec.get("ingress")), bool(spec.get("egress")))

    if do_not_track and pre_dnat:
        problems.error(doc, ("spec", "preDNAT"), "PreDNAT and DoNotTrack cannot both be true, for a given PolicySpec")
    if pre_dnat and spec.get("egress"):
        problems.error(doc, ("spec", "egress"), "PreDNAT PolicySpec cannot have any Egress rules")
    if pre_dnat and isinstance(spec.get("types"), list) and "Egress" in spec["types"]:
        problems.error(doc, ("spec", "types"), "PreDNAT PolicySpec cannot have 'egress' Type")
    if (do_not_track or pre_dnat) and not apply_on_forward:
        problems.error(
            doc,
            ("spec", "applyOnForward"),
            "ApplyOnForward must be true if either PreDNAT or DoNotTrack is true, for a given PolicySpec",
        )
    if (do_not_track or pre_dnat) and subject is not None:
        # felix programs untracked and pre-DNAT policy only for host endpoints.
        subject = Subject(
            subject.selector,
            frozenset({EndpointKind.HOST}),
            subject.namespace,
            subject.namespace_selector,
            subject.service_account_selector,
        )

    if len(problems.errors) > before or subject is None or types is None:
        return []
    return [
        Policy(
            kind=doc.kind,
            namespace=namespace,
            name=doc.name,
            tier=tier,
            order=order,
            subject=subject,
            types=types,
            ingress=ingress,
            egress=egress,
            source=SourceRef(doc.file, doc.line),
            do_not_track=do_not_track,
            pre_dnat=pre_dnat,
            apply_on_forward=apply_on_forward,
        )
    ]


def _policy_name(doc: Document, problems: Problems, is_global: bool) -> None:
    name = doc.name
    path = ("metadata", "name")
    if not name:
        problems.error(doc, path, "Required value: name is required")
        return
    if len(name) > _MAX_NAME:
        problems.error(doc, path, f"name is too long by {len(name) - _MAX_NAME} bytes")
    if not (_GNP_NAME if is_global else _NP_NAME).fullmatch(name):
        problems.error(doc, path, f"name must consist of lower case alphanumeric characters or '-' (regex: {_LABEL})")
        return
    # Calico before 3.30 required `<tier>.` names for policies of other tiers; current Calico
    # accepts any name. A prefix naming another tier is still almost surely a mistake.
    raw_spec = doc.obj.get("spec")
    spec = raw_spec if isinstance(raw_spec, dict) else {}
    tier = spec.get("tier") or TIER_DEFAULT
    prefix, dot, _ = name.partition(".")
    if dot and isinstance(tier, str) and prefix != tier and prefix not in ("knp", "ossg"):
        problems.warning(
            doc,
            path,
            f"name prefix {prefix!r} differs from the policy's tier {tier!r} "
            f"(Calico before 3.30 requires names of the form <tier>.<name>)",
        )


def _order(doc: Document, problems: Problems, path: FieldPath, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.error(doc, path, f"must be a number, got {value!r}")
        return None
    return float(value)


def _tier_ref(doc: Document, problems: Problems, value: Any) -> str:
    if value is None or value == "":
        return TIER_DEFAULT
    if not isinstance(value, str) or not _TIER_NAME.fullmatch(value) or len(value) > _MAX_TIER_NAME:
        problems.error(doc, ("spec", "tier"), f"invalid tier name {value!r}: must match {_LABEL}")
        return TIER_DEFAULT
    return value


def _bool(doc: Document, problems: Problems, path: FieldPath, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        problems.error(doc, path, f"must be true or false, got {value!r}")
        return False
    return value


def _performance_hints(doc: Document, problems: Problems, value: Any) -> None:
    for i, hint in enumerate(expect_list(doc, problems, ("spec", "performanceHints"), value)):
        if hint not in _PERFORMANCE_HINTS:
            problems.error(
                doc,
                ("spec", "performanceHints", i),
                f'Unsupported value: {hint!r}: supported values: "AssumeNeededOnEveryNode"',
            )


def _types(
    doc: Document, problems: Problems, spec: dict, has_ingress: bool, has_egress: bool
) -> frozenset[Direction] | None:
    raw = spec.get("types")
    if raw is None or raw == []:
        # Calico's defaulting: Ingress when there are ingress rules or no rules at all,
        # Egress when there are egress rules.
        out = set()
        if has_ingress or not has_egress:
            out.add(Direction.INGRESS)
        if has_egress:
            out.add(Direction.EGRESS)
        return frozenset(out)
    if not isinstance(raw, list):
        problems.error(doc, ("spec", "types"), "must be a list of Ingress and/or Egress")
        return None
    seen: set[Direction] = set()
    ok = True
    for i, t in enumerate(raw):
        d = _TYPES.get(t) if isinstance(t, str) else None
        if d is None:
            problems.error(
                doc, ("spec", "types", i), f'Unsupported value: {t!r}: supported values: "Ingress", "Egress"'
            )
            ok = False
        elif d in seen:
            problems.error(doc, ("spec", "types", i), f"'{t}' type specified more than once")
            ok = False
        else:
            seen.add(d)
    return frozenset(seen) if ok else None


def _subject(doc: Document, problems: Problems, spec: dict, namespace: str | None) -> Subject | None:
    ok = True
    selector: Selector | None = Selector.all()
    if spec.get("selector") not in (None, ""):
        selector = _subject_selector(doc, problems, ("spec", "selector"), spec["selector"])
        ok = selector is not None
    sa_selector = None
    if spec.get("serviceAccountSelector") not in (None, ""):
        sa_selector = _subject_selector(
            doc, problems, ("spec", "serviceAccountSelector"), spec["serviceAccountSelector"]
        )
        ok = ok and sa_selector is not None
    if namespace is not None:
        if ok and selector is not None:  # (selector None has made ok False)
            return Subject(selector, frozenset({EndpointKind.POD}), namespace, None, sa_selector)
        return None
    kinds = frozenset({EndpointKind.POD, EndpointKind.HOST})
    ns_selector = None
    if spec.get("namespaceSelector") not in (None, ""):
        ns_selector = _subject_selector(doc, problems, ("spec", "namespaceSelector"), spec["namespaceSelector"])
        if ns_selector is None:
            return None
        if ns_selector.is_all:
            # Calico turns a namespaceSelector all() into has(projectcalico.org/namespace):
            # every namespaced endpoint, so no host endpoint.
            kinds = frozenset({EndpointKind.POD})
    if not ok or selector is None:
        return None
    return Subject(selector, kinds, None, ns_selector, sa_selector)


def _subject_selector(doc: Document, problems: Problems, path: FieldPath, text: Any) -> Selector | None:
    if isinstance(text, str) and _GLOBAL in text:
        problems.error(doc, path, _GLOBAL_ONLY_IN_NS_SELECTOR)
        return None
    return calico_selector(doc, problems, path, text)


def _labels_to_apply(doc: Document, problems: Problems, value: Any) -> tuple[tuple[str, str], ...]:
    labels = expect_dict(doc, problems, ("spec", "labelsToApply"), value)
    out = []
    for k, v in (labels or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            problems.error(doc, ("spec", "labelsToApply", str(k)), "label keys and values must be strings")
            continue
        out.append((k, v))
    return tuple(sorted(out))


# --- rules --------------------------------------------------------------------------------------


def _rules(
    doc: Document, problems: Problems, direction: Direction, value: Any, namespace: str | None
) -> tuple[Rule, ...]:
    key = "ingress" if direction is Direction.INGRESS else "egress"
    out = []
    for i, raw in enumerate(expect_list(doc, problems, ("spec", key), value)):
        rule = _Rule(doc, problems, ("spec", key, i), direction, namespace, i).build(raw)
        if rule is not None:
            out.append(rule)
    return tuple(out)


class _Rule:
    """One Calico Rule: validated field by field, then built into an IR Rule."""

    def __init__(
        self,
        doc: Document,
        problems: Problems,
        path: FieldPath,
        direction: Direction,
        namespace: str | None,
        index: int,
    ) -> None:
        self.doc = doc
        self.problems = problems
        self.path = path
        self.direction = direction
        self.namespace = namespace
        self.index = index
        self.ok = True

    def error(self, path: FieldPath, message: str) -> None:
        self.problems.error(self.doc, path, message)
        self.ok = False

    def build(self, raw: Any) -> Rule | None:
        path = self.path
        if not isinstance(raw, dict):
            self.error(path, "must be an object (a Rule)")
            return None
        check_keys(self.doc, self.problems, path, raw, _RULE)
        if any(k not in _RULE for k in raw):
            self.ok = False

        action = None
        if "action" not in raw:
            self.error(path + ("action",), "Required value: action is required")
        else:
            action = _ACTIONS.get(raw["action"]) if isinstance(raw["action"], str) else None
            if action is None:
                self.error(
                    path + ("action",),
                    f'Unsupported value: {raw["action"]!r}: supported values: "Allow", "Deny", "Log", "Pass"',
                )
        self._metadata(raw.get("metadata"))

        protocol = self._protocol("protocol", raw.get("protocol"))
        not_protocol = self._protocol("notProtocol", raw.get("notProtocol"))
        ip_version = self._ip_version(raw.get("ipVersion"))
        icmp = self._icmp("icmp", raw.get("icmp"))
        not_icmp = self._icmp("notICMP", raw.get("notICMP"))

        bad_protocol = raw.get("protocol") is not None and protocol is None
        if icmp is not None and protocol not in ICMP_PROTOCOLS and not bad_protocol:
            self.error(path + ("icmp",), "rules that specify ICMP fields must set protocol to ICMP")
        if ip_version is not None:
            if PROTO_ICMP in (protocol, not_protocol) and ip_version != 4:
                self.error(path + ("ipVersion",), "must set ipversion to '4' with protocol icmp")
            if PROTO_ICMPV6 in (protocol, not_protocol) and ip_version != 6:
                self.error(path + ("ipVersion",), "must set ipversion to '6' with protocol icmpv6")

        http = self._http(raw.get("http"), protocol, action)

        source = self._entity("source", raw.get("source"), protocol, action, bad_protocol)
        destination = self._entity("destination", raw.get("destination"), protocol, action, bad_protocol)
        family = self._check_families(ip_version, source, destination)

        if not self.ok or action is None:
            return None
        src_match = source.match() if source else None
        dst_match = destination.match() if destination else None
        return Rule(
            action=action,
            index=self.index,
            ip_version=ip_version if ip_version is not None else family,
            protocols=frozenset({protocol}) if protocol is not None else None,
            not_protocols=frozenset({not_protocol}) if not_protocol is not None else frozenset(),
            icmp=icmp,
            not_icmp=not_icmp,
            sources=(src_match,) if src_match is not None else (),
            destinations=(dst_match,) if dst_match is not None else (),
            http=http,
            path=format_path(path),
        )

    # -- scalar fields

    def _metadata(self, value: Any) -> None:
        if value is None:
            return
        path = self.path + ("metadata",)
        if not isinstance(value, dict):
            self.error(path, "must be an object with annotations")
            return
        check_keys(self.doc, self.problems, path, value, {"annotations"})
        if any(k != "annotations" for k in value):
            self.ok = False
        annotations = value.get("annotations")
        if annotations is not None and (
            not isinstance(annotations, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items())
        ):
            self.error(path + ("annotations",), "must be a map of string keys to string values")

    def _protocol(self, key: str, value: Any) -> int | None:
        if value is None:
            return None
        path = self.path + (key,)
        if isinstance(value, str) and value.isdigit():
            value = int(value)  # numorstring reads a digit string as the number
        if is_int(value):
            if not 1 <= value <= 255:
                self.error(path, f"protocol number invalid: {value} (must be 1-255)")
                return None
            return value
        if isinstance(value, str) and value in _PROTOCOL_SPELLINGS:
            return PROTOCOL_NUMBERS[value.upper()]
        self.error(path, f"protocol name invalid: {value!r} (supported: {', '.join(_PROTOCOL_SPELLINGS)} or 1-255)")
        return None

    def _ip_version(self, value: Any) -> int | None:
        if value is None:
            return None
        if value not in (4, 6) or isinstance(value, bool):
            self.error(self.path + ("ipVersion",), f"Unsupported value: {value!r}: supported values: 4, 6")
            return None
        return value

    def _icmp(self, key: str, value: Any) -> IcmpMatch | None:
        if value is None:
            return None
        path = self.path + (key,)
        if not isinstance(value, dict):
            self.error(path, "must be an object with type and code")
            return None
        check_keys(self.doc, self.problems, path, value, _ICMP)
        if any(k not in _ICMP for k in value):
            self.ok = False
        icmp_type = self._bounded(path + ("type",), value.get("type"), 254)
        code = self._bounded(path + ("code",), value.get("code"), 255)
        if value.get("code") is not None and value.get("type") is None:
            # A kernel limitation: a code is only matched together with a type.
            self.error(path + ("code",), "ICMP code specified without an ICMP type")
        return IcmpMatch(icmp_type, code)

    def _bounded(self, path: FieldPath, value: Any, high: int) -> int | None:
        if value is None:
            return None
        if not is_int(value) or not 0 <= value <= high:
            self.error(path, f"Invalid value: {value!r}: must be an integer between 0 and {high}")
            return None
        return value

    def _http(self, value: Any, protocol: int | None, action: Action | None) -> HttpMatch | None:
        """Validates an HTTPMatch (None if absent)."""
        if value is None:
            return None
        path = self.path + ("http",)
        if not isinstance(value, dict):
            self.error(path, "must be an object with methods and paths")
            return None
        check_keys(self.doc, self.problems, path, value, _HTTP)
        if any(k not in _HTTP for k in value):
            self.ok = False
        if self.direction is Direction.EGRESS:
            self.error(path, "not allowed in egress rules")
        if action is not None and action is not Action.ALLOW:
            self.error(path, "only valid for Allow rules")
        if protocol is not None and protocol != PROTO_TCP:
            self.error(self.path + ("protocol",), "rules that specify HTTP fields must set protocol to TCP or empty")
        methods = expect_list(self.doc, self.problems, path + ("methods",), value.get("methods"))
        if not all(isinstance(m, str) for m in methods):
            self.error(path + ("methods",), "methods must be strings")
        elif len(set(methods)) != len(methods):
            self.error(path + ("methods",), f"Invalid methods (duplicates): {methods}")
        paths: list[tuple[str, str]] = []
        for i, p in enumerate(expect_list(self.doc, self.problems, path + ("paths",), value.get("paths"))):
            ppath = path + ("paths", i)
            if not isinstance(p, dict):
                self.error(ppath, "must be an object with exact or prefix")
                continue
            check_keys(self.doc, self.problems, ppath, p, _HTTP_PATH)
            if p.get("exact") and p.get("prefix"):
                self.error(ppath, "Invalid path match. Both 'exact' and 'prefix' are set")
                continue
            v = p.get("exact") or p.get("prefix")
            if not v:
                self.error(ppath, "Invalid path match. Either 'exact' or 'prefix' must be set")
            elif not isinstance(v, str) or not v.startswith("/") or any(c in v for c in "? #"):
                self.error(ppath, f"Invalid path {v}. (must start with `/` and not contain `?` or `#`")
            else:
                paths.append(("exact" if p.get("exact") else "prefix", v))
        return HttpMatch(tuple(m for m in methods if isinstance(m, str)), tuple(paths))

    # -- entities

    def _entity(
        self, key: str, value: Any, protocol: int | None, action: Action | None, bad_protocol: bool
    ) -> _Entity | None:
        if value is None:
            return None
        path = self.path + (key,)
        if not isinstance(value, dict):
            self.error(path, "must be an object (an EntityRule)")
            return None
        entity = _Entity(self, path, key == "source", protocol, bad_protocol)
        entity.parse(value, action)
        return entity

    def _check_families(self, ip_version: int | None, *entities: _Entity | None) -> int | None:
        """Every nets/notNets list of the rule must be of one family, and of ipVersion's."""
        seen: set[int] = set()
        for entity in entities:
            if entity is None:
                continue
            for key, nets in (("nets", entity.nets), ("notNets", entity.not_nets)):
                fams = {n.version for n in nets}
                if not fams:
                    continue
                path = entity.path + (key,)
                if ip_version is not None and fams != {ip_version}:
                    self.error(path, "rule IP version doesn't match CIDR version")
                if len(fams | seen) > 1:
                    self.error(path, "rule contains both IPv4 and IPv6 CIDRs")
                seen |= fams
        return next(iter(seen)) if len(seen) == 1 else None


class _Entity:
    """One EntityRule (source or destination) of a rule."""

    def __init__(
        self, rule: _Rule, path: FieldPath, is_source: bool, protocol: int | None, bad_protocol: bool = False
    ) -> None:
        self.rule = rule
        self.bad_protocol = bad_protocol  # already reported: no follow-on port errors
        self.path = path
        self.is_source = is_source
        self.protocol = protocol
        self.nets: tuple[IPNetwork, ...] = ()
        self.not_nets: tuple[IPNetwork, ...] = ()
        self.selector: Selector | None = None
        self.not_selector: Selector | None = None
        self.ns_selector: Selector | None = None
        self.ports: tuple[PortMatch, ...] = ()
        self.not_ports: tuple[PortMatch, ...] = ()
        self.sa_names: frozenset[str] | None = None
        self.sa_selector: Selector | None = None
        self.service: ServiceRef | None = None
        self.domains: tuple[str, ...] = ()
        self.raw: dict = {}

    def error(self, path: FieldPath, message: str) -> None:
        self.rule.error(path, message)

    def parse(self, raw: dict, action: Action | None) -> None:
        rule, path = self.rule, self.path
        self.raw = raw
        check_keys(rule.doc, rule.problems, path, raw, _ENTITY)
        if any(k not in _ENTITY for k in raw):
            rule.ok = False
        self.nets = self._nets("nets", raw.get("nets"))
        self.not_nets = self._nets("notNets", raw.get("notNets"))

        if raw.get("selector") not in (None, ""):
            text = raw["selector"]
            if isinstance(text, str) and _GLOBAL in text:
                self.error(path + ("selector",), _GLOBAL_ONLY_IN_NS_SELECTOR)
            else:
                self.selector = self._selector("selector", text)
        if raw.get("notSelector") not in (None, ""):
            text = raw["notSelector"]
            if isinstance(text, str) and _GLOBAL in text:
                self.error(path + ("notSelector",), _GLOBAL_ONLY_IN_NS_SELECTOR)
            else:
                self.not_selector = self._selector("notSelector", text)
        if raw.get("namespaceSelector") not in (None, ""):
            self.ns_selector = self._selector("namespaceSelector", raw["namespaceSelector"])
            if self.ns_selector is not None and self.ns_selector.contains_global and not self.ns_selector.is_global:
                self.error(path + ("namespaceSelector",), f"{_GLOBAL} cannot be combined with other selectors")

        self.ports = self._ports("ports", raw.get("ports"))
        self.not_ports = self._ports("notPorts", raw.get("notPorts"))
        if (raw.get("ports") or raw.get("notPorts")) and self.protocol not in _PORT_PROTOCOLS and not self.bad_protocol:
            key = "ports" if raw.get("ports") else "notPorts"
            self.error(path + (key,), _PORTS_NEED_PROTOCOL)

        self._service_accounts(raw.get("serviceAccounts"))
        self._services(raw.get("services"))
        self._domains(raw.get("domains"), action)

    # -- fields

    def _nets(self, key: str, value: Any) -> tuple[IPNetwork, ...]:
        out = []
        for i, text in enumerate(expect_list(self.rule.doc, self.rule.problems, self.path + (key,), value)):
            path = self.path + (key, i)
            if not isinstance(text, str) or "/" not in text:
                self.error(path, f"invalid CIDR {text!r}: must be address/prefix-length")
                continue
            try:
                out.append(ipaddress.ip_network(text.strip(), strict=True))
            except ValueError as e:
                self.error(
                    path, f"invalid CIDR {text!r}: " + ("host bits must be zero" if "host bits" in str(e) else str(e))
                )
        return tuple(out)

    def _selector(self, key: str, text: Any) -> Selector | None:
        sel = calico_selector(self.rule.doc, self.rule.problems, self.path + (key,), text)
        if sel is None:
            self.rule.ok = False
        return sel

    def _ports(self, key: str, value: Any) -> tuple[PortMatch, ...]:
        out = []
        for i, item in enumerate(expect_list(self.rule.doc, self.rule.problems, self.path + (key,), value)):
            port = self._port(self.path + (key, i), item)
            if port is not None:
                out.append(PortMatch(self.protocol, port))
        return tuple(out)

    def _port(self, path: FieldPath, item: Any) -> PortRange | NamedPort | None:
        """A Calico port: a number, ``"lo:hi"``, or a named port (as numorstring.Port reads it)."""
        if isinstance(item, str) and item.isdigit():
            item = int(item)
        if is_int(item):
            if not 1 <= item <= 65535:
                self.error(path, "port range invalid, port number must be between 1 and 65535")
                return None
            return PortRange(item, item)
        if not isinstance(item, str) or not item:
            self.error(path, f'invalid port {item!r}: must be a number, "min:max" or a port name')
            return None
        m = _PORT_RANGE.fullmatch(item)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if not (1 <= lo <= 65535 and 1 <= hi <= 65535):
                self.error(path, "port range invalid, port number must be between 1 and 65535")
                return None
            if lo > hi:
                self.error(path, "port range invalid")
                return None
            return PortRange(lo, hi)
        why = port_name_error(item)
        if why:
            self.error(path, f"invalid port name {item!r}: {why}")
            return None
        return NamedPort(item)

    def _service_accounts(self, value: Any) -> None:
        if value is None:
            return
        path = self.path + ("serviceAccounts",)
        if not isinstance(value, dict):
            self.error(path, "must be an object with names and/or selector")
            return
        check_keys(self.rule.doc, self.rule.problems, path, value, _SERVICE_ACCOUNTS)
        if any(k not in _SERVICE_ACCOUNTS for k in value):
            self.rule.ok = False
        names = expect_list(self.rule.doc, self.rule.problems, path + ("names",), value.get("names"))
        if not all(isinstance(n, str) and n for n in names):
            self.error(path + ("names",), "service account names must be non-empty strings")
        elif names:
            self.sa_names = frozenset(names)
        if value.get("selector") not in (None, ""):
            text = value["selector"]
            if isinstance(text, str) and _GLOBAL in text:
                self.error(path + ("selector",), _GLOBAL_ONLY_IN_NS_SELECTOR)
            else:
                sel = calico_selector(self.rule.doc, self.rule.problems, path + ("selector",), text)
                if sel is None:
                    self.rule.ok = False
                self.sa_selector = sel

    def _services(self, value: Any) -> None:
        if value is None:
            return
        path = self.path + ("services",)
        rule = self.rule
        if not isinstance(value, dict):
            self.error(path, "must be an object with name and namespace")
            return
        check_keys(rule.doc, rule.problems, path, value, _SERVICES)
        if any(k not in _SERVICES for k in value):
            rule.ok = False
        name, namespace = value.get("name"), value.get("namespace")
        if not name or not isinstance(name, str):
            self.error(path + ("name",), "must specify a service name")
        if namespace is not None and not isinstance(namespace, str):
            self.error(path + ("namespace",), "must be a string")
            namespace = None
        if not namespace:
            if rule.namespace is None:
                # At global scope a service name is not qualified without its namespace.
                self.error(path + ("namespace",), "must specify a namespace")
            namespace = rule.namespace
        # Services are a source on ingress rules and a destination on egress rules only.
        if self.is_source and rule.direction is Direction.EGRESS:
            self.error(path, "not allowed in egress rule source")
        if not self.is_source and rule.direction is Direction.INGRESS:
            self.error(path, "not allowed in ingress rule destination")
        raw = self.raw
        if raw.get("namespaceSelector"):
            self.error(path, "cannot specify NamespaceSelector and Services on the same rule")
        if raw.get("selector") or raw.get("notSelector"):
            self.error(path, "cannot specify Selector/NotSelector and Services on the same rule")
        if raw.get("serviceAccounts") is not None:
            self.error(path, "cannot specify ServiceAccounts and Services on the same rule")
        if raw.get("nets") or raw.get("notNets"):
            self.error(path, "cannot specify Nets/NotNets and Services on the same rule")
        if raw.get("domains"):
            self.error(path, "cannot specify Domains and Services on the same rule")
        if not self.is_source:
            # Destination service rules use the ports of the service's endpoints.
            if raw.get("ports"):
                self.error(self.path + ("ports",), "cannot specify ports with a service selector")
            if raw.get("notPorts"):
                self.error(self.path + ("notPorts",), "cannot specify notports with a service selector")
        if isinstance(name, str) and name and namespace:
            self.service = ServiceRef(name, namespace)

    def _domains(self, value: Any, action: Action | None) -> None:
        if value is None:
            return
        path = self.path + ("domains",)
        rule = self.rule
        domains = expect_list(rule.doc, rule.problems, path, value)
        if not domains:
            return
        if self.is_source or rule.direction is Direction.INGRESS:
            self.error(path, "domains are only valid in the destination of egress rules")
        if action is not None and action is not Action.ALLOW:
            self.error(path, "domains are only valid for Allow rules")
        if self.raw.get("nets"):
            self.error(path, "cannot specify Domains and Nets on the same rule")
        if self.raw.get("selector"):
            self.error(path, "cannot specify Domains and Selector on the same rule")
        good = []
        for i, d in enumerate(domains):
            why = _domain_error(d)
            if why:
                self.error(path + (i,), f"invalid domain {d!r}: {why}")
            else:
                good.append(d.lower())
        self.domains = tuple(good)

    # -- the IR

    def match(self) -> EntityMatch | None:
        """The IR entity (None when it constrains nothing)."""
        namespace = None
        # namespaceSelector all() and global() stay selectors: the evaluator reads all() as
        # "any namespaced entity" and global() as "only non-namespaced ones" (host endpoints,
        # GlobalNetworkSets), which is what felix makes of them.
        ns_selector = self.ns_selector
        if (
            ns_selector is None
            and self.rule.namespace is not None
            and (
                self.selector is not None
                or self.not_selector is not None
                or self.sa_names is not None
                or self.sa_selector is not None
            )
        ):
            # felix scopes a namespaced policy's entity to its namespace as soon as any
            # selector field is used (not for nets/ports-only entities).
            namespace = self.rule.namespace
        match = EntityMatch(
            nets=self.nets,
            not_nets=self.not_nets,
            selector=self.selector,
            not_selector=self.not_selector,
            namespace=namespace,
            namespace_selector=ns_selector,
            service_account_names=self.sa_names,
            service_account_selector=self.sa_selector,
            service=self.service,
            domains=self.domains,
            ports=self.ports,
            not_ports=self.not_ports,
        )
        return None if match == EntityMatch() else match


def _domain_error(domain: Any) -> str | None:
    """Exact names, or one ``*`` standing for a whole component (Calico's wildcard rules)."""
    if not isinstance(domain, str) or not domain:
        return "must be a non-empty string"
    if len(domain) > 253:
        return "must be no more than 253 characters"
    parts = domain.rstrip(".").split(".")
    stars = domain.count("*")
    if stars > 1:
        return "only one wildcard is allowed"
    for part in parts:
        if part == "*":
            continue
        if "*" in part:
            return "a wildcard must be an entire name component"
        if not _DNS_LABEL.fullmatch(part) or len(part) > 63:
            return f"{part!r} is not a valid DNS label"
    return None
