"""The cluster as the live source: list every kind pyclassify follows, then watch each, and
apply every event to the engine as a delta (``pyclassify.live.LiveProject``), never a rebuild.

- The initial list builds the project once (``build_project``, the same kinds code as files:
  objects arrive as dicts and become ``Document``s named ``Kind namespace/name``, so errors
  read ``Kind namespace/name: field.path: message``).
- Each watch starts at its list's resourceVersion with bookmarks; a ``410 Gone`` (as the answer
  or as an ERROR event) lists that kind again and applies the difference, object by object; a
  broken connection reconnects from the last resourceVersion after a capped exponential
  backoff.
- Pods, Namespaces, policies, Nodes, ServiceAccounts, Services and EndpointSlices are applied
  one object at a time (``LiveProject.apply``; a Node heartbeat is no change at all); the kinds
  that link objects otherwise (Calico tiers, profiles, sets and host endpoints, workload
  controllers) rebuild the project and reach the engine through ``EngineState.update``, which
  still sends only what changed (counted as ``reloads``).
- An invalid object is rejected alone and logged with its name; its last good version stays,
  kept as compact JSON (a third of the memory of the decoded object, at 10k pods 36 MB less).
- A kind whose CRD is not installed (404 on its list) is skipped, and said so once; it is
  listed again every ``crd_retry`` seconds, and followed from when its CRD is installed.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from pyclassify import kinds
from pyclassify.budget import OverBudget
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.engine import NativeEngine
from pyclassify.kube.client import ApiException, Gone, KubeClient
from pyclassify.kube.resources import RESOURCES, Resource, listed_object
from pyclassify.live import LiveProject, UnsupportedChange
from pyclassify.project import ObjectKey, Project, build_project, object_key
from pyclassify.sharing import Shared

log = logging.getLogger("pyclassify.kube")

_SLICES = ("discovery.k8s.io", "EndpointSlice")
#: The reasons a rejection is reported under (an Event's ``reason``).
REJECTED = "PolicyRejected"
OVER_BUDGET = "PolicyOverBudget"


def locator(obj: dict[str, Any]) -> str:
    """``Kind namespace/name`` (``Kind name`` for cluster-scoped objects): what errors name."""
    md = obj.get("metadata") or {}
    ns, name = md.get("namespace"), md.get("name") or ""
    return f"{obj.get('kind') or '?'} {ns}/{name}" if ns else f"{obj.get('kind') or '?'} {name}"


def document(obj: dict[str, Any]) -> Document:
    return Document(obj, locator(obj), 0)


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _release_freed_memory() -> None:
    """Hands the heap the initial list freed back to the system (glibc keeps it otherwise:
    the pages of 10k decoded pods stay resident after the objects are gone)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc


class KubeSource:
    """Follows a cluster. ``start()`` lists (the engine is in force when it returns) and starts
    one watch thread per kind; ``engine()`` is the current state; ``stop()`` ends the watches."""

    def __init__(
        self,
        client: KubeClient,
        resources: tuple[Resource, ...] = RESOURCES,
        backoff_cap: float = 5.0,
        watch_timeout: int = 300,
        on_change: Callable[[KubeSource], None] | None = None,
        node: str | None = None,
        crd_retry: float = 30.0,
        domains: Any = None,
        budget: int | None = None,
        on_reject: Callable[[dict[str, Any], str, str], None] | None = None,
    ) -> None:
        self.client = client
        #: Told of each rejected object (it, a reason, the error): ``pyclassify.kube.events``
        #: posts it on the object. Called on the applying thread, so it must not block.
        self.on_reject = on_reject
        #: The bytes the policy set may take once built (``pyclassify.budget``; None: no bound):
        #: a change that would pass it is rejected (its object's last good version stays).
        self.budget = budget
        #: Enforce for this node's pods and host endpoints only (``Inventory.enforcing_node``).
        self.node = node
        #: What DNS taught domain rules (``Inventory.domains``), the same store across rebuilds.
        self.domains = domains
        self.resources = resources
        self.backoff_cap = backoff_cap
        self.crd_retry = crd_retry
        self.watch_timeout = watch_timeout
        self.on_change = on_change
        self.live: LiveProject | None = None
        #: Last good version of every object in force, as compact JSON (``object()`` decodes).
        self.objects: dict[ObjectKey, bytes] = {}
        #: Their resourceVersions (a relist compares them).
        self._rvs: dict[ObjectKey, str] = {}
        #: Objects whose last change was rejected: key -> the first error.
        self.rejected: dict[ObjectKey, str] = {}
        #: Kinds not served (their CRD is not installed): "group/version Kind".
        self.skipped: list[str] = []
        self.metrics: Counter[str] = Counter()
        self.events_by_kind: Counter[str] = Counter()
        #: Seconds from a watch event's arrival to its change in force, for the latest events.
        self.apply_seconds: deque[float] = deque(maxlen=10_000)
        #: When the event (or relist) applied last arrived (``time.monotonic()``).
        self.last_event_at: float | None = None
        self.ready = threading.Event()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._threads: list[threading.Thread] = []
        self._responses: dict[Resource, list[Any]] = {}
        self._versions: dict[Resource, str] = {}
        self._served: list[Resource] = []

    # --- the initial list ---

    def start(self) -> None:
        # Streamed: each listed page is normalized and let go as the project is built; what
        # stays of an object is its compact JSON (10k decoded pods at once are 46 MB).
        stored: dict[ObjectKey, bytes] = {}
        rvs: dict[ObjectKey, str] = {}
        with self._lock:
            project = build_project(self._listed(stored, rvs), Problems(), budget=self.budget)
            for key, error in project.invalid.items():
                self._reject(key, error, orjson.loads(stored[key]) if key in stored else None)
            if project.invalid:
                for key in project.invalid:
                    stored.pop(key, None)
                    rvs.pop(key, None)
                project = self._build({key: orjson.loads(data) for key, data in stored.items()})
            project.inventory.enforcing_node = self.node
            project.inventory.domains = self.domains
            self.live = LiveProject(project, self.budget)
            self.live.index_slices(document(orjson.loads(data)) for key, data in stored.items() if key[:2] == _SLICES)
            self.objects, self._rvs = stored, rvs
            self.metrics["lists"] += 1
        del project
        _release_freed_memory()
        self.ready.set()
        for res in self._served:
            t = threading.Thread(target=self._watch_loop, args=(res,), name=f"watch {res.kind}", daemon=True)
            self._threads.append(t)
            t.start()
        for res in [r for r in self.resources if r not in self._served]:
            t = threading.Thread(target=self._await_crd, args=(res,), name=f"await {res.kind}", daemon=True)
            self._threads.append(t)
            t.start()

    def _await_crd(self, res: Resource) -> None:
        """A kind not served at the start: listed again now and then; once its CRD is installed,
        its objects are applied and it is watched like the others."""
        while not self._stop.wait(self.crd_retry):
            try:
                items, version = self.client.list(res.path)
            except ApiException as exc:
                if exc.status != 404:
                    log.info("%s: list failed: %s", res.kind, exc.status)
                continue
            except Exception as exc:  # noqa: BLE001 - the API is away: try again later
                log.info("%s: list failed: %s", res.kind, exc)
                continue
            with self._lock:
                for obj in items:
                    self._apply(listed_object(obj, res), deleted=False)
                self._versions[res] = version
                self._served.append(res)
                self.skipped.remove(f"{res.api_version} {res.kind}")
                self.metrics["crds_appeared"] += 1
            log.warning("%s %s: now served (CRD installed): following it", res.api_version, res.kind)
            if self.on_change is not None:
                self.on_change(self)
            self._watch_loop(res)
            return

    def _listed(self, stored: dict[ObjectKey, bytes], rvs: dict[ObjectKey, str]) -> Iterator[Document]:
        """Every object of every served kind, as documents; each kept in ``stored``."""
        for res in self.resources:
            try:
                for items, version in self.client.pages(res.path):
                    if not self._served or self._served[-1] is not res:
                        self._served.append(res)
                    self._versions[res] = version
                    for obj in items:
                        obj = listed_object(obj, res)
                        doc = document(obj)
                        key = object_key(doc)
                        stored[key] = orjson.dumps(obj)
                        rvs[key] = _rv(obj)
                        yield doc
            except ApiException as exc:
                if exc.status == 404 and res.crd and res not in self._served:
                    self.skipped.append(f"{res.api_version} {res.kind}")
                    log.warning(
                        "%s %s: not served by this cluster (CRD not installed), skipped", res.api_version, res.kind
                    )
                    continue
                raise

    def object(self, key: ObjectKey) -> dict[str, Any] | None:
        """The last good version of an object in force (None: not in force)."""
        data = self.objects.get(key)
        return None if data is None else orjson.loads(data)

    def _build(self, objects: dict[ObjectKey, dict[str, Any]]) -> Project:
        shared = Shared(parent=self.live.shared if self.live is not None else None)
        project = build_project((document(o) for o in objects.values()), Problems(), shared, self.budget)
        project.inventory.enforcing_node = self.node
        project.inventory.domains = self.domains
        return project

    # --- queries ---

    def engine(self) -> NativeEngine:
        """The state in force, as a ``NativeEngine`` (names for the engine's answers)."""
        with self._lock:
            assert self.live is not None, "start() first"
            return self.live.snapshot()

    @property
    def full_builds(self) -> int:
        assert self.live is not None
        return self.live.state.full_builds

    # --- watching ---

    def _watch_loop(self, res: Resource) -> None:
        backoff = 0.2
        holder: list[Any] = []
        self._responses[res] = holder
        while not self._stop.is_set():
            self._resume.wait()
            if self._stop.is_set():
                return
            try:
                for event in self.client.watch(
                    res.path, self._versions[res], self.watch_timeout, holder, self._cancelled
                ):
                    backoff = 0.2
                    self._event(res, event)
                    if self._stop.is_set() or not self._resume.is_set():
                        break
            except Gone:
                if self._stop.is_set():
                    return
                log.info("%s: watch expired (410 Gone): listing again", res.kind)
                try:
                    self._relist(res)
                except Exception as exc:  # noqa: BLE001 - the API is away: reconnect later
                    log.warning("%s: list failed: %s", res.kind, exc)
                    self._sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_cap)
            except Exception as exc:  # noqa: BLE001 - any broken connection: reconnect
                if self._stop.is_set():
                    return
                if self._resume.is_set():
                    self.metrics["reconnects"] += 1
                    log.info("%s: watch broken (%s): reconnecting in %.1fs", res.kind, type(exc).__name__, backoff)
                    self._sleep(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, self.backoff_cap)

    def _cancelled(self) -> bool:
        return self._stop.is_set() or not self._resume.is_set()

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _event(self, res: Resource, event: dict[str, Any]) -> None:
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "BOOKMARK":
            self._versions[res] = _rv(obj) or self._versions[res]
            self.metrics["bookmarks"] += 1
            return
        if type_ not in ("ADDED", "MODIFIED", "DELETED"):
            return
        t0 = time.monotonic()
        obj = listed_object(obj, res)
        with self._lock:
            self.events_by_kind[res.kind] += 1
            self._apply(obj, deleted=type_ == "DELETED")
            self._versions[res] = _rv(obj) or self._versions[res]
            self.apply_seconds.append(time.monotonic() - t0)
            self.last_event_at = t0
        if self.on_change is not None:
            self.on_change(self)

    def _relist(self, res: Resource) -> None:
        t0 = time.monotonic()
        items, rv = self.client.list(res.path)
        group_kind = (kinds.api_group(res.api_version), res.kind)
        with self._lock:
            self.metrics["relists"] += 1
            listed: set[ObjectKey] = set()
            for obj in items:
                obj = listed_object(obj, res)
                key = object_key(document(obj))
                listed.add(key)
                if key not in self.objects or self._rvs.get(key) != _rv(obj):
                    self._apply(obj, deleted=False)
            for key in [k for k in self.objects if k[:2] == group_kind and k not in listed]:
                old = self.object(key)
                assert old is not None
                self._apply(old, deleted=True)
            self._versions[res] = rv
            self.last_event_at = t0
        if self.on_change is not None:
            self.on_change(self)

    # --- one object's change ---

    def _apply(self, obj: dict[str, Any], deleted: bool) -> None:
        assert self.live is not None
        doc = document(obj)
        key = object_key(doc)
        before = self.object(key)
        after = None if deleted else obj
        if before is None and after is None:
            self.rejected.pop(key, None)
            return
        per_object = True
        self.live.where = (doc.file, 0)
        try:
            self.live.apply(before, after)
        except UnsupportedChange:
            per_object = False
        except OverBudget as exc:
            self.metrics["over_budget"] += 1
            self._reject(key, f"{doc.file}: {exc}", obj, OVER_BUDGET)
            return
        except InvalidInput as exc:
            self._reject(key, str(exc.problems[0]) if exc.problems else str(exc), obj)
            return
        except Exception as exc:  # noqa: BLE001 - the engine refused the delta: nothing changed
            if type(exc).__name__ != "EngineError":
                raise
            self._reject(key, f"{doc.file}: {exc}", obj)
            return
        if not per_object:
            self.metrics["reloads"] += 1
            objects = {k: orjson.loads(v) for k, v in self.objects.items() if k != key}
            if after is not None:
                objects[key] = after
            try:
                project = self._build(objects)
            except OverBudget as exc:
                self.metrics["over_budget"] += 1
                self._reject(key, f"{doc.file}: {exc}", obj, OVER_BUDGET)
                return
            if after is not None and key in project.invalid:
                self._reject(key, project.invalid[key], obj)
                return
            self.live.reload(project)
        if after is None:
            self.objects.pop(key, None)
            self._rvs.pop(key, None)
        else:
            self.objects[key] = orjson.dumps(after)
            self._rvs[key] = _rv(after)
        self.rejected.pop(key, None)

    def _reject(self, key: ObjectKey, error: str, obj: dict[str, Any] | None = None, reason: str = REJECTED) -> None:
        self.rejected[key] = error
        self.metrics["rejected"] += 1
        log.warning("rejected (its last good version stays): %s", error)
        if self.on_reject is not None and obj is not None:
            try:
                self.on_reject(obj, reason, error)
            except Exception as exc:  # noqa: BLE001 - reporting never fails the change
                log.warning("could not report the rejection of %s: %s", locator(obj), exc)

    # --- stopping, and holding the watches (a partition, for tests and restarts) ---

    def suspend(self) -> None:
        """Drop every watch connection and hold them down until ``resume()``."""
        self._resume.clear()
        self._close_responses()

    def resume(self) -> None:
        self._resume.set()

    def stopped_threads(self) -> list[str]:
        """The watch threads that have ended while this source was not stopped (each runs until
        ``stop()``: one that ended has died)."""
        return [] if self._stop.is_set() else [t.name for t in self._threads if not t.is_alive()]

    def stop(self) -> None:
        self._stop.set()
        self._resume.set()
        self._close_responses()
        for t in self._threads:
            t.join(timeout=10)

    def _close_responses(self) -> None:
        for holder in list(self._responses.values()):
            for resp in list(holder):
                try:
                    resp.response.shutdown() if hasattr(resp.response, "shutdown") else resp.response.close()
                except Exception:  # noqa: BLE001 - already closed
                    pass
