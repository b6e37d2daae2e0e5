"""Helpers shared by the policy normalizers: protocols, ports, CIDRs and label selectors.

Every helper validates as the Kubernetes API server (or the CRD schema) does and reports
problems through a ``Problems`` collector with the field path relative to the object, so one
run lists every error. On error a helper returns ``None`` and the caller drops what it built.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.ir import (
    PROTO_ICMP,
    PROTO_ICMPV6,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    PROTO_UDPLITE,
    IPNetwork,
    NamedPort,
    PortRange,
)
from pyclassify.kinds import schema
from pyclassify.names import port_name_error, selector_label_key_error, selector_label_value_error
from pyclassify.selector import Selector, SelectorError, excerpt, unencodable

# The protocol table, the one every module reads (names to numbers and back). The names are
# Calico's spellings, in the order of its v3 validator (^(TCP|UDP|ICMP|ICMPv6|SCTP|UDPLite)$), and
# what output shows; Kubernetes kinds accept only the upper-case TCP/UDP/SCTP.
PROTOCOL_NAMES = {
    PROTO_TCP: "TCP",
    PROTO_UDP: "UDP",
    PROTO_ICMP: "ICMP",
    PROTO_ICMPV6: "ICMPv6",
    PROTO_SCTP: "SCTP",
    PROTO_UDPLITE: "UDPLite",
}
#: By the name upper-cased (names are read case-insensitively: ``udplite`` is 136).
PROTOCOL_NUMBERS = {name.upper(): number for number, name in PROTOCOL_NAMES.items()}
K8S_PROTOCOLS = ("TCP", "UDP", "SCTP")
#: The protocols a Kubernetes (and Felix failsafe) port names, by their spelling there.
K8S_PROTOCOL_NUMBERS = {name: PROTOCOL_NUMBERS[name] for name in K8S_PROTOCOLS}
#: Protocols whose packets carry ports: the decoder reads them, port rules compare them.
PORT_PROTOCOLS = frozenset((PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_UDPLITE))
#: Protocols whose packets carry an ICMP type and code.
ICMP_PROTOCOLS = frozenset((PROTO_ICMP, PROTO_ICMPV6))


def protocol_name(number: int) -> str:
    return PROTOCOL_NAMES.get(number, str(number))


def is_int(value: Any) -> bool:
    # YAML booleans are ints in Python; a port of `true` is a type error, not port 1.
    return isinstance(value, int) and not isinstance(value, bool)


def k8s_protocol(doc: Document, problems: Problems, path: FieldPath, value: Any) -> int | None:
    """A Kubernetes ``protocol`` field: TCP (the default when absent), UDP or SCTP."""
    if value is None:
        return PROTO_TCP
    if value not in K8S_PROTOCOLS:
        problems.error(doc, path, f'Unsupported value: {value!r}: supported values: "SCTP", "TCP", "UDP"')
        return None
    return PROTOCOL_NUMBERS[value]


def port_number(doc: Document, problems: Problems, path: FieldPath, value: Any) -> int | None:
    if not is_int(value):
        problems.error(doc, path, f"must be an integer port number, got {value!r}")
        return None
    if not 1 <= value <= 65535:
        problems.error(doc, path, f"Invalid value: {value}: must be between 1 and 65535, inclusive")
        return None
    return value


def port_or_name(doc: Document, problems: Problems, path: FieldPath, value: Any) -> PortRange | NamedPort | None:
    """An IntOrString port: a number 1-65535 (a single-port range) or an IANA service name.

    A quoted number is a string, as the API server decodes an IntOrString, and no port name
    (``"8080"``: "must contain at least one letter").
    """
    if is_int(value):
        n = port_number(doc, problems, path, value)
        return None if n is None else PortRange(n, n)
    if isinstance(value, str):
        why = port_name_error(value)
        if why:
            problems.error(doc, path, f"Invalid value: {value!r}: {why}")
            return None
        return NamedPort(value)
    problems.error(doc, path, f"must be a port number or name, got {value!r}")
    return None


def port_range(
    doc: Document,
    problems: Problems,
    path: FieldPath,
    start: Any,
    end: Any,
    start_key: str = "start",
    end_key: str = "end",
) -> PortRange | None:
    """An inclusive range given as two numbers (ANP portRange, CNP range)."""
    first = port_number(doc, problems, path + (start_key,), start)
    last = port_number(doc, problems, path + (end_key,), end)
    if first is None or last is None:
        return None
    if last < first:
        problems.error(
            doc, path + (end_key,), f"Invalid value: {last}: must be greater than or equal to {start_key} ({first})"
        )
        return None
    return PortRange(first, last)


def _network(text: str, strict: bool) -> IPNetwork:
    if "/" not in text:
        raise ValueError("must be in CIDR notation (address/prefix length)")
    net = ipaddress.ip_network(text, strict=strict)
    # An IPv4-mapped IPv6 CIDR is ambiguous between families; the API server refuses it too.
    if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped is not None and net.prefixlen >= 96:
        raise ValueError("IPv4-mapped IPv6 CIDRs are not supported")
    return net


def cidr(doc: Document, problems: Problems, path: FieldPath, value: Any, strict: bool = False) -> IPNetwork | None:
    """A CIDR. ``strict`` refuses host bits (the ANP/CNP CRDs' ``cidr(self) == cidr(self).masked()``);
    otherwise host bits are dropped, as the API server's sloppy parse of ipBlock does."""
    if not isinstance(value, str) or not value:
        problems.error(doc, path, f"Invalid value: {value!r}: must be a valid CIDR (e.g. 10.0.0.0/8 or 2001:db8::/64)")
        return None
    try:
        return _network(value.strip(), strict)
    except ValueError as e:
        reason = "host bits must be zero" if "host bits" in str(e) else str(e)
        problems.error(
            doc, path, f"Invalid value: {value!r}: must be a valid CIDR (e.g. 10.0.0.0/8 or 2001:db8::/64): {reason}"
        )
        return None


def ip_block(
    doc: Document, problems: Problems, path: FieldPath, block: Any
) -> tuple[IPNetwork, tuple[IPNetwork, ...]] | None:
    """A Kubernetes ipBlock: ``cidr`` and optional ``except``, each strictly inside ``cidr``."""
    if not isinstance(block, dict):
        problems.error(doc, path, "must be an object with cidr and except")
        return None
    if "cidr" not in block:
        problems.error(doc, path + ("cidr",), "Required value")
        return None
    net = cidr(doc, problems, path + ("cidr",), block["cidr"])
    excepts = block.get("except") or []
    if not isinstance(excepts, list):
        problems.error(doc, path + ("except",), "must be a list of CIDRs")
        return None
    out: list[IPNetwork] = []
    ok = net is not None
    for i, text in enumerate(excepts):
        ex = cidr(doc, problems, path + ("except", i), text)
        if ex is None:
            ok = False
            continue
        if net is not None and (ex.version != net.version or not ex.subnet_of(net) or ex.prefixlen <= net.prefixlen):  # type: ignore[arg-type]  # versions checked first
            problems.error(doc, path + ("except", i), f"Invalid value: {text!r}: must be a strict subset of `cidr`")
            ok = False
            continue
        out.append(ex)
    return (net, tuple(out)) if ok and net is not None else None


def _field_path(field: str | None) -> FieldPath:
    """``matchExpressions[0].operator`` -> ``("matchExpressions", 0, "operator")``."""
    out: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", field or ""):
        out.append(int(part[1:-1]) if part.startswith("[") else part)
    return tuple(out)


def _label_problems(value: dict) -> list[tuple[FieldPath, str]]:
    out: list[tuple[FieldPath, str]] = []
    labels = value.get("matchLabels")
    if isinstance(labels, dict):
        for k, v in labels.items():
            why = selector_label_key_error(k)
            if why:
                out.append((("matchLabels", k), f"Invalid value: {k!r}: {why}"))
            why = selector_label_value_error(v)
            if why:
                out.append((("matchLabels", k), f"Invalid value: {v!r}: {why}"))
    exprs = value.get("matchExpressions")
    if isinstance(exprs, list):
        for i, e in enumerate(exprs):
            if isinstance(e, dict):
                why = selector_label_key_error(e.get("key"))
                if why:
                    out.append((("matchExpressions", i, "key"), f"Invalid value: {e.get('key')!r}: {why}"))
                for j, v in enumerate(e.get("values") or []):
                    why = selector_label_value_error(v)
                    if why:
                        out.append((("matchExpressions", i, "values", j), f"Invalid value: {v!r}: {why}"))
    return out


def label_selector(doc: Document, problems: Problems, path: FieldPath, value: Any) -> Selector | None:
    """A Kubernetes LabelSelector (``{}`` selects everything). Errors name the exact field."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.error(doc, path, "must be a label selector (matchLabels / matchExpressions)")
        return None
    check_keys(doc, problems, path, value, {"matchLabels", "matchExpressions"})
    found = _label_problems(value)
    for where, message in found:
        problems.error(doc, path + where, message)
    if found or set(value) - {"matchLabels", "matchExpressions"}:
        return None
    try:
        return Selector.from_label_selector(value)
    except SelectorError as e:
        problems.error(doc, path + _field_path(e.field), e.message)
        return None


def calico_selector(doc: Document, problems: Problems, path: FieldPath, text: Any) -> Selector | None:
    """A Calico selector expression; the error message carries the character position."""
    if not isinstance(text, str):
        problems.error(doc, path, f"must be a selector string, got {text!r}")
        return None
    bad = unencodable(text)
    if bad is not None:
        problems.error(doc, path, f"invalid selector {excerpt(text)[0]!r}: {bad}")
        return None
    try:
        return Selector.parse(text)
    except SelectorError as e:
        where = f" at position {e.position}" if e.position is not None else ""
        problems.error(doc, path, f"invalid selector {excerpt(text, e.position)[0]!r}{where}: {e.message}")
        return None


def check_keys(doc: Document, problems: Problems, path: FieldPath, obj: dict, allowed: set[str]) -> None:
    """Fields of ``obj`` other than ``allowed`` (those the kind's code implements) are errors: a
    field the kind's schema has is one pyclassify cannot judge (ignoring it would change what
    the policy does); any other is unknown, as strict decoding finds (``pyclassify.kinds.schema``
    reports those first, and this is not repeated)."""
    for key in obj:
        if key not in allowed:
            if schema.knows(doc, path + (key,)):
                problems.error(
                    doc, path + (key,), f"field {key!r} is not supported by pyclassify: it cannot judge traffic by it"
                )
            else:
                problems.error(doc, path + (key,), f"unknown field {key!r}")


def expect_list(doc: Document, problems: Problems, path: FieldPath, value: Any) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.error(doc, path, "must be a list")
        return []
    return value


def expect_dict(doc: Document, problems: Problems, path: FieldPath, value: Any) -> dict | None:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.error(doc, path, "must be an object")
        return None
    return value
