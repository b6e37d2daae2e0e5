"""The daemon's policy directory removed, made again, swapped in by rename, a file emptied and a
FIFO dropped in, with real connections through the daemon in a node namespace: a denied path
stays denied while the directory is gone (and /healthz says so), the watch follows the new
directory, an emptied file keeps its policies, a FIFO blocks nothing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import Daemon, Topology, root_reason

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

URL = "http://127.0.0.1:9464"


def wait_until(predicate, what: str, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_policy_directory_removed_made_again_swapped_emptied_and_a_fifo(topo: Topology, tmp_path: Path) -> None:
    root = tmp_path / "policy"
    root.mkdir()
    manifests.write(root)
    daemon = Daemon(topo, [str(root)], 0, extra=("--metrics", "127.0.0.1:9464"))
    daemon.wait_event("start")
    assert topo.reach(0, 1) and not topo.reach(2, 1)  # a -> b allowed, c -> b denied

    # removed: the policy in force stays (c -> b denied), and /healthz says the path is gone
    shutil.rmtree(root)
    rejected = daemon.wait_event("reload-rejected")
    assert any("gone" in e for e in rejected["errors"]), rejected
    assert not topo.reach(2, 1), "the directory's removal opened a denied path"
    status, body = topo.get(f"{URL}/healthz")
    assert status == 503 and "policy path gone" in body

    # made again, with b closed to everyone: followed (watched anew), healthy again
    root.mkdir()
    manifests.write(root, netpol=manifests.NETPOL_DENY_ALL)
    wait_until(lambda: not topo.reach(0, 1, timeout=0.5), "the directory made again is not followed")
    assert topo.get(f"{URL}/healthz") == (200, "ok\n")

    # swapped in by rename: b open to a again; then a change inside the new directory is seen
    new = tmp_path / "policy.new"
    new.mkdir()
    manifests.write(new)
    os.rename(root, tmp_path / "policy.old")
    os.rename(new, root)
    wait_until(lambda: topo.reach(0, 1, timeout=0.5), "the directory swapped in is not followed")
    manifests.replace(root / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    wait_until(lambda: not topo.reach(0, 1, timeout=0.5), "blind to the directory swapped in")

    # emptied (truncated, as a writer that has not written yet leaves it): its policy stays
    (root / "10-netpol.yaml").write_text("")
    rejected = daemon.wait_event("reload-rejected")
    assert any("emptied" in e for e in rejected["errors"]), rejected
    assert not topo.reach(0, 1) and not topo.reach(2, 1)

    # a FIFO nobody writes, named like a manifest: skipped, and the next change still applies
    os.mkfifo(root / "60-fifo.yaml")
    time.sleep(0.5)
    manifests.replace(root / "10-netpol.yaml", manifests.NETPOL)
    wait_until(lambda: topo.reach(0, 1, timeout=0.5), "a FIFO in the directory blocked the reloads")
    assert not topo.reach(2, 1)
    assert topo.get(f"{URL}/healthz") == (200, "ok\n")
    assert daemon.terminate() == 0
