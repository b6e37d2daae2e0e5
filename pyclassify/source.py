"""Where manifest content came from, and the problems found in it.

Every error a person sees names ``file:line: field.path: message``. Loaders produce
``Document`` objects that remember the line of every field; normalizers and validators report
``Problem`` objects through a ``Problems`` collector, so one run reports every error at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Union

PathPart = Union[str, int]
FieldPath = tuple[PathPart, ...]


def format_path(path: FieldPath) -> str:
    """``("spec", "ingress", 0, "from")`` -> ``spec.ingress[0].from``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass
class Document:
    """One object of a manifest file (a document, or one item of a ``List``)."""

    obj: dict[str, Any]
    file: str
    line: int  # 1-based line where the object starts
    # field path -> 1-based line, for every mapping key and sequence item the loader saw
    lines: dict[FieldPath, int] = field(default_factory=dict, repr=False)
    base: FieldPath = ()  # path of this object inside its file (items[3] of a List)

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
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class Problems:
    """Collects every problem of a run, in the order found."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def error(self, doc: Document, path: FieldPath, message: str) -> None:
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


class InvalidInput(Exception):
    """Raised when input has errors; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
