"""Where manifest content came from, and the problems found in it.

Every error a person sees names ``file:line: field.path: message``. Loaders produce
``Document`` objects that remember the line of every field; normalizers and validators report
``Problem`` objects through a ``Problems`` collector, so one run reports every error at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PathPart = str | int
FieldPath = tuple[PathPart, ...]


def format_path(path: FieldPath) -> str:
    """``("spec", "ingress", 0, "from")`` -> ``spec.ingress[0].from``. A key that is not
    printable text (a newline, a NUL, a terminal escape, a bidi override) is shown quoted and
    escaped, ``metadata.labels['bad\\nkey']``, so that every problem stays one honest line."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif not isinstance(part, str):
            out += f"[{part!r}]"  # a key YAML allows and Kubernetes does not (null, true, 1.5)
        elif not part.isprintable():
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else part
    return out


def shown(value: str, width: int = 80) -> str:
    """``value`` quoted for a message: escaped, and cut after ``width`` characters (a hostile
    100 kB argument is not echoed whole)."""
    if len(value) > width:
        return f"{value[:width]!r}… ({len(value)} characters)"
    return repr(value)


def printable(text: str) -> str:
    """``text`` with what is not printable escaped (as ``repr`` does, without the quotes)."""
    return text if text.isprintable() else repr(text)[1:-1]


class Document:
    """One object of a manifest file (a document, or one item of a ``List``).

    ``lines`` maps field paths to 1-based lines, for every mapping key and sequence item of the
    object. The loader does not compute it up front: it passes ``positions``, a callable that
    recovers it from the file's text the first time it is needed (an error to report)."""

    __slots__ = ("obj", "file", "line", "base", "_lines", "_positions")

    def __init__(
        self,
        obj: dict[str, Any],
        file: str,
        line: int,  # 1-based line where the object starts
        lines: dict[FieldPath, int] | None = None,
        base: FieldPath = (),  # path of this object inside its file (items[3] of a List)
        positions: Callable[[], dict[FieldPath, int]] | None = None,
    ) -> None:
        self.obj = obj
        self.file = file
        self.line = line
        self.base = base
        self._lines = lines
        self._positions = positions

    @property
    def lines(self) -> dict[FieldPath, int]:
        if self._lines is None:
            positions, self._positions = self._positions, None
            self._lines = positions() if positions is not None else {}
        return self._lines

    @lines.setter
    def lines(self, lines: dict[FieldPath, int]) -> None:
        self._lines, self._positions = lines, None

    def __repr__(self) -> str:
        return f"Document(obj={self.obj!r}, file={self.file!r}, line={self.line!r}, base={self.base!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (self.obj, self.file, self.line, self.base, self.lines) == (
            other.obj,
            other.file,
            other.line,
            other.base,
            other.lines,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion") or "")

    @property
    def metadata(self) -> dict[str, Any]:
        md = self.obj.get("metadata")
        return md if isinstance(md, dict) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str | None:
        ns = self.metadata.get("namespace")
        return str(ns) if ns else None

    def locator(self) -> Document:
        """This document without its object: where it came from, its lines still recovered only
        when asked (keeping one per object costs little; keeping the objects would not)."""
        if self._lines is not None:
            return Document({}, self.file, self.line, self._lines, self.base)
        return Document({}, self.file, self.line, None, self.base, self._positions)

    def with_object(self, obj: dict[str, Any]) -> Document:
        """Another object at this document's place (its lines shared): a normalizer that
        reads a kind through another kind's rules (a staged policy through its enforced kind)."""
        if self._lines is not None:
            return Document(obj, self.file, self.line, self._lines, self.base)
        return Document(obj, self.file, self.line, None, self.base, self._share_positions)

    def _share_positions(self) -> dict[FieldPath, int]:
        return self.lines

    def line_of(self, path: FieldPath) -> int:
        """The line of the deepest known field on ``path`` (the object's line if none)."""
        for n in range(len(path), 0, -1):
            line = self.lines.get(tuple(path[:n]))
            if line is not None:
                return line
        return self.line

    def get(self, path: FieldPath, default: Any = None) -> Any:
        node: Any = self.obj
        for part in path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return default
        return node


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    path: str
    message: str
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        # line 0: an object with no file (from the Kubernetes API), named by ``file`` alone
        where = f"{printable(self.file)}:{self.line}" if self.line else printable(self.file)
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


DocumentKey = tuple[str, int, FieldPath]  # (file, line, base): one object of one run


def document_key(doc: Document) -> DocumentKey:
    return (doc.file, doc.line, doc.base)


class Problems:
    """Collects every problem of a run, in the order found.

    One error per field: once the schema check of an object has reported fields
    (``pyclassify.kinds.schema.check``, ``refuse``), errors its kind's code finds at or under
    those fields are not added again."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        #: inputs given by name that held no document at all (``pyclassify`` exits 1)
        self.empty_inputs: list[str] = []
        #: objects whose schema check refused fields in this run -> those fields, as printed
        self.schema_refused: dict[DocumentKey, tuple[str, ...]] = {}
        #: documents skipped as no Kubernetes object (a Helm values file, a configuration)
        self.not_objects = 0

    def refuse(self, doc: Document, paths: tuple[str, ...]) -> None:
        self.schema_refused[document_key(doc)] = paths

    def error(self, doc: Document, path: FieldPath, message: str) -> None:
        if self.schema_refused:
            refused = self.schema_refused.get((doc.file, doc.line, doc.base))
            if refused and _under(format_path(path), refused):
                return
        self.items.append(Problem(doc.file, doc.line_of(path), format_path(path), message))

    def warning(self, doc: Document, path: FieldPath, message: str) -> None:
        self.items.append(Problem(doc.file, doc.line_of(path), format_path(path), message, "warning"))

    def add(self, problem: Problem) -> None:
        self.items.append(problem)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "warning"]

    def __bool__(self) -> bool:
        return bool(self.errors)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def _under(path: str, fields: tuple[str, ...]) -> bool:
    """Whether the field ``path`` is one of ``fields`` or inside one (all as printed)."""
    return any(path == f or path.startswith((f + ".", f + "[")) or not f for f in fields)


class InvalidInput(Exception):
    """Raised when input has errors; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
