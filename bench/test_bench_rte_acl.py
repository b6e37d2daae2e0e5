"""The classifier beside DPDK's ``rte_acl`` (issue 15, item 1): ClassBench acl1 at 10k and 100k
rules, fw1 and ipc1 at 10k, each with its trace, in one run.

- pyclassify: ``RuleClassifier.from_classbench`` (TupleMerge), the whole trace per
  ``classify`` call (header batch in, rule ids out, no GIL);
- rte_acl: ``bench/peers/rte_acl_bench.c`` linked against Debian's DPDK, the whole trace in
  bursts of 64 through ``rte_acl_classify``, the algorithm DPDK picks on this CPU (``alg`` below).

Both: one untimed pass to warm the caches, then ``ROUNDS`` timed passes; the median is quoted.
Build time is each one's whole build from the parsed rules (pyclassify's includes reading the
gzip file; rte_acl's is create + add + build); memory is the bytes each one's structures hold
(pyclassify: the capacities of its tables; rte_acl: what ``rte_malloc`` holds after the build).
Answers: a linear first-match scan over the same rules on the first 20,000 headers is the truth;
both must equal it there, and the two must agree on every header of the trace.

    .venv/bin/python -m pytest bench/test_bench_rte_acl.py -s -p no:randomly   # needs dpdk-dev, gcc

A machine without DPDK's headers skips the rte_acl column, saying so.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

from bench.peers import build_or_skip, run_json
from bench.test_bench_classifier_numpy import DATA, headers_of
from pyclassify._engine import RuleClassifier
from tests.shared_data import missing, skip_or_fail

SETS = os.environ.get("PYCLASSIFY_ACL_SETS", "acl1_10000,fw1_10000,ipc1_10000,acl1_100000").split(",")
ROUNDS = int(os.environ.get("PYCLASSIFY_ACL_ROUNDS", "7"))
SAMPLE = 20000
ALGS = {1: "scalar", 2: "sse", 3: "avx2", 6: "avx512x16", 7: "avx512x32"}  # enum rte_acl_classify_alg
RESULTS: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_or_skip("rte_acl_bench", tmp_path_factory.mktemp("peers"))


def _pyclassify(rules: Path, headers: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    t = time.perf_counter()
    fast = RuleClassifier.from_classbench(str(rules))
    build = time.perf_counter() - t
    ids = np.empty(len(headers), np.int64)
    fast.classify(headers, ids)  # warm
    secs = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        fast.classify(headers, ids)
        secs.append(time.perf_counter() - t)
    return {
        "rules": len(fast),
        "build_s": build,
        "bytes": fast.memory_bytes(),
        "median_s": statistics.median(secs),
        "best_s": min(secs),
    }, ids


@pytest.mark.parametrize("name", SETS)
def test_beside_rte_acl(name: str, peer: Path, tmp_path: Path) -> None:
    rules, trace = DATA / f"{name}.rules.gz", DATA / f"{name}.trace.gz"
    if not trace.exists():
        skip_or_fail(missing(trace, "ClassBench rule sets and traces"))
    headers = headers_of(trace)
    ours, ids = _pyclassify(rules, headers)

    for src, dst in ((rules, tmp_path / "rules"), (trace, tmp_path / "trace")):
        with gzip.open(src, "rb") as f, open(dst, "wb") as out:
            shutil.copyfileobj(f, out)
    theirs = run_json(
        [str(peer), str(tmp_path / "rules"), str(tmp_path / "trace"), str(tmp_path / "ids"), str(ROUNDS), "64"],
        timeout=1800,
    )
    alg = re.search(r"alg=(\d+)", theirs["_stdout"])
    theirs["alg"] = ALGS.get(int(alg.group(1)), alg.group(1)) if alg else "?"
    acl_ids = np.fromfile(tmp_path / "ids", dtype=np.int32).astype(np.int64)
    assert theirs["rules"] == ours["rules"] and theirs["headers"] == len(headers) == len(acl_ids)

    linear = RuleClassifier.from_classbench(str(rules), "linear")
    want = np.empty(min(SAMPLE, len(headers)), np.int64)
    linear.classify(headers[: len(want)], want)
    assert (ids[: len(want)] == want).all(), "pyclassify differs from the linear first match"
    assert (acl_ids[: len(want)] == want).all(), "rte_acl differs from the linear first match"
    differ = int(np.count_nonzero(ids != acl_ids))
    assert differ == 0, f"pyclassify and rte_acl differ on {differ} headers"

    n = len(headers)
    row = {
        "headers": n,
        "ours_mpps": n / ours["median_s"] / 1e6,
        "ours_best_mpps": n / ours["best_s"] / 1e6,
        "acl_mpps": n / theirs["median_s"] / 1e6,
        "acl_best_mpps": n / theirs["best_s"] / 1e6,
        "ours_build_s": ours["build_s"],
        "acl_build_s": theirs["build_s"],
        "ours_mb": ours["bytes"] / 1e6,
        "acl_mb": theirs["heap_bytes"] / 1e6,
        "acl_peak_rss_mb": theirs["max_rss_kb"] / 1e3,
        "acl_alg": theirs["alg"],
    }
    row["ratio"] = row["ours_mpps"] / row["acl_mpps"]
    RESULTS[name] = row
    print(
        f"\n{name} ({ours['rules']} rules, {n} headers): pyclassify {row['ours_mpps']:.2f} Mpps "
        f"(best {row['ours_best_mpps']:.2f}), build {ours['build_s'] * 1e3:.1f} ms, {row['ours_mb']:.1f} MB | "
        f"rte_acl ({theirs['dpdk']}, {theirs['alg']}) {row['acl_mpps']:.2f} Mpps (best {row['acl_best_mpps']:.2f}), "
        f"build {theirs['build_s'] * 1e3:.0f} ms, {row['acl_mb']:.1f} MB (peak RSS {row['acl_peak_rss_mb']:.0f} MB) | ratio {row['ratio']:.2f}x; "
        f"answers equal on all {n} headers, both equal the linear scan on {len(want)}"
    )


def test_table() -> None:
    if not RESULTS:
        pytest.skip("run the whole module (and have dpdk-dev) for the table")
    print(
        "\n| ruleset | pyclassify Mpps | rte_acl Mpps | ratio | build pyclassify | build rte_acl "
        "| memory pyclassify | memory rte_acl (peak RSS) | rte_acl method |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in RESULTS.items():
        print(
            f"| {name} | {r['ours_mpps']:.2f} | {r['acl_mpps']:.2f} | {r['ratio']:.2f}x | "
            f"{r['ours_build_s'] * 1e3:.1f} ms | {r['acl_build_s'] * 1e3:.0f} ms | {r['ours_mb']:.1f} MB | "
            f"{r['acl_mb']:.1f} MB ({r['acl_peak_rss_mb']:.0f} MB) | {r['acl_alg']} |"
        )
    print(json.dumps(RESULTS))
