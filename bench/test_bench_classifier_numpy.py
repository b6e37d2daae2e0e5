"""The multi-field classifier through the Python numpy API (issue 4, item 8): ClassBench acl1,
fw1 and ipc1 at 10k rules with their traces, header batches in, rule ids out, beside the linear
first-match scan measured in the same run (correctness: both give the same ids on every header).

    .venv/bin/python -m pytest bench/test_bench_classifier_numpy.py -s --benchmark-columns=min,rounds

The native loop's own figure (no Python at all) comes from
``cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench classifier``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from pyclassify._engine import RuleClassifier
from pyclassify.batch import HEADER_DTYPE
from tests.shared_data import SHARED, missing, skip_or_fail

DATA = SHARED / "classbench"
SETS = ["acl1_10000", "fw1_10000", "ipc1_10000"]
RESULTS: dict[str, float] = {}


def headers_of(trace: Path) -> np.ndarray:
    with gzip.open(trace, "rt") as f:
        cols = np.loadtxt(f, dtype=np.uint64, usecols=range(5), ndmin=2)
    h = np.zeros(len(cols), HEADER_DTYPE)
    for field, col in (("src_addr", 0), ("dst_addr", 1)):
        h[field][:, 10:12] = 0xFF
        h[field][:, 12:16] = cols[:, col].astype(">u4").view(np.uint8).reshape(-1, 4)
    h["sport"], h["dport"], h["protocol"] = cols[:, 2], cols[:, 3], cols[:, 4]
    h["ip_version"] = 4
    return h


@pytest.mark.parametrize("name", SETS)
def test_numpy_api_throughput(benchmark, name):
    rules, trace = DATA / f"{name}.rules.gz", DATA / f"{name}.trace.gz"
    if not trace.exists():
        skip_or_fail(missing(trace, "ClassBench rule sets and traces"))
    headers = headers_of(trace)
    fast = RuleClassifier.from_classbench(str(rules))
    ids = np.empty(len(headers), np.int64)
    benchmark.pedantic(fast.classify, args=(headers, ids), rounds=5, iterations=1)
    rate = len(headers) / benchmark.stats.stats.min
    # The baseline, and the check: a linear first-match scan over the same rules and headers.
    linear = RuleClassifier.from_classbench(str(rules), "linear")
    sample = headers[:20000]
    want = np.empty(len(sample), np.int64)
    import time

    t = time.perf_counter()
    linear.classify(sample, want)
    linear_rate = len(sample) / (time.perf_counter() - t)
    assert (ids[: len(sample)] == want).all()
    small = np.empty(16, np.int64)
    t = time.perf_counter()
    for i in range(0, 16 * 2000, 16):
        fast.classify(headers[i : i + 16], small)
    rate16 = 16 * 2000 / (time.perf_counter() - t)
    RESULTS[name] = rate
    print(
        f"\n{name}: {rate / 1e6:.2f} Mpps from numpy (whole trace per call, {len(headers)} headers); "
        f"{rate16 / 1e6:.2f} Mpps in batches of 16; linear scan {linear_rate / 1e6:.3f} Mpps "
        f"({rate / linear_rate:.0f}x)"
    )
