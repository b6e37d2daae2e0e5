"""The policy path's watcher (pyclassify.enforce.watch.Watcher) with real inotify: a Kubernetes
ConfigMap mount — files that are links through ``..data`` into a hidden timestamped directory,
updated by an atomic rename of ``..data`` — is reloaded when ``..data`` is swapped, not when the
new version's hidden directory is being written (it is not in force yet), and read once (the
hidden directories are not read beside the links)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from pyclassify.enforce.file_source import PolicySource
from pyclassify.enforce.watch import Watcher
from tests.enforce.policy_files import DEMO, verdict, watching


def mount(root: Path, version: str, files: dict[str, str], swap_in: bool = True) -> None:
    """Writes ``files`` as the kubelet updates a ConfigMap volume: a new hidden directory, a new
    ``..data`` link renamed over the old one (``swap_in``), one link per key."""
    data = root / f"..{version}"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    if swap_in:
        swap(root, version)
    for name in files:
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")


def swap(root: Path, version: str) -> None:
    tmp = root / "..data_tmp"
    tmp.symlink_to(f"..{version}")
    os.replace(tmp, root / "..data")


def test_a_configmap_update_is_one_reload_of_the_new_files(tmp_path: Path) -> None:
    root = tmp_path / "policy"
    root.mkdir()
    files = {f.name: f.read_text() for f in sorted(DEMO.glob("*.yaml"))}
    mount(root, "2026_11_24_01", files)
    source = PolicySource([str(root)])
    first = source.load()
    assert not first.rejected and not first.broken_files
    assert verdict(first, "frontend/web", "backend/api", 8080) == "allow"
    watcher, changed, fired = watching(root)
    try:
        files["10-pods.yaml"] = files["10-pods.yaml"].replace("      app: web\n", "      app: webx\n", 1)
        # The new version written, not yet swapped in: nothing to reload (it is not in force).
        mount(root, "2026_11_24_02", files, swap_in=False)
        time.sleep(0.5)
        assert not fired, "reloaded before the swap: the old ..data was read"
        swapped = time.monotonic()
        swap(root, "2026_11_24_02")
        shutil.rmtree(root / "..2026_11_24_01")  # the kubelet removes the old version
        assert changed.wait(5), "the ..data swap was not seen"
        assert fired[0] >= swapped
        second = source.load()
        assert second.changed == 1 and not second.rejected and not second.broken_files
        assert verdict(second, "frontend/web", "backend/api", 8080) == "deny"
        assert second.engine.state.full_builds == 1
    finally:
        watcher.stop()


def test_a_file_is_read_once_its_writer_closes_it(tmp_path: Path) -> None:
    """Issue 14, item 3: a policy file written in parts, with pauses longer than the debounce,
    is never read half (which would drop the policies of the missing part for a while): the
    reload comes with the writer's close, new file or rewritten one."""
    root = tmp_path / "policy"
    shutil.copytree(DEMO, root)
    fired: list[float] = []
    watcher = Watcher([str(root)], lambda t: fired.append(t), debounce=0.05)
    watcher.start()
    try:
        time.sleep(0.2)
        text = (DEMO / "20-networkpolicies.yaml").read_text()
        first, _, rest = text.partition("\n---\n")
        assert rest, "the demo file holds several policies"
        for target in (root / "20-networkpolicies.yaml", root / "25-more.yaml"):  # rewritten, new
            fired.clear()
            with open(target, "w") as f:
                f.write(first + "\n---\n")
                f.flush()
                time.sleep(0.4)  # a writer's pause: eight debounce periods
                assert not fired, f"{target.name} was read half-written"
                f.write(rest)
            deadline = time.monotonic() + 5
            while not fired and time.monotonic() < deadline:
                time.sleep(0.02)
            assert fired, f"{target.name}: no reload after its writer closed it"
        (root / "25-more.yaml").unlink()
    finally:
        watcher.stop()
