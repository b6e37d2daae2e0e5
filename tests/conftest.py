"""Shared test fixtures: where the conformance data beside the checkout lives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.shared_data import SHARED, shared_path

REPO = Path(__file__).resolve().parents[1]
CASES = SHARED / "cases"


def load_cases(name: str) -> Any:
    """A conformance file (``tests.shared_data``), or a skip (in CI a failure) naming it."""
    return json.loads(shared_path("cases", name, what="conformance cases").read_text())
