"""The instruction-count gate's judgement (``bench/instructions.py``): callgrind_annotate's lines read
into function counts, and a rise named by the function whose own instructions grew most. The
counting itself runs in CI (``.ci/run``) against the committed baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import instructions
from bench.instructions import WORKLOADS, Count, grown_most

ROOT = Path(__file__).resolve().parents[2]


def test_the_function_that_grew_is_named_not_its_callers() -> None:
    base = {
        "instructions": 1000,
        "functions": {
            "gate": {"self": 10, "inclusive": 1000},
            "lookup": {"self": 900, "inclusive": 990},
            "hash": {"self": 90, "inclusive": 90},
        },
    }
    now = Count(
        1180,
        {
            "gate": {"self": 10, "inclusive": 1180},
            "lookup": {"self": 1080, "inclusive": 1170},
            "hash": {"self": 90, "inclusive": 90},
        },
    )
    assert grown_most(now, base) == "lookup: own instructions 900 -> 1,080 (+20.0 %), inclusive 990 -> 1,170"


def test_a_function_new_since_the_baseline_is_named_as_new() -> None:
    base = {"instructions": 100, "functions": {"gate": {"self": 100, "inclusive": 100}}}
    now = Count(150, {"gate": {"self": 100, "inclusive": 150}, "added": {"self": 50, "inclusive": 50}})
    assert grown_most(now, base).startswith("added (not among the baseline's functions")


def test_callgrind_annotate_lines_are_read_by_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = """\
--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
17,029,702 (100.0%)  PROGRAM TOTALS
16,742,342 (98.31%)  ???:<pyclassify_core::classifier::tuplemerge::TupleMerge as pyclassify_core::classifier::Classifier>::classify [/x/instruction_workloads]
   287,360 ( 1.69%)  ./malloc/./malloc/malloc.c:free [/usr/lib/x86_64-linux-gnu/libc.so.6]
"""

    class Done:
        stdout = text

    monkeypatch.setattr(instructions.subprocess, "run", lambda *a, **k: Done())
    assert instructions.annotate(tmp_path / "out", inclusive=False) == {
        "<pyclassify_core::classifier::tuplemerge::TupleMerge as pyclassify_core::classifier::Classifier>::classify": 16_742_342,
        "free": 287_360,
    }


def test_the_baseline_holds_every_workload() -> None:
    baseline = json.loads((ROOT / "bench" / "instructions-baseline.json").read_text())
    assert sorted(baseline["workloads"]) == sorted(WORKLOADS)
    assert 0 < baseline["threshold_percent"] <= 5
