"""The policy paths as the API server would treat them (pyclassify.enforce.file_source, .watch,
pyclassify.loader): a root that vanishes, is emptied or cannot be read keeps its last good
objects and says so; a deletion is a file removed from a directory that is still there, or an
object removed from a file that still holds others; the watch follows a root removed and made
again or swapped in by rename; special files are skipped, never opened (a FIFO nobody writes
would block the reader for ever)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from pyclassify.enforce.file_source import PolicySource
from tests.enforce.policy_files import DEMO, copy_demo, verdict, watching


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return copy_demo(tmp_path, "policy")


def policies(loaded) -> set[str]:
    return {p.ref for p in loaded.project.policy_set.policies}


def test_a_vanished_root_keeps_its_objects_and_says_so(root: Path) -> None:
    source = PolicySource([str(root)], settle=0)
    first = source.load()
    before = policies(first)
    assert verdict(first, "frontend/web", "backend/db", 5432) == "deny"
    assert source.not_healthy() is None
    shutil.rmtree(root)
    gone = source.load()
    assert policies(gone) == before and verdict(gone, "frontend/web", "backend/db", 5432) == "deny"
    assert gone.kept == {str(root): "gone (no such file or directory)"}
    assert "policy path gone" in (source.not_healthy() or "")
    # made again, with one policy less: that one is deleted, the rest applies
    shutil.copytree(DEMO, root)
    (root / "30-adminnetworkpolicies.yaml").unlink()
    back = source.load()
    assert not back.kept and source.not_healthy() is None
    assert {p for p in before if p.startswith("AdminNetworkPolicy/")} and not {
        p for p in policies(back) if p.startswith("AdminNetworkPolicy/")
    }


def test_an_emptied_file_keeps_its_objects_a_removed_object_goes(root: Path) -> None:
    source = PolicySource([str(root)], settle=0)
    first = source.load()
    netpols = {p for p in policies(first) if p.startswith("NetworkPolicy/")}
    assert len(netpols) >= 2
    path = root / "20-networkpolicies.yaml"
    text = path.read_text()
    path.write_text("")  # truncated, as a writer that has not written yet leaves it
    emptied = source.load()
    assert netpols <= policies(emptied)
    assert "emptied" in emptied.kept[str(path)]
    path.write_text("# nothing but a comment\n---\n")
    assert netpols <= policies(source.load())
    # an object removed from a file that still holds others: deleted
    docs = [d for d in text.split("\n---\n") if "kind: NetworkPolicy" in d]
    path.write_text(docs[0])
    fewer = source.load()
    assert len({p for p in policies(fewer) if p.startswith("NetworkPolicy/")}) == 1
    # a file removed from a directory that is still there: deleted
    path.unlink()
    assert not {p for p in policies(source.load()) if p.startswith("NetworkPolicy/")}


def test_unreadable_and_special_files_keep_their_objects(root: Path) -> None:
    source = PolicySource([str(root)], settle=0)
    first = source.load()
    before = policies(first)
    path = root / "40-calico.yaml"
    # a dangling link where the file was (a volume half swapped): its objects stay
    path.rename(root / "moved.bak")
    path.symlink_to("nowhere.yaml")
    dangling = source.load()
    assert policies(dangling) == before
    # a FIFO where the file was: never opened (this load would block for ever otherwise)
    path.unlink()
    os.mkfifo(path)
    done = threading.Event()
    result: list = []
    threading.Thread(target=lambda: (result.append(source.load()), done.set()), daemon=True).start()
    assert done.wait(20), "the load blocked on a FIFO"
    assert policies(result[0]) == before
    assert "no longer a regular file" in result[0].kept[str(path)]


def test_a_fifo_among_the_files_is_skipped_with_a_warning(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pyclassify.cli import main

    shutil.copytree(DEMO, tmp_path / "p")
    os.mkfifo(tmp_path / "p" / "zz-fifo.yaml")
    done = threading.Event()
    out: list = []
    threading.Thread(
        target=lambda: (out.append(CliRunner().invoke(main, ["check", str(tmp_path / "p")])), done.set()), daemon=True
    ).start()
    assert done.wait(60), "check blocked on a FIFO"
    assert out[0].exit_code == 0, out[0].output
    assert "zz-fifo.yaml: a FIFO, not a regular file: skipped, never read" in out[0].output


def test_the_watch_follows_a_root_made_again(root: Path) -> None:
    watcher, seen, _ = watching(root)
    try:
        shutil.rmtree(root)
        assert seen.wait(5), "the removal was not seen"
        time.sleep(0.3)
        seen.clear()
        shutil.copytree(DEMO, root)
        assert seen.wait(5), "the root made again was not seen"
        time.sleep(0.3)
        seen.clear()
        assert watcher.not_healthy() is None
        (root / "40-calico.yaml").write_text("")  # a change inside the new root: seen
        assert seen.wait(5), "blind to the root made again"
    finally:
        watcher.stop()


def test_the_watch_follows_a_root_swapped_in_by_rename(root: Path) -> None:
    watcher, seen, _ = watching(root)
    try:
        new = root.with_name("policy.new")
        shutil.copytree(DEMO, new)
        seen.clear()
        os.rename(root, root.with_name("policy.old"))
        os.rename(new, root)
        assert seen.wait(5), "the swap was not seen"
        time.sleep(0.3)
        seen.clear()
        assert watcher.not_healthy() is None
        (root / "40-calico.yaml").write_text("")
        assert seen.wait(5), "blind to the root swapped in"
    finally:
        watcher.stop()
