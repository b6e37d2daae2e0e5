"""Shared test fixtures: where the conformance data beside the checkout lives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CASES = REPO.parent / "shared" / "cases"


def load_cases(name: str) -> Any:
    """A conformance file from ../shared/cases, or a skip saying why it is missing."""
    path = CASES / name
    if not path.exists():
        pytest.skip(f"{path} not found: conformance data lives in ../shared beside the checkout")
    return json.loads(path.read_text())
