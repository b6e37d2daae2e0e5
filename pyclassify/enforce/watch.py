"""Watch the policy and inventory files of ``pyclassify enforce`` with inotify and call back
after a quiet period.

Directories are watched recursively (new subdirectories are added as they appear); a file is
watched through its parent directory, so editors that write a new file and rename it over the old
one are seen too. Each root is watched through its parent directory as well: a root removed and
created again, or a new root renamed over the old one, is watched anew and reloaded (the watch
of a directory ends with it). Events are debounced: the callback runs once the paths have been
quiet for ``debounce`` seconds, with the monotonic time of the first event of the burst (for the
apply-latency metric). The callback validates, compiles and swaps (``PolicyReload.reload``).
``not_healthy`` says when the watch has stopped, or a root is there but not watched.
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
MASK = (
    Inotify.IN_CLOSE_WRITE
    | Inotify.IN_MOVED_TO
    | Inotify.IN_MOVED_FROM
    | Inotify.IN_CREATE
    | Inotify.IN_DELETE
    | Inotify.IN_ATTRIB
    | Inotify.IN_DELETE_SELF
    | Inotify.IN_MOVE_SELF
)


class Watcher:
    def __init__(self, paths: list[str], callback: Callable[[float], None], debounce: float = 0.005) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        self.callback = callback
        self.debounce = debounce
        self._ino = Inotify()
        self._dirs: dict[int, str] = {}  # wd -> directory
        self._files: dict[str, set[str]] = {}  # directory -> names watched in it (None = all)
        self._whole: set[str] = set()  # directories whose every entry counts
        self._roots: dict[str, set[str]] = {}  # parent directory -> names of roots in it
        self._watched: dict[str, tuple[int, int]] = {}  # directory root -> (device, inode) watched
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for p in self.paths:
            parent = os.path.dirname(p) or "."
            self._add(parent)
            self._roots.setdefault(parent, set()).add(os.path.basename(p))
            if os.path.isdir(p):
                self._watch_root(p)
            else:
                self._files.setdefault(parent, set()).add(os.path.basename(p))

    def _add(self, directory: str) -> None:
        try:
            wd = self._ino.add_watch(directory, MASK)
        except OSError:
            return
        self._dirs[wd] = directory

    def _watch_root(self, root: str) -> None:
        try:
            st = os.stat(root)
        except OSError:
            return
        self._watch_tree(root)
        self._watched[root] = (st.st_dev, st.st_ino)

    def _watch_tree(self, root: str) -> None:
        for dirpath, dirnames, _ in os.walk(root):
            self._whole.add(dirpath)
            self._add(dirpath)
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]

    def _relevant(self, wd: int, mask: int, name: str) -> bool:
        if mask & Inotify.IN_Q_OVERFLOW:
            for root in self.paths:  # events were lost: a root may have come back unseen
                if os.path.isdir(root):
                    self._watch_root(root)
            return True
        if mask & Inotify.IN_IGNORED:
            self._dirs.pop(wd, None)  # the directory went, and its watch with it
            return False
        directory = self._dirs.get(wd)
        if directory is None:
            return False
        root = os.path.join(directory, name)
        if name in self._roots.get(directory, ()) and (mask & Inotify.IN_ISDIR or root in self._watched):
            # a directory root itself created, removed, renamed in or away
            if mask & (Inotify.IN_CREATE | Inotify.IN_MOVED_TO) and os.path.isdir(root):
                self._watch_root(root)
            return True
        if (
            mask & Inotify.IN_CREATE
            and not mask & Inotify.IN_ISDIR
            and not os.path.islink(os.path.join(directory, name))
        ):
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

    def not_healthy(self) -> str | None:
        """Why the watch does not follow the paths (None: it does): its thread has stopped, or
        a root directory is there but not the one watched."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "policy watch stopped: changes to the policy paths are not seen"
        for root in self.paths:
            try:
                st = os.stat(root)
            except OSError:
                continue
            if os.path.isdir(root) and self._watched.get(root) != (st.st_dev, st.st_ino):
                return f"policy path {root} is not watched (replaced and not seen)"
        return None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._ino.close()

    def _run(self) -> None:
        first: float | None = None
        while not self._stop.is_set():
            events = self._ino.read(int(self.debounce * 1000) if first is not None else 100)
            # every event looked at (not up to the first that counts): each may add a watch
            hit = [self._relevant(wd, mask, name) for wd, mask, name in events].count(True) > 0
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
