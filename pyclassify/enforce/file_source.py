"""What ``pyclassify enforce`` enforces: the manifests under its paths, applied as deltas.

Each load looks at the paths again: a file unchanged since it was read is not read again
(``loader.ParseCache``), and the objects that changed reach the engine one at a time through a
``LiveProject``, as a watch's events do: one pod or one policy edited costs what it touches, not
a rebuild, at 10k pods as at ten. A change of a kind that relinks other objects (tiers,
profiles, sets, host endpoints, ...) builds the project again and hands the engine the
difference (``EngineState.update``). Bad input loses nothing, as an API server would keep a cluster:

- an object with errors is rejected alone, and its last good version stays in force (a new
  object that is invalid is left out); the rest of the change applies;
- a file that cannot be read or parsed keeps the last good versions of its objects, and so does
  a path that vanished (a policy root removed, or swapped away mid-rename: ``not_healthy``
  says so while it lasts), a directory that cannot be listed, and a file emptied (one that
  still parses but holds no object, as a writer truncating it leaves it). A deletion is a file
  removed from a directory that is still there, or an object removed from a file that still
  holds others, as ``kubectl apply`` of an empty file deletes nothing;
- a special file (a FIFO, a socket, a device) is skipped with a warning, never opened;
- a policy set whose estimated memory passes the budget (``pyclassify.budget``) is rejected
  whole, before the engine builds it (``OverBudget``): what is in force stays.

The first load has no last good versions: any error refuses to start.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from pyclassify.budget import OverBudget
from pyclassify.bulk import collector_paused
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.engine import EngineError, NativeEngine
from pyclassify.live import LiveProject, UnsupportedChange
from pyclassify.loader import ParseCache, iter_paths, special_file
from pyclassify.project import ObjectKey, Project, build_project, object_key
from pyclassify.sharing import Shared


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
    #: Paths whose objects keep their last good versions, and why (gone, unreadable, emptied,
    #: not parsed): what a reload says of them.
    kept: dict[str, str] = field(default_factory=dict)


@dataclass
class _Good:
    """An object's last good version: its document, compact, and where it came from."""

    data: bytes
    file: str
    line: int

    def document(self) -> Document:
        return Document(orjson.loads(self.data), self.file, self.line)


class PolicySource:
    def __init__(
        self, paths: list[str], node: str | None = None, settle: float = 1.0, budget: int | None = None
    ) -> None:
        self.paths = list(paths)
        #: The bytes the policy set may take once built (None: no bound), and the updates
        #: rejected for passing it.
        self.budget = budget
        self.over_budget = 0
        self.node = node  # enforce for this node's endpoints only (Inventory.enforcing_node)
        self.engine: NativeEngine | None = None
        self._good: dict[ObjectKey, _Good] = {}
        #: The objects in force, kept current one object at a time (``_apply_changes``).
        self.live: LiveProject | None = None
        self._project: Project | None = None  # the last project built whole
        self._rejected: set[ObjectKey] = set()  # invalid now: judged again on every load
        self._cache = ParseCache(settle)  # files unchanged since the last load are not read again
        #: What DNS taught (``Inventory.domains``): the same store across loads, so a policy
        #: change keeps what was learned.
        self.domains: Any = None

    def load(self) -> Loaded:
        with collector_paused():
            try:
                return self._load()
            except OverBudget:
                self.over_budget += 1
                self._cache.forget(self._cache.read)  # the update was not taken: its files are read again
                raise

    def footprint(self) -> int:
        """The estimated bytes of the policy set in force (``Shared.footprint``)."""
        return self.live.shared.footprint if self.live is not None else 0

    def _load(self) -> Loaded:
        problems = Problems()
        self._cache.begin()
        docs = list(iter_paths(self.paths, problems, self._cache))
        self._cache.end()
        first = self.engine is None
        if first and problems.errors:
            raise SourceError([str(p) for p in problems.errors])
        held = self._held_back(docs, problems) if not first else {}
        broken = sorted(held)
        doc_keys = []  # computed once per document (and kept while its file is unchanged)
        memos: dict[str, dict[int, ObjectKey]] = {}
        for d in docs:
            memo = memos.get(d.file)
            if memo is None:
                memo = memos[d.file] = self._cache.memo(d.file)
            key = memo.get(id(d))
            if key is None:
                key = memo[id(d)] = object_key(d)
            doc_keys.append(key)
        keys = set(doc_keys)
        # A path held back (gone, unreadable, emptied, not parsed): its objects that did not load
        # keep their last good version.
        for key, good in self._good.items():
            if _under(good.file, held) and key not in keys:
                docs.append(good.document())
                doc_keys.append(key)
        if not first:
            fast = self._apply_changes(docs, doc_keys, held)
            if fast is not None:
                return fast
        project = self._build(docs, first)
        rejected = dict(project.invalid)
        if rejected:
            if first:
                raise SourceError([str(p) for p in project.problems.errors])
            kept = [d for d, key in zip(docs, doc_keys) if key not in rejected]
            kept += [self._good[k].document() for k in rejected if k in self._good]
            project = self._build(kept, first)
        project.inventory.enforcing_node = self.node
        project.inventory.domains = self.domains
        t_build = time.monotonic()
        if self.live is None:
            self.live = LiveProject(project, self.budget)
            engine = self.live.engine
        else:
            engine = self.live.reload(project)
        self.engine, self._project = engine, project
        self._rejected = set(rejected)
        built = time.monotonic()
        for d, key in zip(docs, doc_keys):
            if key not in rejected:
                self._good[key] = _Good(orjson.dumps(d.obj), d.file, d.line)
        for key in [k for k in self._good if k not in keys and not _under(self._good[k].file, held)]:
            del self._good[key]
        return Loaded(
            project,
            engine,
            rejected,
            broken,
            engine.state.last_delta_size,
            built - t_build,
            time.monotonic() - built,
            kept=held,
        )

    def _build(self, docs: list[Document], first: bool) -> Project:
        """The whole project, its parts shared with the set in force; over the budget: the first
        load refuses to start, a later one raises ``OverBudget`` (the update is rejected whole)."""
        try:
            return build_project(docs, Problems(), Shared(parent=self.live.shared if self.live else None), self.budget)
        except OverBudget as e:
            if first:
                raise SourceError([str(e)]) from e
            raise

    def _held_back(self, docs: list[Document], problems: Problems) -> dict[str, str]:
        """The paths whose objects keep their last good versions this load, and why: a root
        that is gone, a file or directory that cannot be read or parsed, a file that still
        parses but holds no object any more."""
        held: dict[str, str] = {}
        for root in self.paths:
            if not os.path.exists(root):
                held[_norm(root)] = "gone (no such file or directory)"
        for p in problems.errors:
            held.setdefault(_norm(p.file), "cannot be read or parsed")
        read = {_norm(d.file) for d in docs}
        for good in self._good.values():
            name = _norm(good.file)
            if name in read or _under(name, held):
                continue
            if not os.path.isdir(os.path.dirname(name) or "."):
                held[os.path.dirname(name)] = "gone (its directory was removed or renamed away)"
            elif os.path.islink(name) and not os.path.exists(name):
                held[name] = "a dangling link now (cannot be read)"
            elif _special(name):
                held[name] = "no longer a regular file (skipped, never read)"
            elif os.path.isfile(name):
                held[name] = "holds no object now (emptied; remove the file to delete its objects)"
        return held

    def not_healthy(self) -> str | None:
        """Why the policy input is broken (None: it is not): a policy path that is gone."""
        gone = [root for root in self.paths if not os.path.exists(root)]
        return f"policy path gone: {', '.join(gone)} (its last good objects stay in force)" if gone else None

    def _apply_changes(self, docs: list[Document], doc_keys: list[ObjectKey], held: dict[str, str]) -> Loaded | None:
        """The objects that changed since the last load, one at a time through the live project
        (as a watch applies events): a change costs what that object touches, not a rebuild of
        the whole project. None when a change needs the whole project (a kind ``LiveProject``
        does not take one at a time, or the same object twice): the caller builds it."""
        assert self.live is not None and self._project is not None
        present: dict[ObjectKey, Document] = {}
        for d, key in zip(docs, doc_keys):
            if key in present:
                return None  # defined twice: the whole project says which one stands, and why
            present[key] = d
        fresh = set(self._cache.read)  # files read this time (the others are the same objects)
        changes: list[tuple[ObjectKey, _Good | None, Document | None, bytes | None]] = []
        for key, d in present.items():
            good = self._good.get(key)
            if good is not None and d.file == good.file and d.file not in fresh and key not in self._rejected:
                continue
            data = orjson.dumps(d.obj)
            if good is not None and good.data == data and key not in self._rejected:
                self._good[key] = _Good(data, d.file, d.line)
                continue
            changes.append((key, good, d, data))
        for key, good in self._good.items():
            if key not in present and not _under(good.file, held):
                changes.append((key, good, None, None))
        t_build = time.monotonic()
        rejected: dict[ObjectKey, str] = {}
        changed = 0
        applied: list[tuple[ObjectKey, _Good | None, Document | None]] = []
        for key, good, new, new_data in changes:
            where = new if new is not None else good
            assert where is not None
            self.live.where = (where.file, where.line)
            try:
                self.live.apply(None if good is None else orjson.loads(good.data), None if new is None else new.obj)
            except UnsupportedChange:
                self._undo(applied)  # the whole project decides, from the state before the update
                return None
            except OverBudget:
                self._undo(applied)  # the update is rejected whole
                raise
            except InvalidInput as e:
                rejected[key] = str(e.problems[0]) if e.problems else str(e)
                continue
            except EngineError as e:  # the engine refused the delta: nothing changed
                rejected[key] = f"{where.file}: {e}"
                continue
            changed += self.live.state.last_delta_size
            applied.append((key, good, new))
            if new is None:
                del self._good[key]
            else:
                assert new_data is not None
                self._good[key] = _Good(new_data, new.file, new.line)
        # every key rejected before and still present was a change above, judged again just now
        self._rejected = set(rejected)
        self.engine = engine = self.live.snapshot()
        project = dataclasses.replace(
            self._project,
            policy_set=engine.policy_set,
            inventory=engine.inventory,
            problems=Problems(),
            invalid=rejected,
        )
        return Loaded(project, engine, rejected, sorted(held), changed, time.monotonic() - t_build, 0.0, kept=held)

    def _undo(self, applied: list[tuple[ObjectKey, _Good | None, Document | None]]) -> None:
        """The changes of an update applied so far, taken back (last first): each object's last
        good version in force again, as before the update."""
        assert self.live is not None
        for key, good, d in reversed(applied):
            self.live.apply(None if d is None else d.obj, None if good is None else orjson.loads(good.data))
            if good is None:
                self._good.pop(key, None)
            else:
                self._good[key] = good


def _norm(path: str) -> str:
    return os.path.normpath(path)


def _under(path: str, held: Any) -> bool:
    """Whether ``path`` is one of the paths ``held`` or below one of them."""
    path = _norm(path)
    while True:
        if path in held:
            return True
        parent = os.path.dirname(path)
        if parent == path or not parent:
            return False
        path = parent


def _special(path: str) -> bool:
    try:
        return special_file(os.stat(path).st_mode) is not None
    except OSError:
        return False
