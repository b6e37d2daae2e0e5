"""The memory a policy set may take once built, and what happens to one that would take more.

A policy set's memory is estimated as it is normalized (``pyclassify.sharing.Shared.footprint``:
each distinct part at its measured cost), so a set that would pass the budget is refused before
the engine builds it: the whole update is rejected, the policy in force stays, and the
rejection names the costliest objects. The budget is given (``enforce --memory-budget``) or
derived from the memory limit of the daemon's cgroup: the daemon holds the set in force and
the one replacing it at once while it swaps them, beside its own runtime, so the default is
half of what the limit leaves after ``RESERVE``. Without a limit, the machine's memory stands
in for it.
"""

from __future__ import annotations

import os
import re

from pyclassify.documents import InvalidInput

#: What the daemon's runtime takes besides its policy (interpreter, libraries, loops, buffers).
RESERVE = 96 * 1024 * 1024
#: A cgroup v1 limit at or above this is no limit (the kernel prints PAGE_COUNTER_MAX pages).
UNLIMITED_V1 = 1 << 60

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*", re.IGNORECASE)


class OverBudget(InvalidInput):
    """A policy set (or one change to it) whose estimated memory passes the budget."""

    def __init__(self, estimate: int, budget: int, costliest: list[tuple[int, str]], what: str = "policy set") -> None:
        self.estimate, self.budget, self.costliest, self.what = estimate, budget, costliest, what
        self.message = self.describe("rejected whole, the policy in force stays")
        super().__init__([])
        self.args = (self.message,)

    def describe(self, outcome: str) -> str:
        """The estimate, the budget, what became of the set (``outcome``), the costliest objects."""
        named = ", ".join(f"{ref} (~{mib(cost)})" for cost, ref in self.costliest)
        return (
            f"{self.what} would take ~{mib(self.estimate)} once built, over the memory budget of "
            f"{mib(self.budget)} (--memory-budget): {outcome}" + (f"; costliest objects: {named}" if named else "")
        )

    def __str__(self) -> str:
        return self.message


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def parse_size(text: str) -> int | None:
    """``512M``, ``1G``, ``1.5Gi``, ``300000000`` (bytes) -> bytes; ``none`` -> None (no budget).
    Decimal and binary suffixes are both powers of 1024, as Kubernetes' ``Mi`` and ``M`` differ
    by 5 % only and a budget is no place for that difference."""
    if text.strip().lower() in ("none", "off", "unlimited"):
        return None
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"expected a size such as 512Mi, 1G or a number of bytes, or none; got {text[:40]!r}")
    value = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if value < 1:
        raise ValueError(f"a memory budget must be at least one byte, got {text[:40]!r}")
    return int(value)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(fstype, mount root within its hierarchy, mount point, super options) per cgroup mount."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((rest[0], fields[3], fields[4], rest[2]))
    return out


def cgroup_memory_limit(proc: str = "/proc/self") -> int | None:
    """The memory limit of this process's cgroup (the smallest along its path up to the root
    the container sees), v2 ``memory.max`` or v1 ``memory.limit_in_bytes``; None without one."""
    cgroups, mountinfo = _read(f"{proc}/cgroup"), _read(f"{proc}/mountinfo")
    if cgroups is None or mountinfo is None:
        return None
    limits = []
    for fstype, root, point, options in _mounts(mountinfo):
        for line in cgroups.splitlines():
            _, controllers, path = line.split(":", 2)
            if fstype == "cgroup2" and controllers == "":
                name = "memory.max"
            elif fstype == "cgroup" and "memory" in controllers.split(",") and "memory" in options.split(","):
                name = "memory.limit_in_bytes"
            else:
                continue
            # The path is relative to the hierarchy's root; the mount shows it from ``root``.
            rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
            parts = [] if rel in (".", "") else rel.split("/")
            for depth in range(len(parts), -1, -1):
                text = _read(os.path.join(point, *parts[:depth], name))
                if text and text != "max" and text.isdigit() and int(text) < UNLIMITED_V1:
                    limits.append(int(text))
    return min(limits) if limits else None


def physical_memory() -> int | None:
    text = _read("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def default_budget() -> int | None:
    """Half of what the cgroup's memory limit (or, without one, the machine's memory) leaves
    after ``RESERVE``; None when neither can be read."""
    limit = cgroup_memory_limit() or physical_memory()
    if limit is None:
        return None
    return max((limit - RESERVE) // 2, 16 << 20)
