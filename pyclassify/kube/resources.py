"""The kinds pyclassify follows in a cluster, and where the API serves them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def path(self) -> str:
        """Every object of the kind, in every namespace."""
        return f"{self.prefix}/{self.plural}"

    @property
    def crd(self) -> bool:
        """Served by a CustomResourceDefinition, which a cluster may not have installed."""
        return self.group.endswith(("projectcalico.org", "tigera.io")) or self.group == "policy.networking.k8s.io"


_CALICO = "crd.projectcalico.org"
_POLICY_API = "policy.networking.k8s.io"

#: In the order the initial list reads them (inventory first, then tiers, then policies).
RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True),
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "services", "Service", True),
    Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True),
    Resource(_POLICY_API, "v1alpha1", "adminnetworkpolicies", "AdminNetworkPolicy", False),
    Resource(_POLICY_API, "v1alpha1", "baselineadminnetworkpolicies", "BaselineAdminNetworkPolicy", False),
    Resource(_POLICY_API, "v1alpha2", "clusternetworkpolicies", "ClusterNetworkPolicy", False),
    Resource(_CALICO, "v1", "tiers", "Tier", False),
    Resource(_CALICO, "v1", "profiles", "Profile", False),
    Resource(_CALICO, "v1", "globalnetworkpolicies", "GlobalNetworkPolicy", False),
    Resource(_CALICO, "v1", "networkpolicies", "NetworkPolicy", True),
    Resource(_CALICO, "v1", "stagedglobalnetworkpolicies", "StagedGlobalNetworkPolicy", False),
    Resource(_CALICO, "v1", "stagednetworkpolicies", "StagedNetworkPolicy", True),
    Resource(_CALICO, "v1", "stagedkubernetesnetworkpolicies", "StagedKubernetesNetworkPolicy", True),
    Resource(_CALICO, "v1", "globalnetworksets", "GlobalNetworkSet", False),
    Resource(_CALICO, "v1", "networksets", "NetworkSet", True),
    Resource(_CALICO, "v1", "hostendpoints", "HostEndpoint", False),
)


def listed_object(obj: dict[str, Any], res: Resource) -> dict[str, Any]:
    """An item of a list of ``res`` as a whole object: list items come without apiVersion and
    kind; managedFields are of no use here."""
    obj["apiVersion"] = res.api_version
    obj["kind"] = res.kind
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
    return obj
