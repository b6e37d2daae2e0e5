"""The scaling model of ``bench.dask_scaling``: what it adds up, and what it names as the limit."""

from __future__ import annotations

import pytest

from bench.dask_scaling import BILLION, model


def test_the_fixed_cost_which_holds_the_engine_build_is_counted_once() -> None:
    total, efficiency, limit = model(
        rate=2e6, per_task=0.0, scheduler_per_task=0.0, merge=0.0, fixed=0.7, partition=BILLION, workers=1
    )
    assert total == pytest.approx(BILLION / 2e6 + 0.7)
    assert efficiency == pytest.approx((BILLION / 2e6) / total)
    assert limit == "the workers"


def test_a_scheduler_slower_than_the_workers_is_the_limit() -> None:
    total, _, limit = model(
        rate=2e6, per_task=0.001, scheduler_per_task=0.005, merge=0.0, fixed=0.0, partition=250_000, workers=1000
    )
    assert limit == "the scheduler"
    assert total == pytest.approx(4000 * 0.005)


def test_a_worker_slower_than_one_process_counts_against_the_efficiency() -> None:
    _, efficiency, _ = model(
        rate=1e6,
        per_task=0.0,
        scheduler_per_task=0.0,
        merge=0.0,
        fixed=0.0,
        partition=1_000_000,
        workers=10,
        ideal_rate=2e6,
    )
    assert efficiency == pytest.approx(0.5)
