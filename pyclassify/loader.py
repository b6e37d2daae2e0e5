"""Reading manifests: YAML and JSON files, directories and stdin into ``Document`` objects.

Input is what ``kubectl get -o yaml`` and ``calicoctl get -o yaml`` print: multi-document YAML,
JSON, ``kind: List`` and the typed ``*List`` kinds (``PodList``, ``NamespaceList``, ...), whose
items become documents of their own. Every mapping key and sequence item keeps its line, so
errors can name ``file:line``. Nothing here raises on bad input: it becomes a ``Problem``.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from pyclassify.source import Document, FieldPath, Problem, Problems

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# A bound on the size of one document's plain data, far beyond any real manifest.
MAX_NODES_PER_DOCUMENT = 5_000_000
STDIN = "-"
STDIN_NAME = "<stdin>"


def load_paths(paths: Iterable[str], problems: Problems) -> list[Document]:
    """Every document of every path (files, directories recursively, ``-`` for stdin)."""
    docs: list[Document] = []
    for path in paths:
        if path == STDIN:
            docs.extend(load_text(sys.stdin.read(), STDIN_NAME, problems))
            continue
        p = Path(path)
        if p.is_dir():
            for file in manifest_files(p):
                docs.extend(load_file(file, problems))
        elif p.exists():
            docs.extend(load_file(p, problems))
        else:
            problems.add(Problem(str(path), 0, "", "no such file or directory"))
    return docs


def manifest_files(root: Path) -> list[Path]:
    """The manifest files under ``root``, recursively, in a stable order (sorted by path parts;
    hidden files and directories such as ``.git`` are not manifests)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith(".") and name.lower().endswith(MANIFEST_SUFFIXES):
                found.append(Path(dirpath) / name)
    return sorted(found, key=lambda f: f.relative_to(root).parts)


def load_file(path: Path, problems: Problems) -> list[Document]:
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        problems.add(Problem(name, 0, "", f"cannot read: {exc.strerror or exc}"))
        return []
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.add(Problem(name, line, "", "not UTF-8 text"))
        return []
    return load_text(text, name, problems)


def load_text(text: str, file: str, problems: Problems) -> list[Document]:
    """The documents of one file's text (YAML or JSON)."""
    docs: list[Document] = []
    try:
        for root, lines in _parse_yaml(text):
            docs.extend(_documents(root, lines, file, problems))
    except MarkedYAMLError as exc:
        # JSON is YAML 1.2 flow syntax, but YAML limits what JSON allows (an implicit key
        # may not exceed 1024 characters, for one): such files are still good JSON.
        if _looks_like_json(text) and not docs:
            return _load_json(text, file, problems)
        problems.add(_yaml_problem(exc, file))
    except YAMLError as exc:  # errors without a position
        problems.add(Problem(file, 1, "", f"invalid YAML: {exc}"))
    except (_TooLarge, RecursionError):
        problems.add(Problem(file, 1, "", "document too large, nested too deeply or recursive (an alias inside its own anchor)"))
    return docs


class _TooLarge(Exception):
    pass


def _yaml_problem(exc: MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else 1
    what = " ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
    return Problem(file, line, "", f"invalid YAML: {what}")


def _looks_like_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))


def _load_json(text: str, file: str, problems: Problems) -> list[Document]:
    try:
        root = json.loads(text)
    except json.JSONDecodeError as exc:
        problems.add(Problem(file, exc.lineno, "", f"invalid JSON: {exc.msg}"))
        return []
    # Without the YAML parser's marks every field is reported at the object's first line.
    return _documents(root, {}, file, problems)


class _Constructor(RoundTripConstructor):
    """Round-trip construction (it keeps every key's and item's position), except that
    timestamps stay the strings they were: Kubernetes decodes them as strings too."""


_Constructor.add_constructor("tag:yaml.org,2002:timestamp", RoundTripConstructor.construct_yaml_str)


def _parse_yaml(text: str) -> Iterable[tuple[Any, dict[FieldPath, int]]]:
    """Each YAML document as plain data with the 1-based line of every key and item."""
    yaml = YAML(typ="rt", pure=True)
    yaml.Constructor = _Constructor
    for node in yaml.load_all(text):
        lines: dict[FieldPath, int] = {}
        if isinstance(node, (CommentedMap, CommentedSeq)):
            lines[()] = node.lc.line + 1
        yield _Converter(lines).convert(node, ()), lines


class _Converter:
    """ruamel's round-trip types as dict/list/str/int/float/bool/None, recording lines.

    An alias converts to the same plain object as its anchor (converted once, so a "billion
    laughs" document stays small); an alias inside its own anchor has no plain form."""

    def __init__(self, lines: dict[FieldPath, int]) -> None:
        self.lines = lines
        self.done: dict[int, Any] = {}
        self.in_progress: set[int] = set()
        self.budget = MAX_NODES_PER_DOCUMENT

    def convert(self, node: Any, path: FieldPath) -> Any:
        if not isinstance(node, (CommentedMap, CommentedSeq)):
            return _plain_scalar(node)
        key = id(node)
        if key in self.done:
            return self.done[key]
        if key in self.in_progress:
            raise _TooLarge
        self.budget -= len(node)
        if self.budget < 0:
            raise _TooLarge
        self.in_progress.add(key)
        if isinstance(node, CommentedMap):
            out: Any = {}
            for k, value in node.items():
                sub = path + (_plain_scalar(k),)
                try:
                    self.lines[sub] = node.lc.key(k)[0] + 1
                except (KeyError, TypeError, IndexError):
                    pass  # keys merged in with << have no position of their own
                out[sub[-1]] = self.convert(value, sub)
        else:
            out = []
            for i, value in enumerate(node):
                sub = path + (i,)
                try:
                    self.lines[sub] = node.lc.item(i)[0] + 1
                except (KeyError, TypeError, IndexError):
                    pass
                out.append(self.convert(value, sub))
        self.in_progress.discard(key)
        self.done[key] = out
        return out


def _plain_scalar(node: Any) -> Any:
    if isinstance(node, (set, frozenset)):  # !!set
        return sorted(str(_plain_scalar(k)) for k in node)
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        # Kubernetes decodes timestamps as strings; keep their text, not a datetime.
        return node.isoformat()
    if isinstance(node, bytes):
        return node.decode("utf-8", "replace")
    value = getattr(node, "value", None)  # a scalar with a custom tag (!foo bar)
    return str(value) if value is not None else str(node)


def documents_of(obj: Any, file: str, problems: Problems) -> list[Document]:
    """Documents of an object already decoded (a Kubernetes watch event, a test case's manifest):
    Lists are expanded as in files; no line numbers are known, so everything is at line 1."""
    return _documents(copy.deepcopy(obj), {}, file, problems)


def _documents(root: Any, lines: dict[FieldPath, int], file: str, problems: Problems) -> list[Document]:
    if root is None:
        return []  # an empty document (a lone ---) is not an object
    line = lines.get((), 1)
    if not isinstance(root, dict):
        problems.add(Problem(file, line, "", f"a manifest must be a mapping, not {_type_name(root)}"))
        return []
    doc = Document(root, file, line, lines)
    if not _has_type(doc, problems):
        return []
    if doc.kind.endswith("List") and "items" in root:
        return _list_items(doc, problems)
    return [doc]


def _has_type(doc: Document, problems: Problems) -> bool:
    ok = True
    for field in ("apiVersion", "kind"):
        value = doc.obj.get(field)
        if not value:
            problems.error(doc, (), f"{field} is required")
            ok = False
        elif not isinstance(value, str):
            problems.error(doc, (field,), f"{field} must be a string")
            ok = False
    return ok


def _list_items(lst: Document, problems: Problems) -> list[Document]:
    """The items of ``kind: List`` or a typed ``FooList``, each a document of its own.

    Items of a typed list may omit ``kind`` and ``apiVersion`` (kubectl prints them without):
    they are the list's item kind in the list's API version. Items of ``kind: List`` must say.
    """
    items = lst.obj["items"]
    if items is None:
        return []
    if not isinstance(items, list):
        problems.error(lst, ("items",), f"items must be a list, not {_type_name(items)}")
        return []
    item_kind = lst.kind[: -len("List")]
    docs: list[Document] = []
    for i, item in enumerate(items):
        prefix: FieldPath = ("items", i)
        if not isinstance(item, dict):
            problems.error(lst, prefix, f"a list item must be a mapping, not {_type_name(item)}")
            continue
        if item_kind:
            item.setdefault("kind", item_kind)
            item.setdefault("apiVersion", lst.api_version)
        sub_lines = {
            path[len(prefix) :]: line for path, line in lst.lines.items() if path[: len(prefix)] == prefix
        }
        doc = Document(item, lst.file, sub_lines.get((), lst.line_of(prefix)), sub_lines, lst.base + prefix)
        if not _has_type(doc, problems):
            continue
        if doc.kind.endswith("List") and "items" in item:
            docs.extend(_list_items(doc, problems))  # a List inside a List: still objects
        else:
            docs.append(doc)
    return docs


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__
