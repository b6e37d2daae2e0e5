"""The ClassBench classifier beside DPDK's ``rte_acl``: acl1, fw1 and ipc1 at 10k and 100k rules
in one run, each with its published trace (fw1 and ipc1 at 100k have none: a trace is generated
from their rules, ten headers a rule, and says so).

- pyclassify: TupleMerge (``rust/core/src/classifier``), run by ``rust/core``'s ``classbench``
  binary (``src/bin/classbench.rs``, built here with cargo): the whole trace per timed pass. The
  engine's decisions do not go through TupleMerge, so the Python package does not carry it;
- the engine's classifier: the bit-vector rows its compiled programs are (``classifier/rows.rs``),
  as ``BitVector`` over the same rules, by the same binary in each pair; a set whose rows would
  pass its memory bound is reported refused;
- rte_acl: ``bench/peers/rte_acl_bench.c`` linked against Debian's DPDK, the whole trace in
  bursts of 64 through ``rte_acl_classify``, timed with every classify method this CPU and build
  offer (scalar, SSE, AVX2, AVX-512 where present): the fastest is quoted, the others printed.

Both: one untimed pass to warm the caches, then ``ROUNDS`` timed passes, the median taken; the
two run in turn ``PAIRS`` times (3), and the ratio quoted is the median of the pairs' ratios
(each side's rate: the median of its runs' medians).
Build time is each one's whole build from the parsed rules (pyclassify's includes reading the
gzip file; rte_acl's is create + add + build); memory is the bytes each one's structures hold
(pyclassify: the capacities of its tables; rte_acl: what ``rte_malloc`` holds after the build).
Answers: a linear first-match scan over the same rules on the first 20,000 headers (the
``classbench`` binary's ``LinearScan``) is the truth;
both must equal it there, and the two must agree on every header of the trace.

    .venv/bin/python -m pytest bench/test_bench_rte_acl.py -s -p no:randomly   # needs dpdk-dev, gcc, cargo

A machine without DPDK's headers (or without cargo) skips, saying so.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.peers import PeerMissing, build_or_skip, cargo_bin, run_json
from tests.shared_data import SHARED, missing, skip_or_fail

DATA = SHARED / "classbench"

SETS = os.environ.get(
    "PYCLASSIFY_ACL_SETS", "acl1_10000,fw1_10000,ipc1_10000,acl1_100000,fw1_100000,ipc1_100000"
).split(",")
ROUNDS = int(os.environ.get("PYCLASSIFY_ACL_ROUNDS", "7"))
PAIRS = int(os.environ.get("PYCLASSIFY_ACL_PAIRS", "3"))
SAMPLE = 20000
RESULTS: dict[str, dict[str, float | str]] = {}
GENERATED_PER_RULE = 10


def _rule_count(rules: Path) -> int:
    with gzip.open(rules, "rt") as f:
        return sum(1 for line in f if line.strip())


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_or_skip("rte_acl_bench", tmp_path_factory.mktemp("peers"))


@pytest.fixture(scope="module")
def ours() -> Path:
    try:
        return cargo_bin("classbench")
    except PeerMissing as e:
        pytest.skip(f"pyclassify's classifier not measured: {e}")


@pytest.mark.parametrize("name", SETS)
def test_beside_rte_acl(name: str, ours: Path, peer: Path, tmp_path: Path) -> None:
    rules, trace = DATA / f"{name}.rules.gz", DATA / f"{name}.trace.gz"
    if not rules.exists():
        skip_or_fail(missing(rules, "ClassBench rule sets and traces"))
    for src, dst in ((rules, tmp_path / "rules"), (trace, tmp_path / "trace")):
        if src.exists():
            with gzip.open(src, "rb") as f, open(dst, "wb") as out:
                shutil.copyfileobj(f, out)
    generated = not trace.exists()
    if generated:
        # published without a trace (fw1 and ipc1 at 100k): points inside rules chosen by a fixed
        # seed, ten headers per rule as the published traces have, the same file for both
        subprocess.run(
            [
                str(ours),
                "trace",
                str(rules),
                str(GENERATED_PER_RULE * _rule_count(rules)),
                "1",
                str(tmp_path / "trace"),
            ],
            check=True,
        )
        trace = tmp_path / "trace"
    # the two alternate, PAIRS times, so that a slow spell of the machine falls on both sides:
    # the ratio quoted is the median of the pairs' ratios
    mines, theirs_runs, bitvectors = [], [], []

    def ours_run(method: str, ids: str) -> dict:
        args = [str(ours), str(rules), str(trace), str(tmp_path / ids), str(ROUNDS), str(SAMPLE)]
        return run_json([*args, str(tmp_path / "linear"), method], timeout=1800)

    for _ in range(PAIRS):
        mines.append(ours_run("tuplemerge", "our_ids"))
        bitvectors.append(ours_run("bitvector", "bitvector_ids"))
        theirs_runs.append(
            run_json(
                [str(peer), str(tmp_path / "rules"), str(tmp_path / "trace"), str(tmp_path / "ids"), str(ROUNDS), "64"],
                timeout=1800,
            )
        )
    ratios = sorted(t["median_s"] / m["median_s"] for m, t in zip(mines, theirs_runs))
    mine = min(mines, key=lambda r: r["median_s"]) | {"median_s": statistics.median(r["median_s"] for r in mines)}
    theirs = min(theirs_runs, key=lambda r: r["median_s"]) | {
        "median_s": statistics.median(r["median_s"] for r in theirs_runs)
    }
    ids = np.fromfile(tmp_path / "our_ids", dtype=np.int32).astype(np.int64)
    want = np.fromfile(tmp_path / "linear", dtype=np.int32).astype(np.int64)
    acl_ids = np.fromfile(tmp_path / "ids", dtype=np.int32).astype(np.int64)
    n = len(ids)
    assert theirs["rules"] == mine["rules"] and theirs["headers"] == mine["headers"] == n == len(acl_ids)
    assert len(want) == min(SAMPLE, n)
    assert (ids[: len(want)] == want).all(), "pyclassify differs from the linear first match"
    assert (acl_ids[: len(want)] == want).all(), "rte_acl differs from the linear first match"
    differ = int(np.count_nonzero(ids != acl_ids))
    assert differ == 0, f"pyclassify and rte_acl differ on {differ} headers"
    if "refused" in bitvectors[0]:
        bitvector = f"refused: {bitvectors[0]['refused']}"
    else:
        bv_ids = np.fromfile(tmp_path / "bitvector_ids", dtype=np.int32).astype(np.int64)
        differ = int(np.count_nonzero(bv_ids != acl_ids))
        assert differ == 0, f"the bit-vector classifier and rte_acl differ on {differ} headers"
        bv_ratios = sorted(t["median_s"] / b["median_s"] for b, t in zip(bitvectors, theirs_runs))
        bv_median = statistics.median(b["median_s"] for b in bitvectors)
        bitvector = (
            f"{n / bv_median / 1e6:.2f} Mpps, ratio {statistics.median(bv_ratios):.2f}x, "
            f"build {bitvectors[0]['build_s'] * 1e3:.0f} ms, {bitvectors[0]['bytes'] / 1e6:.1f} MB"
        )

    row = {
        "headers": n,
        "ours_mpps": n / mine["median_s"] / 1e6,
        "ours_best_mpps": n / mine["best_s"] / 1e6,
        "acl_mpps": n / theirs["median_s"] / 1e6,
        "acl_best_mpps": n / theirs["best_s"] / 1e6,
        "ours_build_s": mine["build_s"],
        "acl_build_s": theirs["build_s"],
        "ours_mb": mine["bytes"] / 1e6,
        "acl_mb": theirs["heap_bytes"] / 1e6,
        "acl_peak_rss_mb": theirs["max_rss_kb"] / 1e3,
        "acl_alg": theirs["alg"],
    }
    row["acl_methods"] = ", ".join(f"{k} {n / v / 1e6:.2f}" for k, v in theirs["methods"].items())
    row["ratio"] = statistics.median(ratios)
    row["ratios"] = ", ".join(f"{r:.2f}" for r in ratios)
    row["trace"] = "generated" if generated else "published"
    row["bitvector"] = bitvector
    RESULTS[name] = row
    print(
        f"\n{name} ({mine['rules']} rules, {n} headers, {row['trace']} trace): pyclassify {row['ours_mpps']:.2f} Mpps "
        f"(best {row['ours_best_mpps']:.2f}), build {mine['build_s'] * 1e3:.1f} ms, {row['ours_mb']:.1f} MB | "
        f"rte_acl ({theirs['dpdk']}, {theirs['alg']}) {row['acl_mpps']:.2f} Mpps (best {row['acl_best_mpps']:.2f}), "
        f"[methods, Mpps: {row['acl_methods']}], build {theirs['build_s'] * 1e3:.0f} ms, {row['acl_mb']:.1f} MB (peak RSS {row['acl_peak_rss_mb']:.0f} MB) | ratio {row['ratio']:.2f}x (pairs: {row['ratios']}); "
        f"answers equal on all {n} headers, both equal the linear scan on {len(want)} | "
        f"the engine's bit-vector classifier: {bitvector}"
    )


def test_table() -> None:
    if not RESULTS:
        pytest.skip("run the whole module (and have dpdk-dev) for the table")
    print(
        "\n| ruleset | pyclassify Mpps | rte_acl Mpps | ratio | build pyclassify | build rte_acl "
        "| memory pyclassify | memory rte_acl (peak RSS) | rte_acl method | trace | bit-vector (engine's) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in RESULTS.items():
        print(
            f"| {name} | {r['ours_mpps']:.2f} | {r['acl_mpps']:.2f} | {r['ratio']:.2f}x | "
            f"{r['ours_build_s'] * 1e3:.1f} ms | {r['acl_build_s'] * 1e3:.0f} ms | {r['ours_mb']:.1f} MB | "
            f"{r['acl_mb']:.1f} MB ({r['acl_peak_rss_mb']:.0f} MB) | {r['acl_alg']} | {r['trace']} | {r['bitvector']} |"
        )
    print(json.dumps(RESULTS))
