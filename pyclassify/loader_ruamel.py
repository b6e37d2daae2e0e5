"""The ruamel.yaml reading of manifests: round-trip YAML 1.2 with the line of every field.

This was the whole loader; it is now the path of the few YAML constructs the Rust reader leaves
to it (``!!set``, ``!!binary``, ``!!omap`` and other core tags, complex keys, ``%YAML 1.1``), one
document or List item at a time, and the reference the differential tests hold the Rust reader
to. It is far too slow for large inputs (about 0.1 MB/s).
"""

from __future__ import annotations

import collections.abc
import datetime
from collections.abc import Iterator
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from pyclassify.documents import FieldPath

# A bound on the size of one document's plain data, far beyond any real manifest.
MAX_NODES_PER_DOCUMENT = 5_000_000

__all__ = ["MarkedYAMLError", "TooLarge", "YAMLError", "parse_yaml", "yaml_error_line", "yaml_error_message"]


class TooLarge(Exception):
    pass


class _Constructor(RoundTripConstructor):
    """Round-trip construction (it keeps every key's and item's position), except that
    timestamps stay the strings they were: Kubernetes decodes them as strings too."""


_Constructor.add_constructor("tag:yaml.org,2002:timestamp", RoundTripConstructor.construct_yaml_str)


def parse_yaml(text: str, first_line: int = 1) -> Iterator[tuple[Any, dict[FieldPath, int]]]:
    """Each YAML document of ``text`` as plain data with the 1-based line of every key and item;
    ``text`` starts at line ``first_line`` of its file. Raises ``YAMLError`` (``MarkedYAMLError``
    with a position) on invalid YAML, ``TooLarge`` or ``RecursionError`` on documents too large."""
    yaml = YAML(typ="rt", pure=True)
    yaml.Constructor = _Constructor
    offset = first_line - 1
    for node in yaml.load_all(text):
        lines: dict[FieldPath, int] = {}
        if isinstance(node, (CommentedMap, CommentedSeq)):
            lines[()] = node.lc.line + 1 + offset
        yield _Converter(lines, offset).convert(node, ()), lines


def yaml_error_line(exc: MarkedYAMLError, first_line: int = 1) -> int:
    mark = exc.problem_mark or exc.context_mark
    return (mark.line if mark is not None else 0) + first_line


def yaml_error_message(exc: MarkedYAMLError) -> str:
    what = " ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
    return f"invalid YAML: {what}"


class _Converter:
    """ruamel's round-trip types as dict/list/str/int/float/bool/None, recording lines.

    An alias converts to the same plain object as its anchor (converted once, so a "billion
    laughs" document stays small); an alias inside its own anchor has no plain form."""

    def __init__(self, lines: dict[FieldPath, int], offset: int) -> None:
        self.lines = lines
        self.offset = offset + 1
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
            raise TooLarge
        self.budget -= len(node)
        if self.budget < 0:
            raise TooLarge
        self.in_progress.add(key)
        if isinstance(node, CommentedMap):
            out: Any = {}
            for k, value in node.items():
                sub = path + (_plain_scalar(k),)
                try:
                    self.lines[sub] = node.lc.key(k)[0] + self.offset
                except (KeyError, TypeError, IndexError):
                    pass  # keys merged in with << have no position of their own
                out[sub[-1]] = self.convert(value, sub)
        else:
            out = []
            for i, value in enumerate(node):
                sub = path + (i,)
                try:
                    self.lines[sub] = node.lc.item(i)[0] + self.offset
                except (KeyError, TypeError, IndexError):
                    pass
                out.append(self.convert(value, sub))
        self.in_progress.discard(key)
        self.done[key] = out
        return out


def _plain_scalar(node: Any) -> Any:
    if isinstance(node, collections.abc.Set):  # !!set (ruamel's CommentedSet is no set subclass)
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
    if isinstance(node, (tuple, collections.abc.Mapping)):  # a complex key (? [a, b], ? {a: 1})
        return _flow_text(node)
    value = getattr(node, "value", None)  # a scalar with a custom tag (!foo bar)
    return str(value) if value is not None else str(node)


def _flow_text(node: Any) -> str:
    """A complex mapping key as the YAML flow text a person wrote (``[a, b]``, ``{a: 1}``), not
    as a Python repr (``ordereddict([('a', 1)])``): it is only ever shown, in an error."""
    if isinstance(node, collections.abc.Mapping):
        return "{" + ", ".join(f"{_flow_text(k)}: {_flow_text(v)}" for k, v in node.items()) + "}"
    if isinstance(node, (tuple, list)):
        return "[" + ", ".join(_flow_text(v) for v in node) + "]"
    plain = _plain_scalar(node)
    return "null" if plain is None else str(plain).lower() if isinstance(plain, bool) else str(plain)
