"""A real kube-apiserver and etcd for the tests of this directory (never a mock).

The binaries come from scripts/kube-testenv.sh (built from Go modules, cached outside the
checkout; scripts/test.sh builds them before pytest). Without them the tests skip, saying how to
build them, except in CI, where they fail.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pyclassify.kube import load_client
from pyclassify.kube.client import KubeClient
from tests.kube.apiserver import REPO, KubeCluster


def _testenv() -> Path | None:
    r = subprocess.run(["bash", str(REPO / "scripts" / "kube-testenv.sh"), "--check"], capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory):
    env = _testenv()
    if env is None:
        message = (
            "etcd and kube-apiserver are not built: run `bash scripts/kube-testenv.sh` "
            "(about 10 minutes the first time; cached outside the checkout)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"), env / "bin", env / "crds")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kc(kube_cluster: KubeCluster) -> KubeClient:
    """A client of the test cluster, as its kubeconfig names it."""
    return load_client(str(kube_cluster.kubeconfig), "test")
