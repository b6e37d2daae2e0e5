"""The tests that need data kept outside the repository (``tests.shared_data``): on a clone without
it they skip, naming the file; where it is required (``PYCLASSIFY_REQUIRE_SHARED``, as ``.ci/run``
sets it) they fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_in(args: list[str], tmp_path: Path, require: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYCLASSIFY_SHARED=str(tmp_path / "no-shared-here"))
    env.pop("PYCLASSIFY_REQUIRE_SHARED", None)
    if require:
        env["PYCLASSIFY_REQUIRE_SHARED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "target",
    [
        "tests/conformance/test_npguard.py",
        "tests/conformance/test_policy_assistant.py::test_cidr_membership",
        "tests/kinds/test_inventory_kinds.py::test_workloads_are_named_as_np_guard_names_them",
        "tests/bench/test_benchmarks_run.py::test_benchmark_suite_runs_at_a_small_size[bench/test_bench_rte_acl.py]",
    ],
)
def test_without_the_shared_data_a_test_skips_naming_it_and_fails_where_required(target: str, tmp_path: Path) -> None:
    r = pytest_in([target], tmp_path, require=False)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "skipped" in r.stdout.splitlines()[-1] and "failed" not in r.stdout.splitlines()[-1]
    assert "no-shared-here" in r.stdout and "not found beside the checkout" in r.stdout
    r = pytest_in([target], tmp_path, require=True)
    assert r.returncode == 1, r.stdout[-3000:]
    last = r.stdout.splitlines()[-1]  # a skip at setup fails as an error
    assert ("failed" in last or "error" in last) and "skipped" not in last and "no-shared-here" in r.stdout


def test_the_readme_and_docs_point_at_no_file_outside_the_repository() -> None:
    texts = {p: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
    for path, text in texts.items():
        assert "../shared" not in text and "shared/DESIGN" not in text, path
