"""Every conformance test runs on both paths: the reference evaluator and the native engine."""

from __future__ import annotations

import pytest

from tests.evaluators import EVALUATORS


@pytest.fixture(params=sorted(EVALUATORS))
def evaluate(request):
    return EVALUATORS[request.param]
