"""``pyclassify enforce --kubeconfig``: the daemon's policy source is the cluster.

``KubePolicySource`` has the interface of ``pyclassify.enforce.file_source.PolicySource``
(``load() -> Loaded``): the first load lists the cluster (``KubeSource.start``; the engine is
in force when it returns); later loads hand over what the watch has applied since, as one engine
snapshot reached by deltas (never a rebuild). ``watch(callback)`` calls back after each event
the watch applied, from the watch's thread; the daemon reloads (swaps the snapshot in). An
object the watch rejects gets a Warning Event (``pyclassify.kube.events``), posted off that path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyclassify.budget import OverBudget
from pyclassify.documents import Problems
from pyclassify.enforce.file_source import Loaded, SourceError
from pyclassify.kube.client import load_client
from pyclassify.kube.events import EventRecorder
from pyclassify.kube.listwatch import KubeSource
from pyclassify.project import ObjectKey, Project


class KubePolicySource:
    def __init__(
        self,
        kubeconfig: str | None,
        context: str | None,
        in_cluster: bool | None = None,
        node: str | None = None,
        mark: int = 0,
        budget: int | None = None,
    ) -> None:
        self.kubeconfig, self.context, self.in_cluster = kubeconfig, context, in_cluster
        self.node = node
        self.mark = mark  # of the sockets to the API server (the daemon's rules let them through)
        self.budget = budget  # the bytes the policy set may take once built (None: no bound)
        self.domains: Any = None  # what DNS taught domain rules (the daemon's store)
        self.kube: KubeSource | None = None
        self.events: EventRecorder | None = None
        self._callback: Callable[[float | None], Any] | None = None
        self._deltas = 0
        self._rejected: dict[ObjectKey, str] = {}

    def load(self) -> Loaded:
        if self.kube is None:
            try:
                client = load_client(self.kubeconfig, self.context, self.in_cluster, self.mark)
                self.events = EventRecorder(client, host=self.node)
                self.kube = KubeSource(
                    client,
                    on_change=self._changed,
                    node=self.node,
                    domains=self.domains,
                    budget=self.budget,
                    on_reject=self.events.warn,
                )
                self.kube.start()
            except OverBudget as e:  # nothing in force yet to keep: refuse to start
                raise SourceError([str(e)]) from e
            except Exception as e:  # noqa: BLE001 - no cluster, no policy: refuse to start
                raise SourceError([f"cannot read the cluster: {e}"]) from e
        kube = self.kube
        with kube._lock:
            engine = kube.engine()
            assert kube.live is not None
            state = kube.live.state
            changed = state.deltas - self._deltas or (1 if self._deltas == 0 else 0)
            self._deltas = state.deltas
            rejected = {k: v for k, v in kube.rejected.items() if self._rejected.get(k) != v}
            self._rejected = dict(kube.rejected)
        project = Project(policy_set=engine.policy_set, inventory=engine.inventory, problems=Problems())
        return Loaded(project, engine, rejected, [], changed)

    def watch(self, callback: Callable[[float | None], Any]) -> None:
        """Call ``callback(arrived)`` after every change the watch applies, with the monotonic
        time its event arrived (and once now, for what it applied before this was called)."""
        self._callback = callback
        callback(None)

    def _changed(self, source: KubeSource) -> None:
        if self._callback is not None:
            self._callback(source.last_event_at)

    def stop(self) -> None:
        self._callback = None
        if self.kube is not None:
            self.kube.stop()
        if self.events is not None:
            self.events.stop()

    def not_healthy(self) -> str | None:
        """What is wrong with following the cluster (None: nothing): a watch thread has died."""
        dead = self.kube.stopped_threads() if self.kube is not None else []
        return f"watch stopped: {', '.join(dead)}" if dead else None

    @property
    def over_budget(self) -> int:
        """Objects rejected because the policy set with them would pass the memory budget."""
        return self.kube.metrics.get("over_budget", 0) if self.kube is not None else 0

    def footprint(self) -> int:
        """The estimated bytes of the policy set in force (``Shared.footprint``)."""
        live = self.kube.live if self.kube is not None else None
        return live.shared.footprint if live is not None else 0

    def metrics(self) -> dict[str, int]:
        """Watch events by kind, relists, reconnects, rejected objects."""
        if self.kube is None:
            return {}
        out = {f"events_{k}": v for k, v in self.kube.events_by_kind.items()}
        out.update(self.kube.metrics)
        if self.events is not None:
            out.update({f"rejection_events_{k}": v for k, v in self.events.counters.items()})
        return out
