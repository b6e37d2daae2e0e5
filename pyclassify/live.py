"""A project kept current one object at a time: what a watch delivers (and what the scale
benchmarks time as "a change in force").

``LiveProject(project)`` builds the engine once; ``apply(before, after)`` takes one object's
change (``before`` None: added; ``after`` None: deleted), normalizes just that object, updates
the inventory and policy set, and hands the engine only the objects it touches as one delta:

- a Pod is one endpoint (and the Services that select it without EndpointSlices: their
  endpoint addresses follow the pod);
- a Namespace is its labels (selectors see them under ``ns:``; identities stay);
- a policy kind (NetworkPolicy, AdminNetworkPolicy, Calico policies, ...) is its policies.

Other kinds (Nodes, Services, EndpointSlices, service accounts, workload controllers, Calico
inventory kinds) change links between objects: ``apply`` refuses them (``UnsupportedChange``)
and the caller reloads the project, whose ``EngineState.update`` still sends the engine only
what changed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyclassify import kinds
from pyclassify.engine import EngineState, NativeEngine, endpoint_key, policy_key
from pyclassify.inventory import Endpoint
from pyclassify.ir import EndpointKind, Policy, PolicySet
from pyclassify.kinds.inventory import InventoryBuilder, selected_pod_ips
from pyclassify.project import Project
from pyclassify.flow import namespace_labels, service_account_labels
from pyclassify.source import Document, InvalidInput, Problems


class UnsupportedChange(ValueError):
    """A kind whose change is not applied one object at a time (reload the project instead)."""


class LiveProject:
    def __init__(self, project: Project) -> None:
        self.engine = NativeEngine(project.policy_set, project.inventory)
        self.state: EngineState = self.engine.state
        self._index(project)
        self._policy_set: PolicySet | None = project.policy_set
        #: Where the objects of a change come from, for its errors (``Document.file``, ``line``):
        #: a watch names them ``Kind namespace/name`` with no line.
        self.where: tuple[str, int] = ("<change>", 1)

    def reload(self, project: Project) -> NativeEngine:
        """The whole project again (kinds ``apply`` refuses), reached by one delta from the
        current state (``EngineState.update``): only what changed reaches the engine."""
        self.engine = self.state.update(project.policy_set, project.inventory)
        self._index(project)
        self._policy_set = project.policy_set
        return self.engine

    def _doc(self, obj: dict[str, Any]) -> Document:
        return Document(obj, self.where[0], self.where[1])

    def _index(self, project: Project) -> None:
        self.policies: dict[tuple, Policy] = {policy_key(p): p for p in project.policy_set.policies}
        self.tiers = list(project.policy_set.tiers)
        self.profiles = list(project.policy_set.profiles)
        self.inventory = project.inventory
        self._endpoints: dict[tuple, Endpoint] = {endpoint_key(e): e for e in project.inventory.endpoints}
        # Pods by namespace: a Service selects within its namespace.
        self._pods: dict[str, dict[tuple, Endpoint]] = {}
        for key, e in self._endpoints.items():
            if e.kind is EndpointKind.POD and e.namespace:
                self._pods.setdefault(e.namespace, {})[key] = e
        self._selecting: dict[str, list[tuple]] = {}  # namespace -> Services it has with selectors
        for key, svc in project.inventory.services.items():
            if svc.selector and not svc.from_slices:
                self._selecting.setdefault(svc.namespace, []).append(key)
        self._dirty = False
        self._stale = False

    def policy_set(self) -> PolicySet:
        if self._policy_set is None:  # built again only after a policy changed
            self._policy_set = PolicySet.build(list(self.policies.values()), self.tiers, self.profiles)
        return self._policy_set

    def apply(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Any:
        """One object's change, in force on return: the new engine snapshot
        (``pyclassify._engine.Engine``). Invalid objects raise ``InvalidInput`` and change
        nothing."""
        obj = after if after is not None else before
        if obj is None:
            raise ValueError("a change needs the object before or after it")
        doc = self._doc(obj)
        kind = kinds.kind_key(doc)
        if kind == ("", "Pod"):
            self._pod(before, after)
        elif kind == ("", "Namespace"):
            self._namespace(after, doc)
        elif kinds.POLICY_KINDS.get(kind) is not None:
            self._policy(before, after)
        else:
            raise UnsupportedChange(f"{doc.kind} changes are not applied one at a time: reload the project")
        snapshot = self.state.commit()
        self._stale = True
        return snapshot

    def snapshot(self) -> NativeEngine:
        """The current state as a ``NativeEngine`` facade (names for the engine's answers). Every
        change is in the engine already (``apply`` sent it): no project-wide diff here, which at
        10k pods cost more than the change itself."""
        if self._dirty:
            self.inventory = dataclasses.replace(self.inventory, endpoints=list(self._endpoints.values()))
            self._dirty = False
        if self._stale:
            self.engine = NativeEngine._facade(self.state, self.state.model.snapshot(), self.policy_set(),
                                               self.inventory)
            self._stale = False
        return self.engine

    # --- kinds ---

    def _normalize_pod(self, obj: dict[str, Any]) -> Endpoint:
        problems = Problems()
        builder = InventoryBuilder(problems)
        builder.nodes = dict(self.inventory.nodes)  # host-network pods take their node's addresses
        builder.add(self._doc(obj))
        if problems.errors or not builder.endpoints:
            raise InvalidInput(problems.errors)
        return builder._finish_endpoint(builder.endpoints[0])

    def _pod(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        old = self._normalize_pod(before) if before is not None and after is None else None
        new = self._normalize_pod(after) if after is not None else None
        if new is not None:
            key = endpoint_key(new)
            old = self._endpoints.get(key)
            self._endpoints[key] = new
            if new.kind is EndpointKind.POD and new.namespace:
                self._pods.setdefault(new.namespace, {})[key] = new
                if new.namespace not in self.state._namespaces:  # implied, as update() would
                    self.state.set_namespace(new.namespace, namespace_labels(self.inventory, new.namespace))
            self.state.set_endpoint(key, new, service_account_labels(self.inventory, new),
                                    enforced=self.inventory.enforces(new))
        elif old is not None:
            key = endpoint_key(old)
            old = self._endpoints.pop(key, old)
            self._pods.get(old.namespace or "", {}).pop(key, None)
            self.state.delete_endpoint(key)
        self._dirty = True
        namespace = (new or old).namespace if (new or old) is not None else None
        self._services_of(namespace)

    def _services_of(self, namespace: str | None) -> None:
        """Services selecting pods of ``namespace`` without EndpointSlices: their endpoint
        addresses are the selected pods' (``InventoryBuilder._finish_service``)."""
        if namespace is None:
            return
        pods = self._pods.get(namespace, {}).values()
        for key in self._selecting.get(namespace, ()):
            svc = self.inventory.services[key]
            ips = selected_pod_ips(svc, pods)
            if ips != svc.endpoint_ips:
                svc = dataclasses.replace(svc, endpoint_ips=ips)
                self.inventory.services[key] = svc
                self.state.set_service(key, svc)

    def _namespace(self, after: dict[str, Any] | None, doc: Document) -> None:
        if after is None:
            self.inventory.namespaces.pop(doc.name, None)
        else:
            problems = Problems()
            builder = InventoryBuilder(problems)
            builder.add(doc)
            if problems.errors or doc.name not in builder.namespaces:
                raise InvalidInput(problems.errors)
            self.inventory.namespaces[doc.name] = builder.namespaces[doc.name]
        self.state.set_namespace(doc.name, namespace_labels(self.inventory, doc.name))

    def _normalize_policies(self, obj: dict[str, Any]) -> list[Policy]:
        doc = self._doc(obj)
        problems = Problems()
        normalize = kinds.policy_normalizer(doc)
        items = list(normalize(doc, problems)) if normalize is not None else []
        if problems.errors:
            raise InvalidInput(problems.errors)
        return [p for p in items if isinstance(p, Policy)]

    def _policy(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        old = self._normalize_policies(before) if before is not None else []
        new = self._normalize_policies(after) if after is not None else []
        new_keys = {policy_key(p) for p in new}
        for p in old:
            key = policy_key(p)
            if key not in new_keys:
                self.policies.pop(key, None)
                self.state.delete_policy(key)
        for p in new:
            key = policy_key(p)
            self.policies[key] = p
            self.state.set_policy(key, p)
        self._policy_set = None
