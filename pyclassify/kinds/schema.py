"""Strict field validation: every object is held to the API schema of its kind, as the API
server's strict decoding (``kubectl apply``'s default) holds it — a field the schema does not
know is an error (``spce``, ``metadata.lables``, ``status.podIPz``), naming the field nearest
to it; a value of the wrong type is an error (``containerPort: "8080"``). Without this a
mistyped field would vanish and the object change meaning (a NetworkPolicy without its
``spec`` isolates the whole namespace).

The schemas are the real ones, bundled in ``pyclassify/schemas/`` and written by
``scripts/update_schemas.py`` from pinned releases (Kubernetes' OpenAPI, the network-policy-api
and Calico CRDs; each file names its sources). They are read as the API server reads them:

- ``properties`` are the fields an object has; any other field is unknown, unless the node has
  ``additionalProperties`` (a map: every value is held to it) or
  ``x-kubernetes-preserve-unknown-fields`` (kept as given; its known fields are still checked).
  A Kubernetes object type without properties (RawExtension, FieldsV1) is free-form.
- ``metadata`` is ObjectMeta for every kind, custom resources included.
- ``x-kubernetes-int-or-string``: an integer or a string; ``type`` may list alternatives
  (Quantity: a string or a number); an integer of ``format`` int32/int64 must fit.
- ``null`` is accepted anywhere (decoding leaves the field unset; a CRD prunes it).

Values (a port's range, a name's syntax, an enum) are checked by each kind's code, as the API
server's validation does after decoding; an error the schema check reported is not repeated for
the same field by that code (``Problems.refuse``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from pyclassify._engine import SchemaChecker
from pyclassify.documents import Document, FieldPath, Problems, document_key, format_path, shown
from pyclassify.spelling import suggestion

SCHEMA_FILES = ("kubernetes.json", "network-policy-api.json", "calico.json", "containersecurity.json")

_INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# Python types a JSON type stands for. bool is not an int here (``type(True) is bool``); a YAML
# timestamp or binary (read by the ruamel path) reaches the API server as a string.
_PY_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str, datetime.datetime, datetime.date, bytes}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "object": frozenset({dict}),
    "array": frozenset({list}),
}
_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


class Node:
    """One compiled schema node."""

    __slots__ = ("types", "want", "props", "extra", "items", "preserve", "bounds")

    def __init__(self) -> None:
        self.types: frozenset[type] | None = None  # None: any value
        self.want = ""  # the type(s) as the schema names them, for messages
        self.props: dict[str, Node] | None = None
        self.extra: Node | None = None  # additionalProperties
        self.items: Node | None = None
        self.preserve = False  # x-kubernetes-preserve-unknown-fields (or free-form)
        self.bounds: tuple[int, int] | None = None


class Schemas:
    """The bundled schemas, compiled: ``roots(api_version, kind)`` are the nodes of that kind,
    one per shape it was served in (an object conforms to one of them)."""

    def __init__(self, files: Iterable[dict[str, Any]]) -> None:
        self.definitions: dict[str, Any] = {}
        self.kinds: dict[str, dict[str, Any]] = {}
        for data in files:
            self.definitions.update(data["definitions"])
            self.kinds.update(data["kinds"])
        self._compiled: dict[str, Node] = {}
        self._roots: dict[str, list[Node]] = {}

    def roots(self, api_version: str, kind: str) -> list[Node]:
        key = f"{api_version}/{kind}"
        nodes = self._roots.get(key)
        if nodes is None:
            entry = self.kinds.get(key)
            if entry is None:
                return []
            nodes = self._roots[key] = [self._compile(shape) for shape in entry.get("anyOf", [entry])]
        return nodes

    def _compile(self, raw: dict[str, Any]) -> Node:
        ref = raw.get("$ref")
        if ref is not None:
            name = ref.removeprefix("#/definitions/")
            node = self._compiled.get(name)
            if node is None:
                node = self._compiled[name] = Node()  # placed first: definitions are recursive
                self._fill(node, self.definitions[name])
            return node
        node = Node()
        self._fill(node, raw)
        return node

    def _fill(self, node: Node, raw: dict[str, Any]) -> None:
        if "$ref" in raw:
            target = self._compile(raw)
            for slot in Node.__slots__:
                setattr(node, slot, getattr(target, slot))
            return
        if raw.get("x-kubernetes-int-or-string"):
            node.types, node.want = frozenset({int, str}), "integer or string"
            return
        types = raw.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else list(types)
            node.types = frozenset().union(*(_PY_TYPES[t] for t in names))
            node.want = " or ".join(names)
        node.bounds = _INT_BOUNDS.get(raw.get("format", ""))
        node.preserve = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
        if "properties" in raw:
            node.props = {k: self._compile(v) for k, v in raw["properties"].items()}
        if "additionalProperties" in raw:
            node.extra = self._compile(raw["additionalProperties"])
        if "items" in raw:
            node.items = self._compile(raw["items"])


@lru_cache(maxsize=1)
def schemas() -> Schemas:
    folder = resources.files("pyclassify") / "schemas"
    return Schemas(json.loads((folder / name).read_bytes()) for name in SCHEMA_FILES)


def _unknown(key: Any, node: Node) -> str:
    guess = suggestion(key, node.props or ())
    shown_key = repr(key) if isinstance(key, str) else f"{key!r} (a {type(key).__name__} key)"
    return f"unknown field {shown_key}" + (f" (did you mean {guess!r}?)" if guess else "")


def _value(value: Any) -> str:
    """A scalar as a message shows it: as JSON spells it, a long string or number cut short."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if abs(value) < 10**20:
            return str(value)
        return f"(a number of about {int(value.bit_length() * 0.30103) + 1} digits)"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return shown(value)
    return shown(str(value))


def _wrong_type(value: Any, node: Node) -> str:
    got = _TYPE_NAMES.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return f"must be of type {node.want}, not {got}"
    quote = node.types is not None and str in node.types and got in ("integer", "number", "boolean")
    hint = " (quote it)" if quote else ""
    return f"Invalid value: {_value(value)}: must be of type {node.want}, not {got}{hint}"


def _out_of_range(value: int, node: Node) -> str:
    return f"Invalid value: {_value(value)}: out of range of {_format(node)}"


def _walk(value: Any, node: Node, path: FieldPath, out: list[tuple[FieldPath, str]]) -> None:
    """Checks ``value`` (not None) against ``node``; problems go to ``out``."""
    kind = type(value)
    if node.types is not None and kind not in node.types:
        out.append((path, _wrong_type(value, node)))
        return
    if kind is dict:
        props, extra = node.props, node.extra
        if props is None and extra is None:
            return  # free-form, or preserved without known fields
        for key, v in value.items():
            child = props.get(key) if props is not None else None
            if child is None:
                child = extra
                if child is None:
                    if not node.preserve:
                        out.append((path + (key,), _unknown(key, node)))
                    continue
            if v is None:
                continue
            vk = type(v)
            if vk is dict or vk is list:
                _walk(v, child, path + (key,), out)
            elif child.types is not None and vk not in child.types:
                out.append((path + (key,), _wrong_type(v, child)))
            elif child.bounds is not None and vk is int and not child.bounds[0] <= v <= child.bounds[1]:
                out.append((path + (key,), _out_of_range(v, child)))
    elif kind is list:
        items = node.items
        if items is None:
            return
        for i, v in enumerate(value):
            if v is not None:
                _walk(v, items, path + (i,), out)
    elif node.bounds is not None and kind is int and not node.bounds[0] <= value <= node.bounds[1]:
        out.append((path, _out_of_range(value, node)))


def _format(node: Node) -> str:
    return "int32" if node.bounds == _INT_BOUNDS["int32"] else "int64"


@lru_cache(maxsize=1)
def _checker() -> SchemaChecker:
    folder = resources.files("pyclassify") / "schemas"
    return SchemaChecker([(folder / name).read_text("utf-8") for name in SCHEMA_FILES])


def knows(doc: Document, path: FieldPath) -> bool:
    """Whether the schema of ``doc``'s kind has a field at ``path``: a field the API server
    takes, where a kind's code finds one it does not implement."""
    for root in schemas().roots(doc.api_version, doc.kind):
        node: Node | None = root
        for part in path:
            if node is None:
                break
            if isinstance(part, int):
                node = node.items
            elif node.props is not None and part in node.props:
                node = node.props[part]
            else:
                node = node.extra
        if node is not None:
            return True
    return False


@cache
def schema_versions(group: str, kind: str) -> tuple[str, ...]:
    """The apiVersions of API group ``group`` (as written: ``crd.projectcalico.org``) that have
    a bundled schema of ``kind``, sorted."""
    out = []
    for key in _checker().kinds:
        api_version, _, k = key.rpartition("/")
        if k == kind and api_version.rpartition("/")[0] == group:
            out.append(api_version)
    return tuple(sorted(out))


def field_problems(obj: dict[str, Any]) -> list[tuple[FieldPath, str]] | None:
    """``(path, message)`` of every field of the object ``obj`` the schema of its apiVersion and
    kind refuses; None when no such schema is bundled (a kind pyclassify does not read).

    The native walk (``_engine.SchemaChecker``) says whether there is anything to report, at
    native speed; only then is the object walked here, for the paths and the words."""
    conforms = _checker().check(obj)
    if conforms is None:
        return None
    if conforms:
        return []
    roots = schemas().roots(obj["apiVersion"], obj["kind"]) or schemas().roots("v1", "List")  # typed lists
    # A kind of several shapes: the problems of the shape the object is nearest to (the
    # current one on a tie).
    best: list[tuple[FieldPath, str]] | None = None
    for root in roots:
        out: list[tuple[FieldPath, str]] = []
        _walk(obj, root, (), out)
        if best is None or len(out) < len(best):
            best = out
    assert best is not None
    return best


def check(doc: Document, problems: Problems) -> bool:
    """Reports every field of ``doc`` its kind's schema refuses (once per run: an object
    refused before is not reported again); whether it refused any. Nothing for a kind without a
    bundled schema. Later errors at or under a refused field are not added (``Problems``)."""
    if _checker().check(doc.obj) is not False:
        return False  # it conforms, or its kind has no schema: the common case, natively
    if problems.schema_refused and document_key(doc) in problems.schema_refused:
        return True  # refused before
    found = field_problems(doc.obj)
    if not found:
        return False
    for path, message in found:
        problems.error(doc, path, message)
    problems.refuse(doc, tuple(format_path(path) for path, _ in found))
    return True
