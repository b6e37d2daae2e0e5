"""A project kept current one object at a time: what a watch delivers (and what the scale
benchmarks time as "a change in force").

``LiveProject(project)`` builds the engine once; ``apply(before, after)`` takes one object's
change (``before`` None: added; ``after`` None: deleted), normalizes just that object, updates
the inventory and policy set, and hands the engine only the objects it touches as one delta:

- a Pod is one endpoint (and the Services that select it without EndpointSlices: their
  endpoint addresses follow the pod);
- a Namespace is its labels (selectors see them under ``ns:``; identities stay);
- a policy kind (NetworkPolicy, AdminNetworkPolicy, Calico policies, ...) is its policies;
- a Node is its labels and addresses (a change of neither, as a status heartbeat, is no delta);
- a ServiceAccount is its labels, on the pods that run as it;
- a Service is its virtual IPs, ports and endpoint addresses (from its EndpointSlices, else
  from the pods it selects);
- an EndpointSlice is its addresses, on its Service (``index_slices`` first: which slices
  exist; without it slices are refused).

Other kinds (workload controllers, Calico tiers, profiles, staged policies, sets and host endpoints, a node whose
addresses change under endpoints that take them) change links between objects: ``apply``
refuses them (``UnsupportedChange``) and the caller reloads the project, whose
``EngineState.update`` still sends the engine only what changed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyclassify import kinds
from pyclassify.budget import OverBudget
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.engine import EngineState, NativeEngine
from pyclassify.flow import namespace_labels, service_account_labels
from pyclassify.inventory import Endpoint
from pyclassify.ir import STAGED_KINDS, EndpointKind, Hook, Policy, PolicySet
from pyclassify.kinds import schema
from pyclassify.kinds.inventory_kinds import InventoryBuilder, selected_pod_ips
from pyclassify.project import Project, source_size
from pyclassify.sharing import Shared
from pyclassify.spec_builder import endpoint_key, policy_key


class UnsupportedChange(ValueError):
    """A kind whose change is not applied one object at a time (reload the project instead)."""


class LiveProject:
    def __init__(self, project: Project, budget: int | None = None) -> None:
        """``budget``: the bytes the policy set may take (``pyclassify.budget``); a policy
        change that would pass it raises ``OverBudget`` and changes nothing."""
        self.budget = budget
        #: The policies' parts, held once, and what they cost (``pyclassify.sharing``).
        self.shared: Shared = project.shared
        self.engine = NativeEngine(project.policy_set, project.inventory)
        self.state: EngineState = self.engine.state
        self._index(project)
        self._policy_set: PolicySet | None = project.policy_set
        #: EndpointSlices (namespace, name) -> (their Service's key or None, addresses); None
        #: until ``index_slices``.
        self._slices: dict[tuple[str, str], tuple[tuple[str, str] | None, tuple[Any, ...]]] | None = None
        #: Where the objects of a change come from, for its errors (``Document.file``, ``line``):
        #: a watch names them ``Kind namespace/name`` with no line.
        self.where: tuple[str, int] = ("<change>", 1)

    def reload(self, project: Project) -> NativeEngine:
        """The whole project again (kinds ``apply`` refuses), reached by one delta from the
        current state (``EngineState.update``): only what changed reaches the engine."""
        self.engine = self.state.update(project.policy_set, project.inventory)
        self.shared = project.shared
        self._index(project)
        self._policy_set = project.policy_set
        return self.engine

    def _doc(self, obj: dict[str, Any]) -> Document:
        return Document(obj, self.where[0], self.where[1])

    def _index(self, project: Project) -> None:
        self.policies: dict[tuple, Policy] = {policy_key(p): p for p in project.policy_set.policies}
        # Not in the engine (a change to either reloads): staged policies, and doNotTrack and
        # preDNAT policies (judged by engines of their own hooks).
        self.held = list(project.policy_set.staged) + list(project.policy_set.early)
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
            self._policy_set = PolicySet.build(list(self.policies.values()) + self.held, self.tiers, self.profiles)
        return self._policy_set

    def apply(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Any:
        """One object's change, in force on return: the new engine snapshot
        (``pyclassify._engine.Engine``). Invalid objects raise ``InvalidInput`` and change
        nothing."""
        obj = after if after is not None else before
        if obj is None:
            raise ValueError("a change needs the object before or after it")
        doc = self._doc(obj)
        if after is not None:
            problems = Problems()
            if schema.check(doc, problems):  # strict field validation, as the API server's
                raise InvalidInput(problems.errors)
        kind = kinds.kind_key(doc)
        # what keeping the object costs, counted before the budget is judged (``_policy``)
        kept = [(source_size(after), 1)] if after is not None else []
        kept += [(source_size(before), -1)] if before is not None else []
        for size, sign in kept:
            self.shared.count_source(size, sign)
        try:
            self._dispatch(kind, doc, before, after)
        except BaseException:
            for size, sign in kept:
                self.shared.count_source(size, -sign)
            raise
        snapshot = self.state.commit()
        self._stale = True
        return snapshot

    def _dispatch(
        self, kind: tuple[str, str], doc: Document, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        if kind == ("", "Pod"):
            self._pod(before, after)
        elif kind == ("", "Namespace"):
            self._namespace(after, doc)
        elif (
            kinds.POLICY_KINDS.get(kind) is not None
            and kind[1] not in ("Tier", "Profile")
            and kind[1] not in STAGED_KINDS
        ):
            self._policy(before, after)  # tiers and profiles order and complete policies: reload
        elif kind == ("", "Node"):
            self._node(after, doc)
        elif kind == ("", "ServiceAccount"):
            self._service_account(after, doc)
        elif kind == ("", "Service"):
            self._service(after, doc)
        elif kind == ("discovery.k8s.io", "EndpointSlice"):
            self._endpoint_slice(after, doc)
        else:
            raise UnsupportedChange(f"{doc.kind} changes are not applied one at a time: reload the project")

    def snapshot(self) -> NativeEngine:
        """The current state as a ``NativeEngine`` facade (names for the engine's answers). Every
        change is in the engine already (``apply`` sent it): no project-wide diff here, which at
        10k pods cost more than the change itself."""
        if self._dirty:
            self.inventory = dataclasses.replace(self.inventory, endpoints=list(self._endpoints.values()))
            self._dirty = False
        if self._stale:
            self.engine = NativeEngine._facade(
                self.state, self.state.model.snapshot(), self.policy_set(), self.inventory
            )
            self._stale = False
        return self.engine

    # --- kinds ---

    def _normalize_pod(self, obj: dict[str, Any]) -> tuple[Endpoint, bool]:
        """The pod's endpoint, and whether it is one (a pod that holds no address, finished
        or pending, is not: ``kinds.inventory_kinds.pod_without_address``)."""
        problems = Problems()
        builder = InventoryBuilder(problems)
        builder.nodes = self.inventory.nodes  # host-network pods take their node's addresses (read only)
        builder.add(self._doc(obj))
        if problems.errors:
            raise InvalidInput(problems.errors)
        if builder.released:
            return builder.released[0][0], False
        if not builder.endpoints:
            raise InvalidInput(problems.errors)
        return builder._finish_endpoint(builder.endpoints[0]), True

    def _pod(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        old = self._normalize_pod(before)[0] if before is not None and after is None else None
        new = None
        if after is not None:
            new, holds_address = self._normalize_pod(after)
            if not holds_address:  # it finished (or has no address yet): no longer an endpoint
                old, new = new, None
        if new is not None:
            key = endpoint_key(new)
            old = self._endpoints.get(key)
            self._endpoints[key] = new
            if old is None:
                self.shared.count("endpoint", 1)
            if new.kind is EndpointKind.POD and new.namespace:
                self._pods.setdefault(new.namespace, {})[key] = new
                if new.namespace not in self.state._namespaces:  # implied, as update() would
                    self.state.set_namespace(new.namespace, namespace_labels(self.inventory, new.namespace))
            self.state.set_endpoint(
                key, new, service_account_labels(self.inventory, new), enforced=self.inventory.enforces(new)
            )
        elif old is not None:
            key = endpoint_key(old)
            if key in self._endpoints:
                self.shared.count("endpoint", -1)
            old = self._endpoints.pop(key, old)
            self._pods.get(old.namespace or "", {}).pop(key, None)
            self.state.delete_endpoint(key)
        self._dirty = True
        changed = new or old
        namespace = changed.namespace if changed is not None else None
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

    def _inventory_object(self, doc: Document) -> InventoryBuilder:
        """One inventory object normalized alone; its errors raise ``InvalidInput``."""
        problems = Problems()
        builder = InventoryBuilder(problems)
        builder.add(doc)
        if problems.errors:
            raise InvalidInput(problems.errors)
        return builder

    def _node(self, after: dict[str, Any] | None, doc: Document) -> None:
        name = doc.name
        new = self._inventory_object(doc).nodes.get(name) if after is not None else None
        old = self.inventory.nodes.get(name)
        if new == old:
            return  # a heartbeat: nothing policy reads changed
        if (old.addresses if old else ()) != (new.addresses if new else ()) and any(
            e.node == name and (e.host_network or (e.kind is EndpointKind.HOST and e.interface == "*"))
            for e in self._endpoints.values()
        ):
            raise UnsupportedChange("a node's addresses changed under endpoints that take them: reload the project")
        if new is None:
            del self.inventory.nodes[name]
            self.state.delete_node(name)
        else:
            self.inventory.nodes[name] = new
            self.state.set_node(name, new)

    def _service_account(self, after: dict[str, Any] | None, doc: Document) -> None:
        ns, name = doc.namespace or "", doc.name
        key = (ns, name)
        new = self._inventory_object(doc).service_accounts.get(key) if after is not None else None
        if new == self.inventory.service_accounts.get(key):
            return
        if new is None:
            self.inventory.service_accounts.pop(key, None)
        else:
            self.inventory.service_accounts[key] = new
        for ekey, e in self._pods.get(ns, {}).items():
            if e.service_account == name:
                self.state.set_endpoint(
                    ekey, e, service_account_labels(self.inventory, e), enforced=self.inventory.enforces(e)
                )

    def index_slices(self, documents: Any) -> None:
        """The EndpointSlices of the project (documents), so that their changes and their
        Services' changes can be applied one object at a time."""
        self._slices = {}
        for doc in documents:
            self._slices[(doc.namespace or "", doc.name)] = self._slice_entry(doc)

    def _slice_entry(self, doc: Document) -> tuple[tuple[str, str] | None, tuple[Any, ...]]:
        items = list(self._inventory_object(doc).slice_ips.items())
        return (items[0][0], tuple(items[0][1])) if items else (None, ())

    def _endpoint_slice(self, after: dict[str, Any] | None, doc: Document) -> None:
        if self._slices is None:
            raise UnsupportedChange("EndpointSlices are not indexed (index_slices): reload the project")
        key = (doc.namespace or "", doc.name)
        new = self._slice_entry(doc) if after is not None else None
        old = self._slices.get(key)
        if new == old:
            return
        if new is None:
            del self._slices[key]
        else:
            self._slices[key] = new
        for service in {entry[0] for entry in (old, new) if entry is not None and entry[0] is not None}:
            svc = self.inventory.services.get(service)
            if svc is not None:
                self._set_service(service, self._finish_service(svc))

    def _service(self, after: dict[str, Any] | None, doc: Document) -> None:
        key = (doc.namespace or "", doc.name)
        if after is None:
            if key in self.inventory.services:
                del self.inventory.services[key]
                self.state.delete_service(key)
                self._selecting_update(key, None)
            return
        svc = self._inventory_object(doc).services.get(key)
        if svc is None:
            raise InvalidInput([])
        if self._slices is None and (svc.selector is None or self._has_slices(key)):
            raise UnsupportedChange("Services with EndpointSlices need index_slices: reload the project")
        self._set_service(key, self._finish_service(svc))

    def _has_slices(self, key: tuple[str, str]) -> bool:
        old = self.inventory.services.get(key)
        return old is not None and old.from_slices

    def _finish_service(self, svc: Any) -> Any:
        """Its endpoint addresses: its EndpointSlices' (in name order, as a list gives them),
        else the pods it selects (``InventoryBuilder._finish_service``)."""
        key = (svc.namespace, svc.name)
        slices = sorted(
            (name, entry[1])
            for (ns, name), entry in (self._slices or {}).items()
            if ns == svc.namespace and entry[0] == key
        )
        if slices:
            ips: Any = [ip for _, addresses in slices for ip in addresses]
        elif svc.selector:
            ips = selected_pod_ips(svc, self._pods.get(svc.namespace, {}).values())
        else:
            ips = ()
        return dataclasses.replace(svc, endpoint_ips=tuple(dict.fromkeys(ips)), from_slices=bool(slices))

    def _set_service(self, key: tuple[str, str], svc: Any) -> None:
        if self.inventory.services.get(key) == svc:
            return
        self.inventory.services[key] = svc
        self.state.set_service(key, svc)
        self._selecting_update(key, svc)

    def _selecting_update(self, key: tuple[str, str], svc: Any) -> None:
        selecting = self._selecting.setdefault(key[0], [])
        if key in selecting:
            selecting.remove(key)
        if svc is not None and svc.selector and not svc.from_slices:
            selecting.append(key)

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
        if any(p.hook is not Hook.NORMAL for p in old + new):
            raise UnsupportedChange(
                "doNotTrack and preDNAT policy changes are not applied one at a time: reload the project"
            )
        new_keys = {policy_key(p) for p in new}
        # The parts held once (``shared``); the budget judged before the engine sees anything.
        before_bytes = self.shared.footprint
        new = [self.shared.add(p) for p in new]
        self.shared.done()
        replaced = [q for q in (self.policies.get(policy_key(p)) for p in old + new) if q is not None]
        replaced = list({id(q): q for q in replaced}.values())
        for q in replaced:
            self.shared.remove(q)
        if self.budget is not None and self.shared.footprint > max(self.budget, before_bytes):
            estimate = self.shared.footprint
            for p in new:
                self.shared.remove(p)
            for q in replaced:
                self.shared.add(q)
            self.shared.done()
            doc = self._doc(after if after is not None else before)  # type: ignore[arg-type]
            raise OverBudget(
                estimate,
                self.budget,
                [(estimate - before_bytes, p.ref) for p in new[:1]],
                f"the policy set with {doc.kind} {doc.name!r}",
            )
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
