"""A generated cluster (``bench.cluster``) created in a real API server, for the benchmarks of
the Kubernetes source: every object through the API as a client would create it (server-set
metadata dropped; pod and node status written through their ``/status`` subresource, as a
kubelet would), Calico's ``projectcalico.org/v3`` kinds as the cluster stores them
(``crd.projectcalico.org/v1``).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.cluster import Cluster
from pyclassify import kinds
from pyclassify.kube.client import ApiException, KubeClient, object_path
from pyclassify.kube.resources import RESOURCES, Resource

_SERVER_METADATA = ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields")
_CALICO_STORED = "crd.projectcalico.org"
_BY_KIND: dict[tuple[str, str], Resource] = {(r.group, r.kind): r for r in RESOURCES}


def resource_of(obj: dict[str, Any]) -> Resource:
    group = kinds.api_group(obj["apiVersion"])
    if group == "projectcalico.org":
        group = _CALICO_STORED
    return _BY_KIND[(group, obj["kind"])]


def _body(obj: dict[str, Any], res: Resource) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body["apiVersion"] = res.api_version
    md = body["metadata"]
    for key in _SERVER_METADATA:
        md.pop(key, None)
    md.pop("ownerReferences", None)  # their owners (ReplicaSets) are not created here
    body.pop("status", None)
    return body


def create(client: KubeClient, obj: dict[str, Any]) -> None:
    res = resource_of(obj)
    md = obj["metadata"]
    ns = md.get("namespace") if res.namespaced else None
    body = _body(obj, res)
    try:
        client.request("POST", object_path(res.prefix, res.plural, ns), body=body)
    except ApiException as exc:
        if exc.status == 409:
            return  # already there (a second run against the same server)
        if res.kind == "Service" and exc.status == 422:
            # A ClusterIP the server has given out already: let it choose one.
            body["spec"].pop("clusterIP", None)
            body["spec"].pop("clusterIPs", None)
            client.request("POST", object_path(res.prefix, res.plural, ns), body=body)
        else:
            raise
    if res.kind in ("Pod", "Node") and obj.get("status"):
        client.request(
            "PATCH",
            object_path(res.prefix, res.plural, ns, md["name"]) + "/status",
            body={"status": obj["status"]},
            content_type="application/merge-patch+json",
        )


def populate(client: KubeClient, cluster: Cluster, threads: int = 16) -> dict[str, int]:
    """Creates every object of ``cluster``: kinds in the generator's order (nodes and namespaces
    before what lives in them), the objects of one kind concurrently."""
    counts: dict[str, int] = {}
    with ThreadPoolExecutor(threads) as pool:
        for kind in Cluster.KINDS:
            objects = list(getattr(cluster, kind).values())
            list(pool.map(lambda o: create(client, o), objects))
            counts[kind] = len(objects)
    return counts
