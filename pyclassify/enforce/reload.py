"""Watch the policy and inventory files of ``pyclassify enforce`` with inotify and call back
after a quiet period.

Directories are watched recursively (new subdirectories are added as they appear); a file is
watched through its parent directory, so editors that write a new file and rename it over the old
one are seen too. Events are debounced: the callback runs once the paths have been quiet for
``debounce`` seconds, with the monotonic time of the first event of the burst (for the
apply-latency metric). The callback validates, compiles and swaps (``Enforcer.reload``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from pyclassify.nfqueue import Inotify

#: Kubernetes mounts a ConfigMap as links through ``..data`` to a hidden timestamped directory,
#: and updates it by writing a new directory, then renaming a new ``..data`` link over the old
#: one: the rename is the update (what is written before it is not in force yet).
ATOMIC_WRITER_LINK = "..data"

#: No IN_MODIFY: a file being written is read once its writer closes it (IN_CLOSE_WRITE), never
#: half-written, however long the writer pauses between writes.
MASK = (Inotify.IN_CLOSE_WRITE | Inotify.IN_MOVED_TO | Inotify.IN_MOVED_FROM | Inotify.IN_CREATE
        | Inotify.IN_DELETE | Inotify.IN_ATTRIB | Inotify.IN_DELETE_SELF | Inotify.IN_MOVE_SELF)


class Watcher:
    def __init__(self, paths: list[str], callback: Callable[[float], None], debounce: float = 0.005) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        self.callback = callback
        self.debounce = debounce
        self._ino = Inotify()
        self._dirs: dict[int, str] = {}  # wd -> directory
        self._files: dict[str, set[str]] = {}  # directory -> names watched in it (None = all)
        self._whole: set[str] = set()  # directories whose every entry counts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for p in self.paths:
            if os.path.isdir(p):
                self._watch_tree(p)
            else:
                parent = os.path.dirname(p) or "."
                self._add(parent)
                self._files.setdefault(parent, set()).add(os.path.basename(p))

    def _add(self, directory: str) -> None:
        try:
            wd = self._ino.add_watch(directory, MASK)
        except OSError:
            return
        self._dirs[wd] = directory

    def _watch_tree(self, root: str) -> None:
        for dirpath, dirnames, _ in os.walk(root):
            self._whole.add(dirpath)
            self._add(dirpath)
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]

    def _relevant(self, wd: int, mask: int, name: str) -> bool:
        directory = self._dirs.get(wd)
        if directory is None:
            return mask & Inotify.IN_Q_OVERFLOW != 0
        if mask & Inotify.IN_CREATE and not mask & Inotify.IN_ISDIR and not os.path.islink(os.path.join(directory, name)):
            return False  # a new file counts once written and closed (IN_CLOSE_WRITE), a new link at once
        if directory in self._whole:
            if name == ATOMIC_WRITER_LINK:
                return True  # a ConfigMap/Secret volume's update is the swap of this one link
            if name.startswith("."):
                return False  # editors' swap files; the atomic writer's hidden directories
            if mask & Inotify.IN_ISDIR and mask & (Inotify.IN_CREATE | Inotify.IN_MOVED_TO):
                self._watch_tree(os.path.join(directory, name))
            return True
        return name in self._files.get(directory, ())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pyclassify-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._ino.close()

    def _run(self) -> None:
        first: float | None = None
        while not self._stop.is_set():
            events = self._ino.read(int(self.debounce * 1000) if first is not None else 100)
            hit = any(self._relevant(wd, mask, name) for wd, mask, name in events)
            if hit:
                if first is None:
                    first = time.monotonic()
                continue
            if first is not None and not events:
                started, first = first, None
                try:
                    self.callback(started)
                except Exception:  # noqa: BLE001 - the daemon logs; the watcher keeps watching
                    pass
