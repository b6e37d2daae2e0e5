"""The Kubernetes API as a source: list and watch a cluster (``KubeSource``) through the official
client (``load_client``: a kubeconfig and context, or the in-cluster service account)."""

from pyclassify.kube.client import KubeClient, load_client
from pyclassify.kube.listwatch import KubeSource

__all__ = ["KubeClient", "KubeSource", "load_client"]
