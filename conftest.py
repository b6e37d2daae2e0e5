"""Where ``../shared`` is required (``PYCLASSIFY_REQUIRE_SHARED``, set by ``.ci/run``), a test
skipped for want of it fails instead (``tests.shared_data``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shared_data import MARKER, required


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and required():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MARKER in reason:
            report.outcome = "failed"
            report.longrepr = f"required shared data is missing: {reason}"
