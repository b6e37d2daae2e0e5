"""``pyclassify admission-webhook --kubeconfig``: the ContainerAdmissionPolicies of a cluster, and
the Namespaces their namespace selectors read, as the webhook's input beside (or instead of)
files. The webhook polls: each poll lists both kinds (a handful of objects) and reloads only
when an object's uid or resourceVersion changed. A cluster without the CRD has no admission
policies (said once)."""

from __future__ import annotations

import logging
from typing import Any

from pyclassify.documents import Document
from pyclassify.kube.client import ApiException, KubeClient
from pyclassify.kube.listwatch import document
from pyclassify.kube.resources import RESOURCES, Resource, listed_object

log = logging.getLogger("pyclassify.kube")

#: Calico's (Tigera's) kind as a cluster serves it: CRD
#: ``containeradmissionpolicies.containersecurity.tigera.io``, v1beta1.
CONTAINER_ADMISSION_POLICIES = Resource(
    "containersecurity.tigera.io", "v1beta1", "containeradmissionpolicies", "ContainerAdmissionPolicy", False
)
_NAMESPACES = next(r for r in RESOURCES if r.kind == "Namespace")


class ClusterAdmissionInput:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._said_missing = False

    def fetch(self) -> tuple[tuple[Any, ...], list[Document]]:
        """(what identifies this state: kind, uid, resourceVersion of every object; the objects
        as documents named ``Kind name``). API errors raise."""
        marks: list[tuple[str, str, str]] = []
        docs: list[Document] = []
        for res in (_NAMESPACES, CONTAINER_ADMISSION_POLICIES):
            try:
                items, _ = self.client.list(res.path)
            except ApiException as exc:
                if exc.status == 404 and res.crd:
                    if not self._said_missing:
                        log.warning(
                            "%s %s: not served by this cluster (CRD not installed): no admission policies "
                            "from the cluster",
                            res.api_version,
                            res.kind,
                        )
                        self._said_missing = True
                    marks.append((res.kind, "", "not served"))
                    continue
                raise
            for obj in items:
                obj = listed_object(obj, res)
                md = obj.get("metadata") or {}
                marks.append((res.kind, str(md.get("uid") or ""), str(md.get("resourceVersion") or "")))
                docs.append(document(obj))
        return tuple(sorted(marks)), docs
