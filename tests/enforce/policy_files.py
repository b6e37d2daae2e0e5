"""The policy directory the reload tests work on: the demo copied, a flow's verdict under what a
source loaded, and the watcher started with a record of what it fired."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from pyclassify.analysis import explain
from pyclassify.enforce.watch import Watcher
from pyclassify.ir import PROTO_TCP

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"


def copy_demo(tmp_path: Path, name: str) -> Path:
    shutil.copytree(DEMO, tmp_path / name)
    return tmp_path / name


def verdict(loaded, src: str, dst: str, port: int) -> str:
    return explain(loaded.project, src, dst, PROTO_TCP, port, engine="native").verdict.verdict


def watching(root: Path) -> tuple[Watcher, threading.Event, list[float]]:
    """A watcher of ``root``, started and given time to set its watches: it, an event set when
    it fires, and the times it fired at."""
    fired: list[float] = []
    seen = threading.Event()

    def on_change(t: float) -> None:
        fired.append(t)
        seen.set()

    watcher = Watcher([str(root)], on_change, debounce=0.05)
    watcher.start()
    time.sleep(0.2)
    return watcher, seen, fired
