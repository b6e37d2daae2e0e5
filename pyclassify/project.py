"""A project: everything a set of manifest paths says, validated and normalized.

``load_project(paths)`` reads the documents one at a time (``pyclassify.loader``), builds the
endpoint inventory from the inventory kinds, normalizes every policy kind into the tiered IR
through the kind registry, and collects every problem on the way. Documents are not kept once
normalized (a 10k-pod cluster would be most of the process's memory); only their count and the
ContainerAdmissionPolicy documents ``pyclassify check`` validates separately. Kinds nobody
registered (ConfigMap, RoleBinding, ...) are skipped and counted, not errors.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pyclassify import failsafe, kinds
from pyclassify.admission.policy import is_admission_policy
from pyclassify.budget import OverBudget
from pyclassify.bulk import collector_paused
from pyclassify.documents import Document, Problems
from pyclassify.inventory import Endpoint, Inventory
from pyclassify.ir import BUILTIN_TIERS, Action, EndpointKind, Policy, PolicySet, Profile, Tier
from pyclassify.kinds import schema
from pyclassify.kinds.inventory_kinds import InventoryBuilder
from pyclassify.kinds.versions import kind_problem
from pyclassify.loader import iter_paths
from pyclassify.sharing import Shared

ObjectKey = tuple[str, str, "str | None", str]  # (API group, kind, namespace, name)
#: What ``skipped`` counts the documents that are no Kubernetes object under (a values file).
NOT_OBJECTS = "not a Kubernetes object (no kind, no metadata)"
#: What ``skipped`` counts the pods that hold no address under.
RELEASED_PODS = "v1/Pod holding no address (Succeeded, Failed, or Pending without one)"
NAME_PATH = ("metadata", "name")


def object_key(doc: Document) -> ObjectKey:
    """What identifies an object in a cluster: two documents with the same key are the same
    object (the API server would keep one)."""
    # Document's properties, read once (this runs for every document of a cluster)
    obj = doc.obj
    md = obj.get("metadata")
    if not isinstance(md, dict):
        md = {}
    ns = md.get("namespace")
    return (
        kinds.api_group(str(obj.get("apiVersion") or "")),
        str(obj.get("kind") or ""),
        str(ns) if ns else None,
        str(md.get("name") or ""),
    )


@dataclass
class Project:
    policy_set: PolicySet
    inventory: Inventory
    problems: Problems
    document_count: int = 0
    # ContainerAdmissionPolicy documents: validated by `pyclassify check`, beside the IR
    admission_documents: list[Document] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # "apiVersion/Kind" -> count
    #: Objects with errors, and their first error (``enforce`` keeps their last good version).
    invalid: dict[ObjectKey, str] = field(default_factory=dict)
    #: Felix's failsafe ports as the manifests configure them (defaults otherwise).
    failsafe_config: failsafe.FailsafeConfig = field(default_factory=failsafe.FailsafeConfig)
    #: Pods that hold no address (finished, or not given one yet), so are no endpoint:
    #: ``ns/name`` -> why (``kinds.inventory_kinds.pod_without_address``)
    released: dict[str, str] = field(default_factory=dict)
    #: The table its policies' parts are held in once (``pyclassify.sharing``), with their
    #: estimated memory (``Shared.footprint``).
    shared: Shared = field(default_factory=Shared)

    def has_inventory(self) -> bool:
        """Whether the manifests hold any inventory object (endpoints, namespaces, nodes,
        services, network sets, service accounts), or only policy."""
        inv = self.inventory
        return bool(
            inv.endpoints or inv.namespaces or inv.nodes or inv.services or inv.network_sets or inv.service_accounts
        )

    def applied(self, change: Project) -> Project:
        """This project with ``change``'s policy objects applied as ``kubectl apply`` would: each
        replaces the policy, tier or profile of the same kind, namespace and name, or is added."""
        ps, cs = self.policy_set, change.policy_set
        replaced = {(p.kind, p.namespace, p.name) for p in cs.all_policies() if p.kind != failsafe.KIND}
        policies = [p for p in ps.all_policies() if (p.kind, p.namespace, p.name) not in replaced]
        policies += [p for p in cs.all_policies() if p.kind != failsafe.KIND]
        # A policy's tier the change does not declare is made up by PolicySet.build (no order,
        # default Deny): it must not replace the tier OLD declares.
        implicit = lambda t: t.order is None and t.default_action is Action.DENY  # noqa: E731
        given_tiers = {t.name: t for t in cs.tiers if t not in BUILTIN_TIERS and not implicit(t)}
        tiers = [given_tiers.pop(t.name, t) for t in ps.tiers] + list(given_tiers.values())
        given_profiles = {p.name: p for p in cs.profiles}
        profiles = [given_profiles.pop(p.name, p) for p in ps.profiles] + list(given_profiles.values())
        return dataclasses.replace(self, policy_set=PolicySet.build(policies, tiers, profiles))

    def over(self, inventory: Inventory) -> Project:
        """This project's policy over another inventory (a policy-only project judged against a
        cluster's): the failsafe policies follow the host endpoints of ``inventory``."""
        ps = self.policy_set
        policies = [p for p in ps.all_policies() if p.kind != failsafe.KIND]
        tiers = [t for t in ps.tiers if t.name != failsafe.TIER]
        if any(e.kind is EndpointKind.HOST for e in inventory.endpoints):
            extra_policies, extra_tiers = failsafe.failsafe_ir(self.failsafe_config)
            policies, tiers = [*extra_policies, *policies], [*extra_tiers, *tiers]
        return dataclasses.replace(
            self, policy_set=PolicySet.build(policies, tiers, list(ps.profiles)), inventory=inventory
        )

    def staged(self) -> Project | None:
        """This project as it would be with its staged policies enforced
        (``PolicySet.staged_view``); None when nothing is staged."""
        view = self.policy_set.staged_view()
        return None if view is None else dataclasses.replace(self, policy_set=view)

    def find_endpoint(self, ref: str) -> Endpoint | None:
        """The endpoint a person means by ``ref``: an IP address (the endpoint owning it), a pod
        ``ns/name``, a workload ``ns/Kind/name`` (or ``ns/name`` of a workload), or a host
        endpoint name. None if nothing matches."""
        try:
            ip = ipaddress.ip_address(ref)
        except ValueError:
            ip = None
        if ip is not None:
            # Host-network pods share their node's address; the address belongs to the host side.
            return self.inventory.owner_of(ip)
        found = self.inventory.find(ref)
        if found is not None:
            return found
        parts = ref.split("/")
        if len(parts) == 3:
            ns, kind, name = parts
            workload = f"{kind}/{name}"
            return next((e for e in self.inventory.endpoints if e.namespace == ns and e.workload == workload), None)
        if len(parts) == 2:
            ns, name = parts
            # Pods a controller owns answer to the controller's name too.
            return next(
                (
                    e
                    for e in self.inventory.endpoints
                    if e.namespace == ns and e.workload and e.workload.split("/", 1)[1] == name
                ),
                None,
            )
        return None


def load_project(paths: list[str], problems: Problems | None = None, budget: int | None = None) -> Project:
    """The manifests under ``paths``; with ``budget`` (bytes), a set whose estimated memory passes
    it raises ``OverBudget`` before it is built (``build_project``)."""
    problems = problems if problems is not None else Problems()
    # Problems keep the order of a load-then-normalize run: every loading problem first.
    loading = Problems()
    before = len(problems.items)
    with collector_paused():
        project = build_project(iter_paths(paths, loading), problems, budget=budget)
    problems.items[before:before] = loading.items
    problems.empty_inputs.extend(loading.empty_inputs)
    if loading.not_objects:
        problems.not_objects += loading.not_objects
        project.skipped = dict(sorted({**project.skipped, NOT_OBJECTS: loading.not_objects}.items()))
    return project


def build_project(
    documents: Iterable[Document], problems: Problems, shared: Shared | None = None, budget: int | None = None
) -> Project:
    """A project from documents, read one at a time (a stream from the loader, or documents
    tests and the watch source build directly). Equal parts of its policies are held once
    (``pyclassify.sharing``; ``shared``: the table to hold them in, ``Shared(parent=...)`` to
    share what did not change with the set this project replaces). With ``budget`` (bytes), a
    set whose estimated memory passes it raises ``pyclassify.budget.OverBudget`` as soon as
    it does, before the engine builds anything."""
    shared = shared if shared is not None else Shared()
    document_count = 0
    admission_documents: list[Document] = []
    builder = InventoryBuilder(problems)
    builder.check_duplicates = False  # done below, for every kind
    policies: list[Policy] = []
    tiers: list[Tier] = []
    profiles: list[Profile] = []
    skipped: Counter[str] = Counter()
    # Where each object was first defined: not the document itself, which the stream lets go
    # once it is normalized.
    seen: dict[ObjectKey, Document] = {}
    invalid: dict[ObjectKey, str] = {}
    failsafe_config = failsafe.FailsafeConfig()
    for doc in documents:
        document_count += 1
        key = object_key(doc)
        first = seen.get(key)
        if first is not None and doc.name:
            where = f"{first.file}:{first.line_of(NAME_PATH)}"
            problems.error(doc, NAME_PATH, f"duplicate {doc.kind} {doc.name!r}: already defined at {where}")
            invalid.setdefault(key, str(problems.errors[-1]))
            continue
        seen[key] = doc.locator()
        errors_before = len(problems.items)
        # Strict field validation first: an object the API server would refuse is not used.
        refused = schema.check(doc, problems)
        if is_admission_policy(doc):
            admission_documents.append(doc)  # and normalized below, as every kind
        if failsafe.is_config(doc, key[:2]):  # Felix's failsafe ports (FelixConfiguration default)
            if not refused:
                failsafe_config = failsafe.read_config(doc, problems, failsafe_config)
        elif refused:  # its other errors are reported; what its kind's code made of it is dropped
            built = len(policies), len(tiers), len(profiles)
            _normalize(doc, key[:2], builder, policies, tiers, profiles, skipped, problems, shared)
            del policies[built[0] :], tiers[built[1] :], profiles[built[2] :]
        else:
            _normalize(doc, key[:2], builder, policies, tiers, profiles, skipped, problems, shared)
        shared.count_source(source_size(doc.obj))
        if budget is not None and shared.footprint > budget:
            raise OverBudget(shared.footprint, budget, shared.costliest())
        if len(problems.items) > errors_before:
            found = next((p for p in problems.items[errors_before:] if p.severity == "error"), None)
            if found is not None:
                invalid[key] = str(found)
    shared.done()
    inventory = builder.build()
    if builder.released:
        skipped[RELEASED_PODS] += len(builder.released)
    shared.count("endpoint", len(inventory.endpoints))
    if budget is not None and shared.footprint > budget:
        raise OverBudget(shared.footprint, budget, shared.costliest())
    # Host endpoints keep their failsafe ports open whatever the policy (as Calico does).
    if any(e.kind is EndpointKind.HOST for e in inventory.endpoints):
        failsafe_policies, failsafe_tiers = failsafe.failsafe_ir(failsafe_config)
        policies, tiers = [*failsafe_policies, *policies], [*failsafe_tiers, *tiers]
    return Project(
        policy_set=PolicySet.build(policies, tiers, profiles),
        inventory=inventory,
        problems=problems,
        document_count=document_count,
        admission_documents=admission_documents,
        skipped=dict(sorted(skipped.items())),
        invalid=invalid,
        failsafe_config=failsafe_config,
        released={e.ref: why for e, why in builder.released},
        shared=shared,
    )


def source_size(obj: Any) -> tuple[int, int]:
    """The size of an object as read: the bytes of its compact JSON and its number of values
    (what keeping the document costs goes with both: many small mappings cost more than their
    bytes say). A node YAML aliases is held once, so counted once (written out, nine levels of
    nine aliases would be billions of values)."""
    if _shares_nodes(obj):
        return _held_size(obj)
    try:
        data = orjson.dumps(obj)
    except TypeError:  # a value JSON has no form for (a YAML set, binary): about its text
        data = repr(obj).encode()
    return len(data), data.count(b",") + data.count(b"{") + data.count(b"[") + 1


def _shares_nodes(obj: Any) -> bool:
    """Whether a mapping or list of ``obj`` is reached twice (an aliased node)."""
    seen: set[int] = set()
    stack = [obj]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend(c for c in children if isinstance(c, (dict, list)))
    return False


def _held_size(obj: Any) -> tuple[int, int]:
    """``source_size`` of an object whose aliased nodes are counted once: about the bytes of
    each distinct node's compact JSON, and the number of values."""
    seen: set[int] = set()
    size, values = 0, 0
    stack = [obj]
    while stack:
        node = stack.pop()
        values += 1
        if isinstance(node, (dict, list)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            size += 2 + max(len(node) - 1, 0)  # brackets and commas
            if isinstance(node, dict):
                size += sum(len(str(k)) + 3 for k in node)  # "key":
                stack.extend(node.values())
            else:
                stack.extend(node)
        else:
            size += len(str(node)) + (2 if isinstance(node, str) else 0)
    return size, values


def _normalize(
    doc: Document,
    kind: tuple[str, str],
    builder: InventoryBuilder,
    policies: list[Policy],
    tiers: list[Tier],
    profiles: list[Profile],
    skipped: Counter[str],
    problems: Problems,
    shared: Shared,
) -> None:
    """One document into the inventory and the IR."""
    mistake = kind_problem(doc.api_version, doc.kind)
    if mistake is not None:  # an unknown version of a known kind, a misspelt kind
        problems.error(doc, (mistake[0],), mistake[1])
        return
    inventory_kind = kinds.is_inventory_kind(doc, kind)
    if inventory_kind:
        builder.add(doc)
    try:
        normalize = kinds.policy_normalizer(doc, kind)
    except kinds.NormalizerUnavailable as exc:
        problems.error(doc, (), f"cannot check {doc.kind} {doc.name!r}: {exc}")
        return
    if normalize is None:
        if not inventory_kind:
            skipped[f"{doc.api_version}/{doc.kind}"] += 1
        return
    for item in normalize(doc, problems):
        if isinstance(item, Policy):
            policies.append(shared.add(item))
        elif isinstance(item, Tier):
            tiers.append(item)
        elif isinstance(item, Profile):
            profiles.append(shared.add_profile(item))
        else:
            raise TypeError(f"normalizer for {doc.kind} returned {type(item).__name__}")
