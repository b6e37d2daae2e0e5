"""The one-shot commands in a memory limit, given the policy sets that once took gigabytes to
compile (2,000 GlobalNetworkPolicies with 300-term selectors; 500 NetworkPolicies with 200
ipBlocks each, every one with an ``except``; each policy distinct): ``explain``, ``render`` and
``check`` run in a cgroup of 512 MiB without swap, as a CI job or a small container would give
them, and complete, never killed for memory. Where even that is too much, ``--memory-budget``
refuses the set before it is built, naming its costliest objects, in a limit that would kill the
command without it. A bound on resources, not on time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import heavy_policies
from tests.enforce import cgroup
from tests.enforce.netns import root_reason

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

LIMIT = 512 * 1024 * 1024
REPO = Path(__file__).resolve().parents[1]
FLOW = ("--from", "payments/pod-0", "--to", "checkout/pod-1", "--port", "8080")


@pytest.fixture(scope="module", params=["selectors", "ipblocks"])
def heavy_set(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "selectors":
        objects = heavy_policies.selectors(2000, terms=300)
    else:
        objects = heavy_policies.ipblocks(500, blocks=200)
    return heavy_policies.write(objects, tmp_path_factory.mktemp(request.param)).parent


def run_limited(limit: int, args: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """``pyclassify ARGS`` in a memory cgroup of ``limit`` bytes; its result and OOM kills."""
    try:
        group = cgroup.memory(limit)
    except OSError as e:
        pytest.fail(f"no memory cgroup to run the command in: {e}")
    try:
        out = subprocess.run(
            [*group.prefix(), sys.executable, "-m", "pyclassify", *args],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
        return out, group.oom_kills()
    finally:
        group.close()


@pytest.mark.parametrize("command", ["explain", "render", "check"])
def test_a_heavy_set_compiles_within_512_mib(heavy_set: Path, command: str) -> None:
    args = {
        "explain": ["explain", str(heavy_set), *FLOW],
        "render": ["render", str(heavy_set), "--endpoint", "payments/pod-0"],
        "check": ["check", str(heavy_set)],
    }[command]
    out, kills = run_limited(LIMIT, args)
    assert kills == 0 and out.returncode == 0, (out.returncode, kills, out.stderr[-2000:])


def test_a_set_over_the_budget_is_refused_before_the_limit_kills(heavy_set: Path) -> None:
    small = 160 * 1024 * 1024
    killed, kills = run_limited(small, ["check", str(heavy_set)])
    assert kills >= 1 and killed.returncode != 0, "the limit does not bite: the test shows nothing"
    out, kills = run_limited(small, ["--memory-budget", "64Mi", "check", str(heavy_set)])
    assert kills == 0 and out.returncode == 1, (out.returncode, kills, out.stderr[-2000:])
    assert "over the memory budget of 64.0 MiB (--memory-budget): not built" in out.stderr, out.stderr
    assert "costliest objects: " in out.stderr
