"""The kind registry: which code understands which manifest ``kind``.

Kinds are keyed by ``(api_group, kind)``: the same ``kind`` means different things in different
groups (``NetworkPolicy`` of ``networking.k8s.io`` vs ``projectcalico.org``). Policy normalizers
are named by ``"module:function"`` strings and imported on first use, so a missing or broken
normalizer module costs the documents of that kind, not the whole run. Anything registered in
neither table is skipped and counted by the project loader. A kind may be in both tables (a
Namespace is inventory, and its v1beta1 isolation annotation a policy).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pyclassify.documents import Document, Problems
from pyclassify.ir import Policy, Profile, Tier

Normalized = Policy | Tier | Profile
Normalizer = Callable[[Document, Problems], "list[Normalized]"]

# calicoctl prints projectcalico.org/v3; the CRDs behind it (as kubectl prints them) live in
# crd.projectcalico.org/v1. Both spell the same objects.
_GROUP_ALIASES = {"crd.projectcalico.org": "projectcalico.org"}

_CALICO = "projectcalico.org"
_K8S_NET = "networking.k8s.io"
_POLICY_API = "policy.networking.k8s.io"

POLICY_KINDS: dict[tuple[str, str], str] = {
    (_K8S_NET, "NetworkPolicy"): "pyclassify.kinds.networkpolicy:normalize_networkpolicy",
    # A Namespace is inventory too; its v1beta1 isolation annotation (seed 001) is a policy.
    ("", "Namespace"): "pyclassify.kinds.networkpolicy:normalize_namespace_isolation",
    # NetworkPolicy before it graduated to networking.k8s.io (extensions/v1beta1).
    ("extensions", "NetworkPolicy"): "pyclassify.kinds.networkpolicy:normalize_networkpolicy",
    (_POLICY_API, "AdminNetworkPolicy"): "pyclassify.kinds.adminnetworkpolicy:normalize_anp",
    (_POLICY_API, "BaselineAdminNetworkPolicy"): "pyclassify.kinds.adminnetworkpolicy:normalize_banp",
    (_POLICY_API, "ClusterNetworkPolicy"): "pyclassify.kinds.clusternetworkpolicy:normalize_cnp",
    (_CALICO, "GlobalNetworkPolicy"): "pyclassify.kinds.calico:normalize_gnp",
    (_CALICO, "NetworkPolicy"): "pyclassify.kinds.calico:normalize_calico_np",
    (_CALICO, "Tier"): "pyclassify.kinds.calico:normalize_tier",
    (_CALICO, "Profile"): "pyclassify.kinds.calico:normalize_profile",
    # Staged kinds: validated as their enforced kinds, judged beside them, never in force.
    (_CALICO, "StagedGlobalNetworkPolicy"): "pyclassify.kinds.staged:normalize_staged_gnp",
    (_CALICO, "StagedNetworkPolicy"): "pyclassify.kinds.staged:normalize_staged_calico_np",
    (_CALICO, "StagedKubernetesNetworkPolicy"): "pyclassify.kinds.staged:normalize_staged_knp",
}

# Kinds that describe endpoints and addresses (built by pyclassify.kinds.inventory_kinds).
INVENTORY_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Namespace"),
        ("", "Pod"),
        ("", "Node"),
        ("", "Service"),
        ("", "ServiceAccount"),
        ("", "ReplicationController"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ReplicaSet"),
        # Workload kinds of the old extensions group (still in older manifests).
        ("extensions", "Deployment"),
        ("extensions", "DaemonSet"),
        ("extensions", "ReplicaSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        (_CALICO, "HostEndpoint"),
        (_CALICO, "GlobalNetworkSet"),
        (_CALICO, "NetworkSet"),
    }
)


class NormalizerUnavailable(LookupError):
    """A registered normalizer could not be imported."""


def api_group(api_version: str) -> str:
    """``apps/v1`` -> ``apps``; ``v1`` (the core group) -> ``""``; Calico CRD group folded."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return _GROUP_ALIASES.get(group, group)


def kind_key(doc: Document) -> tuple[str, str]:
    return (api_group(doc.api_version), doc.kind)


def is_inventory_kind(doc: Document, key: tuple[str, str] | None = None) -> bool:
    return (key or kind_key(doc)) in INVENTORY_KINDS


_resolved: dict[str, Normalizer] = {}


def _resolve(target: str) -> Normalizer:
    if target in _resolved:
        return _resolved[target]
    module_name, _, func_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise NormalizerUnavailable(f"normalizer module {module_name} is not available ({exc})") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise NormalizerUnavailable(f"normalizer {target} does not exist")
    _resolved[target] = func
    return func


def policy_normalizer(doc: Document, key: tuple[str, str] | None = None) -> Normalizer | None:
    """The normalizer of a policy kind, None if the kind is not a policy kind.

    Raises NormalizerUnavailable when the kind is registered but its module cannot be loaded.
    """
    target = POLICY_KINDS.get(key or kind_key(doc))
    return None if target is None else _resolve(target)
