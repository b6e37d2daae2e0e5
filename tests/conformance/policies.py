"""Turning the policy objects of a conformance case into a PolicySet (shared by the tests)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyclassify.documents import Document, Problems
from pyclassify.ir import PolicySet
from pyclassify.kinds.adminnetworkpolicy import normalize_anp, normalize_banp
from pyclassify.kinds.clusternetworkpolicy import normalize_cnp
from pyclassify.kinds.networkpolicy import normalize_networkpolicy

NORMALIZERS = {
    "NetworkPolicy": normalize_networkpolicy,
    "AdminNetworkPolicy": normalize_anp,
    "BaselineAdminNetworkPolicy": normalize_banp,
    "ClusterNetworkPolicy": normalize_cnp,
}


def policy_set(objects: Iterable[dict[str, Any]], name: str = "case") -> PolicySet:
    """Normalize every object; any validation error fails the calling test with its message."""
    problems = Problems()
    policies = []
    for i, obj in enumerate(objects):
        doc = Document(obj=obj, file=f"{name}[{i}]", line=1)
        policies.extend(NORMALIZERS[obj["kind"]](doc, problems))
    assert not problems.errors, "\n".join(str(p) for p in problems.errors)
    return PolicySet.build(policies)
