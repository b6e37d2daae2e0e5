"""Kubernetes name, label and DNS-name syntax, in one place (after
``k8s.io/apimachinery/pkg/util/validation``).

Every manifest kind checks names and labels through this module: the patterns are written once
here, and each check is one function. Label keys and values have two message styles, because two
readers need them: the inventory kinds (``pyclassify.kinds.inventory_kinds``: Pods, Namespaces,
Services, ...) say which part of a key is wrong, step by step, while the label selectors of
policies (``pyclassify.kinds.common``) answer with apimachinery's one-sentence messages. Both
styles judge the same keys and values valid.
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = [
    "DNS1035_LABEL",
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "DOMAIN_NAME",
    "QUALIFIED_NAME",
    "WILDCARD_DOMAIN_NAME",
    "dns1035_label_error",
    "dns1123_label_error",
    "dns1123_subdomain_error",
    "label_key_error",
    "label_value_error",
    "selector_label_key_error",
    "selector_label_value_error",
]

#: An RFC 1123 label: a-z, 0-9 and '-', starting and ending alphanumeric (<= 63 characters).
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: An RFC 1123 subdomain: labels joined by '.' (<= 253 characters).
DNS1123_SUBDOMAIN = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
#: An RFC 1035 label: like an RFC 1123 label, starting with a letter.
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
#: The name part of a qualified name (a label key) and a non-empty label value.
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
#: A domain name of Calico's ``allowedEgressDomains`` (GlobalNetworkSet, NetworkSet): any case,
#: optionally ``*.`` first and '.' last, a single label allowed.
DOMAIN_NAME = r"(\*\.)?([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?\.)*[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?\.?"
#: A domain name of AdminNetworkPolicy ``domainNames``: at least two labels, '_' inside labels.
WILDCARD_DOMAIN_NAME = r"(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.?"

_DNS1123_LABEL = re.compile(DNS1123_LABEL)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN)
_DNS1035_LABEL = re.compile(DNS1035_LABEL)
#: A host interface's name as Calico validates a HostEndpoint's interfaceName (Linux allows at
#: most 15 bytes); pyclassify enforce names it in iptables rules.
INTERFACE_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,15}")

_QUALIFIED_NAME = re.compile(QUALIFIED_NAME)


@functools.lru_cache(maxsize=1 << 16)
def dns1123_label_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.fullmatch(value):
        return "must be a lowercase RFC 1123 label (a-z, 0-9 and '-', starting and ending alphanumeric)"
    return None


def _dns1123_subdomain_error(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-' and '.', starting and ending alphanumeric)"
    return None


#: For values that repeat (label key prefixes, namespaces, node names).
dns1123_subdomain_error = functools.lru_cache(maxsize=1 << 16)(_dns1123_subdomain_error)


def is_dns1123_subdomain(value: str) -> bool:
    """The same check uncached, for values that are unique (pod names): caching them only
    evicts the values that repeat."""
    return len(value) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(value) is not None


@functools.lru_cache(maxsize=1 << 16)
def dns1035_label_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1035_LABEL.fullmatch(value):
        return "must be an RFC 1035 label (a-z, 0-9 and '-', starting with a letter, ending alphanumeric)"
    return None


# --- port names: IANA service names (RFC 6335), as apimachinery's IsValidPortName checks them ---

_IANA_SVC_NAME = re.compile(r"[-a-z0-9]+")
_HAS_LETTER = re.compile(r"[a-z]")


@functools.lru_cache(maxsize=1 << 16)
def port_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid IANA_SVC_NAME (container ports, Service target ports, named
    ports of rules), in apimachinery's words and order; None if it is one."""
    if not 1 <= len(name) <= 15:
        return "must be no more than 15 characters"
    if not _IANA_SVC_NAME.fullmatch(name):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if not _HAS_LETTER.search(name):
        return "must contain at least one letter (a-z)"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


# --- label keys and values: one judgement, two ways of saying it ---

_KEY_SYNTAX = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character, with an optional DNS subdomain prefix and '/'"
)
_KEY_LENGTH = "name part must be no more than 63 characters (prefix no more than 253)"
_VALUE = (
    "a valid label must be an empty string or consist of at most 63 alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


@functools.lru_cache(maxsize=1 << 16)
def _key_problems(key: str) -> tuple[str | None, bool]:
    """``(the first problem of key, step by step; whether a problem is one of syntax rather
    than length)``; ``(None, False)`` for a valid key: an optional DNS subdomain prefix and '/',
    then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    first: str | None = None
    syntax = False
    if slash and not prefix:
        first, syntax = "prefix part must be non-empty", True
    elif prefix:
        err = dns1123_subdomain_error(prefix)
        if err:
            first = f"prefix part {err}"
            syntax = not _DNS1123_SUBDOMAIN.fullmatch(prefix)
    name_syntax = not _QUALIFIED_NAME.fullmatch(name)  # an empty name too
    if first is None:
        if not name:
            first = "name part must be non-empty"
        elif len(name) > 63:
            first = "name part must be no more than 63 characters"
        elif name_syntax:
            first = "name part must consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return first, syntax or name_syntax


@functools.lru_cache(maxsize=1 << 16)  # its own cache: a cluster's pods call it once a label
def label_key_error(key: str) -> str | None:
    """What is wrong with a label key, part by part (the inventory kinds' messages)."""
    return _key_problems(key)[0]


def selector_label_key_error(key: Any) -> str | None:
    """What is wrong with a label key, in apimachinery's words (label selectors' messages)."""
    if not isinstance(key, str):
        return _KEY_SYNTAX
    first, syntax = _key_problems(key)
    if first is None:
        return None
    return _KEY_SYNTAX if syntax else _KEY_LENGTH


@functools.lru_cache(maxsize=1 << 16)
def label_value_error(value: str) -> str | None:
    """What is wrong with a label value (the inventory kinds' messages)."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _QUALIFIED_NAME.fullmatch(value):
        return "must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def selector_label_value_error(value: Any) -> str | None:
    """What is wrong with a label value, in apimachinery's words (label selectors' messages)."""
    if not isinstance(value, str) or label_value_error(value) is not None:
        return _VALUE
    return None
