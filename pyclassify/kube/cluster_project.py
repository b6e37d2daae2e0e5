"""A cluster's objects as the input of the offline commands (``explain``, ``matrix``, ``check``
with ``--kubeconfig``): one list of every kind pyclassify follows, as ``Document``s named
``Kind namespace/name``, beside (or instead of) the manifests under PATH."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

from pyclassify.documents import Document, Problems
from pyclassify.kube.client import ApiException, KubeClient, load_client
from pyclassify.kube.listwatch import document
from pyclassify.kube.resources import RESOURCES, Resource, listed_object
from pyclassify.loader import iter_paths
from pyclassify.project import Project, build_project

log = logging.getLogger("pyclassify.kube")


def cluster_documents(
    client: KubeClient, resources: tuple[Resource, ...] = RESOURCES, skipped: list[str] | None = None
) -> Iterator[Document]:
    """Every object of ``resources``, listed; kinds whose CRD is not installed are skipped (and
    named in ``skipped``)."""
    for res in resources:
        try:
            items, _ = client.list(res.path)
        except ApiException as exc:
            if exc.status == 404 and res.crd:
                log.info("%s %s: not served by this cluster (CRD not installed), skipped", res.api_version, res.kind)
                if skipped is not None:
                    skipped.append(f"{res.api_version} {res.kind}")
                continue
            raise
        for obj in items:
            yield document(listed_object(obj, res))


def load_cluster_project(
    paths: list[str],
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool | None = None,
    problems: Problems | None = None,
    skipped: list[str] | None = None,
) -> Project:
    """The manifests under ``paths`` (may be none) and the live objects of the cluster
    ``kubeconfig``/``context`` names, or of the cluster this runs in (``in_cluster``; see
    ``load_client``)."""
    problems = problems if problems is not None else Problems()
    loading = Problems()
    before = len(problems.items)
    client = load_client(kubeconfig, context, in_cluster)
    docs = itertools.chain(iter_paths(paths, loading) if paths else (), cluster_documents(client, skipped=skipped))
    project = build_project(docs, problems)
    problems.items[before:before] = loading.items
    return project
