"""Objects of the kinds the deploy manifests and the chart hold, created and addressed through
the API server by their kind (the tests of deploy/, of the chart and of the webhook share them)."""

from __future__ import annotations

import json
from typing import Any

from pyclassify.kube.client import ApiException, KubeClient, object_path

RBAC = "/apis/rbac.authorization.k8s.io/v1"
#: apiVersion prefix, plural and scope (namespaced or not) of each kind.
API = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "ClusterRole": (RBAC, "clusterroles", False),
    "ClusterRoleBinding": (RBAC, "clusterrolebindings", False),
    "Role": (RBAC, "roles", True),
    "RoleBinding": (RBAC, "rolebindings", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}


def path_of(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced = API[obj["kind"]]
    ns = obj["metadata"].get("namespace") if namespaced else None
    return object_path(prefix, plural, ns, obj["metadata"]["name"])


def create(kc: KubeClient, obj: dict[str, Any], dry_run: bool) -> Any:
    """POST with strict field validation (an unknown or misplaced field fails), as a dry run
    or for real."""
    prefix, plural, namespaced = API[obj["kind"]]
    query = [("fieldValidation", "Strict")] + ([("dryRun", "All")] if dry_run else [])
    ns = obj["metadata"].get("namespace") if namespaced else None
    return kc.request("POST", object_path(prefix, plural, ns), query=query, body=obj)


def refusal(kc: KubeClient, pod: dict[str, Any], dry_run: bool = False) -> str | None:
    """POST ``pod`` (a dry run, or for real): None when the API server created it (or would
    have), else the message of the Status it refused it with (an admission webhook's, say)."""
    ns = pod["metadata"]["namespace"]
    try:
        kc.request("POST", f"/api/v1/namespaces/{ns}/pods", [("dryRun", "All")] if dry_run else [], body=pod)
    except ApiException as e:
        try:
            return str(json.loads(e.body or "")["message"])
        except (ValueError, KeyError):
            return e.body or str(e)
    return None
