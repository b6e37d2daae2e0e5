"""What ``pyclassify enforce`` enforces: the manifests under its paths, applied as deltas.

Each load reads the paths again and hands the engine only the objects that changed (through
``NativeEngine.update``): one pod or one policy edited is a delta on the running engine, never a
rebuild. Bad input loses nothing, as an API server would keep a cluster:

- an object with errors is rejected alone, and its last good version stays in force (a new
  object that is invalid is left out); the rest of the change applies;
- a file that cannot be read or parsed keeps the last good versions of its objects.

The first load has no last good versions: any error refuses to start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import orjson

from pyclassify.bulk import collector_paused
from pyclassify.engine import NativeEngine
from pyclassify.loader import iter_paths
from pyclassify.project import ObjectKey, Project, build_project, object_key
from pyclassify.source import Document, Problems


class SourceError(RuntimeError):
    """The first load has errors: nothing to fall back to."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


@dataclass
class Loaded:
    project: Project
    engine: NativeEngine
    #: Objects whose change was rejected (the last good version, if any, stays): key -> error.
    rejected: dict[ObjectKey, str] = field(default_factory=dict)
    #: Files that could not be read or parsed (their objects' last good versions stay).
    broken_files: list[str] = field(default_factory=list)
    #: Objects the engine received in this load's delta.
    changed: int = 0
    #: Seconds spent building the engine's delta (``build``) and keeping every object's last
    #: good version (``keep``); the rest of the load is reading, parsing and validating.
    build_s: float = 0.0
    keep_s: float = 0.0


@dataclass
class _Good:
    """An object's last good version: its document, compact, and where it came from."""

    data: bytes
    file: str
    line: int

    def document(self) -> Document:
        return Document(orjson.loads(self.data), self.file, self.line)


class PolicySource:
    def __init__(self, paths: list[str], node: str | None = None) -> None:
        self.paths = list(paths)
        self.node = node  # enforce for this node's endpoints only (Inventory.enforcing_node)
        self.engine: NativeEngine | None = None
        self._good: dict[ObjectKey, _Good] = {}

    def load(self) -> Loaded:
        with collector_paused():
            return self._load()

    def _load(self) -> Loaded:
        problems = Problems()
        docs = list(iter_paths(self.paths, problems))
        first = self.engine is None
        if first and problems.errors:
            raise SourceError([str(p) for p in problems.errors])
        broken = sorted({p.file for p in problems.errors})
        doc_keys = [object_key(d) for d in docs]  # computed once per document
        keys = set(doc_keys)
        # A file that did not parse: its objects that did not load keep their last good version.
        for key, good in self._good.items():
            if good.file in broken and key not in keys:
                docs.append(good.document())
                doc_keys.append(key)
        project = build_project(docs, Problems())
        rejected = dict(project.invalid)
        if rejected:
            if first:
                raise SourceError([str(p) for p in project.problems.errors])
            kept = [d for d, key in zip(docs, doc_keys) if key not in rejected]
            kept += [self._good[k].document() for k in rejected if k in self._good]
            project = build_project(kept, Problems())
        project.inventory.enforcing_node = self.node
        t_build = time.monotonic()
        if self.engine is None:
            engine = NativeEngine(project.policy_set, project.inventory)
        else:
            engine = self.engine.update(project.policy_set, project.inventory)
        self.engine = engine
        built = time.monotonic()
        for d, key in zip(docs, doc_keys):
            if key not in rejected:
                self._good[key] = _Good(orjson.dumps(d.obj), d.file, d.line)
        for key in [k for k in self._good if k not in keys and self._good[k].file not in broken]:
            del self._good[key]
        return Loaded(project, engine, rejected, broken, engine.state.last_delta_size, built - t_build,
                      time.monotonic() - built)
