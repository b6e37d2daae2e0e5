"""A cgroup of its own for a daemon under test: a memory limit (what a DaemonSet's
``resources.limits.memory`` sets) or a pids limit, as a child of this process's own cgroup, in
cgroup v2 when its memory (or pids) controller is delegated to us, else in the v1 hierarchy of
that controller. ``prefix()`` is the command that moves a process into it before it runs the
daemon; ``peak()`` the most memory it used. Removed again on ``close()``."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str) -> tuple[Path, str] | None:
    """(the hierarchy's mount, this process's cgroup in it) for ``controller``, v2 first."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2 = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    for mount in (ROOT, ROOT / "unified"):
        if v2 is not None and (mount / "cgroup.controllers").exists():
            own = mount / v2.lstrip("/")
            try:
                if controller in (own / "cgroup.subtree_control").read_text().split():
                    return mount, v2
            except OSError:
                pass
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") and (ROOT / controller).is_dir():
            return ROOT / controller, path
    return None


class Cgroup:
    def __init__(self, controller: str, settings: dict[str, str]) -> None:
        found = _own_path(controller)
        if found is None:
            raise OSError(f"no cgroup hierarchy with the {controller} controller to create a child in")
        mount, own = found
        self.v2 = (mount / "cgroup.controllers").exists()
        self.path = mount / own.lstrip("/") / f"pyclassify-test-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        try:
            for name, value in settings.items():
                (self.path / name).write_text(value)
        except OSError:
            self.close()
            raise

    def prefix(self) -> list[str]:
        """Runs the rest of the command line in this cgroup."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"]

    def set(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def read(self, name: str) -> str:
        return (self.path / name).read_text().strip()

    def peak(self) -> int | None:
        """The most memory the cgroup has used, in bytes (None: the kernel does not say)."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                return int(self.read(name))
            except (OSError, ValueError):
                continue
        return None

    def oom_kills(self) -> int:
        try:
            if self.v2:
                events = dict(line.split() for line in self.read("memory.events").splitlines())
                return int(events.get("oom_kill", 0))
            return int(dict(line.split() for line in self.read("memory.oom_control").splitlines()).get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        for _ in range(50):
            try:
                procs = [p for p in self.read("cgroup.procs").split() if p]
            except OSError:
                return
            if not procs:
                break
            time.sleep(0.1)  # its processes are being stopped by the test
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def memory(limit: int) -> Cgroup:
    """A child cgroup whose memory is limited to ``limit`` bytes (and no swap, where the kernel
    accounts it)."""
    group = Cgroup("memory", {})
    try:
        group.set("memory.max" if group.v2 else "memory.limit_in_bytes", str(limit))
    except OSError:
        group.close()
        raise
    for name in ("memory.swap.max",) if group.v2 else ("memory.memsw.limit_in_bytes", "memory.swappiness"):
        try:
            group.set(name, str(limit) if "memsw" in name else "0")
        except OSError:
            pass  # no swap accounting: nothing to limit
    return group


def pids(limit: int) -> Cgroup:
    group = Cgroup("pids", {})
    group.set("pids.max", str(limit))
    return group
