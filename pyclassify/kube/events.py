"""Warning Events (core/v1) on the objects the cluster source rejects, so that ``kubectl describe``
of the object says why it is not in force.

Recorded the way Kubernetes' own components record them: off the caller's path (``warn`` only
queues; one thread posts), the same object and reason within ``window`` seconds bumping the
``count`` of the Event already posted instead of creating another, the remembered Events bounded
(least recently used dropped first), and a token bucket per object (a burst, then one Event per
``refill`` seconds) so an object rejected in a loop cannot flood the API server. A full queue
drops the Event and a failed post is logged; both are counted (``counters``). Nothing here ever
raises into the reload.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
import uuid
from collections import Counter, OrderedDict
from typing import Any

from pyclassify.kube.client import ApiException, KubeClient

log = logging.getLogger("pyclassify.kube.events")

#: What the Events name as their source.
COMPONENT = "pyclassify"
#: Events of cluster-scoped objects go to this namespace, as Kubernetes' recorders put them.
CLUSTER_SCOPED_NAMESPACE = "default"
#: The API server keeps messages; a rejection of a large object should not write a large Event.
MAX_MESSAGE = 1024
MERGE = "application/merge-patch+json"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``involvedObject`` of an Event about ``obj``."""
    md = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion") or "", "kind": obj.get("kind") or "", "name": md.get("name") or ""}
    for field in ("namespace", "uid", "resourceVersion"):
        if md.get(field):
            ref[field] = str(md[field])
    return ref


class _Bucket:
    """A token bucket: ``burst`` tokens, one back every ``refill`` seconds."""

    def __init__(self, burst: int, refill: float) -> None:
        self.tokens, self.burst, self.refill, self.at = float(burst), burst, refill, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) / self.refill)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        host: str | None = None,
        window: float = 600.0,
        remembered: int = 4096,
        queued: int = 256,
        burst: int = 25,
        refill: float = 300.0,
    ) -> None:
        self.client = client
        self.host = host
        self.window = window
        self.remembered = remembered
        self.burst, self.refill = burst, refill
        #: created, patched (a repeat counted on the Event already posted), failed (the API
        #: refused or was away: logged), dropped (queue full), limited (the object's bucket empty).
        self.counters: Counter[str] = Counter()
        self._queue: queue.Queue[tuple[dict[str, Any], str, str] | None] = queue.Queue(queued)
        #: (object, reason) -> [namespace, Event name, count, monotonic time of the last post].
        self._posted: OrderedDict[tuple[str, ...], list[Any]] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def warn(self, obj: dict[str, Any], reason: str, message: str) -> None:
        """Queue a Warning about ``obj``; never blocks, never raises."""
        try:
            self._queue.put_nowait((obj, reason, message[:MAX_MESSAGE]))
        except queue.Full:
            self.counters["dropped"] += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until what was queued has been posted (for tests and stopping)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._record(*item)
            except Exception as exc:  # noqa: BLE001 - an Event is best effort: say so and go on
                self.counters["failed"] += 1
                log.warning("could not post an Event: %s", exc)
            finally:
                self._queue.task_done()

    def _record(self, obj: dict[str, Any], reason: str, message: str) -> None:
        ref = reference(obj)
        who = (ref["apiVersion"], ref["kind"], ref.get("namespace", ""), ref["name"], ref.get("uid", ""))
        key = (*who, reason)
        now = time.monotonic()
        seen = self._posted.get(key)
        if seen is not None and now - seen[3] < self.window:
            namespace, name, count, _ = seen
            seen[2], seen[3] = count + 1, now
            self._posted.move_to_end(key)
            try:
                self.client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/events/{name}",
                    content_type=MERGE,
                    body={"count": count + 1, "lastTimestamp": _now(), "message": message, "involvedObject": ref},
                    timeout=10,
                )
                self.counters["patched"] += 1
                return
            except ApiException as exc:
                if exc.status != 404:  # the Event expired (its TTL): post a new one below
                    raise
        if not self._bucket(who).take():
            self.counters["limited"] += 1
            return
        namespace = ref.get("namespace") or CLUSTER_SCOPED_NAMESPACE
        stamp = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": ref,
            "type": "Warning",
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT, **({"host": self.host} if self.host else {})},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host or "",
        }
        created = self.client.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event, timeout=10)
        self.counters["created"] += 1
        self._posted[key] = [namespace, created["metadata"]["name"], 1, now]
        self._posted.move_to_end(key)
        while len(self._posted) > self.remembered:
            self._posted.popitem(last=False)

    def _bucket(self, who: tuple[str, ...]) -> _Bucket:
        bucket = self._buckets.get(who)
        if bucket is None:
            bucket = self._buckets[who] = _Bucket(self.burst, self.refill)
        self._buckets.move_to_end(who)
        while len(self._buckets) > self.remembered:
            self._buckets.popitem(last=False)
        return bucket
