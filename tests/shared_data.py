"""The data beside the checkout (``../shared``: conformance cases, ClassBench rule sets) that some
tests read, and what a test does when it is missing.

A clone on its own has no ``../shared``: those tests skip, naming the file they need. CI always
has it beside the checkout, and ``.ci/run`` sets ``PYCLASSIFY_REQUIRE_SHARED=1``: there a missing
file fails the test instead (the root ``conftest.py`` turns such a skip into a failure), so the
conformance suites can never stop running unnoticed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: ``../shared`` beside the checkout; ``PYCLASSIFY_SHARED`` names another place (or none, to see
#: what a clone without it does).
SHARED = Path(os.environ.get("PYCLASSIFY_SHARED") or REPO.parent / "shared")
#: Set (to anything but "" or "0") where ``../shared`` must be there: a missing file fails.
REQUIRE_ENV = "PYCLASSIFY_REQUIRE_SHARED"
#: Every skip for missing shared data says this (the root conftest finds them by it).
MARKER = "not found beside the checkout"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def missing(path: Path, what: str) -> str:
    """The reason a test cannot run without ``path``."""
    return f"{path} {MARKER} ({what}: ../shared, which CI has; {REQUIRE_ENV}=1 makes its absence a failure)"


def shared_path(*parts: str, what: str) -> Path:
    """``../shared/<parts>``, or a skip (a failure under ``PYCLASSIFY_REQUIRE_SHARED``) naming it."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        skip_or_fail(missing(path, what))
    return path


def skip_or_fail(reason: str) -> None:
    if required():
        pytest.fail(reason)
    pytest.skip(reason)


def skip_mark(path: Path, what: str) -> pytest.MarkDecorator:
    """A skip mark for parameters made from a missing file (the root conftest fails it where
    the data is required)."""
    return pytest.mark.skip(reason=missing(path, what))
