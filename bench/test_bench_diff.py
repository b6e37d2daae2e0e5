"""``pyclassify diff`` at cluster size (issue 16, item 4).

The 10k-pod cluster of ``bench.cluster`` (1,000 NetworkPolicies, ANPs, a BANP, a Calico tier) as
single-line JSON, and one-policy changes drawn by its ``random_change`` (a NetworkPolicy
changed, a NetworkPolicy added). Each change is timed as a whole process,
``pyclassify diff cluster.json --apply change.json --json``, best and median of the rounds (wall
clock: start, loading, both engines, grouping, judging, output), with its peak RSS.

Baseline, same run: brute-force pairwise evaluation — every pod pair judged on its own by the
native batch engine over the same flow classes, under the old and the new policy, no grouping —
timed on a sample of pod pairs and scaled to every pair of the cluster. The sample also checks
the answers: each sampled flow whose verdict changed must be among the changes ``diff`` printed,
and no unchanged one.

    .venv/bin/python -m pytest bench/test_bench_diff.py -s
    PYCLASSIFY_DIFF_PODS=1000 .venv/bin/python -m pytest bench/test_bench_diff.py -s   # smaller
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.cluster import generate, random_change, write_json_compact
from pyclassify import reachability as reach
from pyclassify.engine import EngineState
from pyclassify.project import load_project

PODS = int(os.environ.get("PYCLASSIFY_DIFF_PODS", "10000"))
CHANGES = int(os.environ.get("PYCLASSIFY_DIFF_CHANGES", "4"))
ROUNDS = int(os.environ.get("PYCLASSIFY_DIFF_ROUNDS", "3"))
SAMPLE_PAIRS = int(os.environ.get("PYCLASSIFY_DIFF_SAMPLE", "4000"))
ROOT = Path(__file__).resolve().parents[1]
RESULTS: list[dict] = []


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("diff")
    cluster = generate(PODS, seed=1)
    path = write_json_compact(cluster, out / "cluster.json")
    rng = random.Random(16)
    changes = []
    for i in range(CHANGES):
        kind = ("networkpolicy-changed", "networkpolicy-added")[i % 2]
        change = random_change(cluster, rng, kind)
        changes.append(out / f"change-{i}-{kind}.json")
        changes[-1].write_text(json.dumps(change.after))
    return path, changes


def _run(cluster: Path, change: Path) -> tuple[float, dict, int]:
    """Wall seconds, the JSON printed, and the process's peak RSS (KiB)."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyclassify", "diff", str(cluster), "--apply", str(change), "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out = proc.stdout.read()  # type: ignore[union-attr]
    err = proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode in (0, 5), err[-2000:]
    return elapsed, json.loads(out), usage.ru_maxrss


def _pairwise(cluster: Path, change: Path, doc: dict, rng: random.Random) -> tuple[float, int, int]:
    """Seconds per pod pair judged alone (old and new, every flow class), and the sample's
    flows checked against ``doc``."""
    old = load_project([str(cluster)])
    new = old.applied(load_project([str(change)]))
    state = EngineState()
    a = state.update(old.policy_set, old.inventory)
    b = state.update(new.policy_set, old.inventory)
    pods = [p for p in reach.table_endpoints(old.inventory) if p.ips and old.inventory.owner_of(p.ips[0]) is p]
    singles = [reach.Group(4, p.ips[0], p, [(p, p.ips[0])]) for p in pods]
    index = {p.ref: k for k, p in enumerate(pods)}
    touched = [
        index[r] for c in doc["changes"] for side in ("from", "to") for r in c[side].get("endpoints", []) if r in index
    ]
    pairs = []
    for _ in range(SAMPLE_PAIRS):
        s, d = rng.randrange(len(pods)), rng.randrange(len(pods))
        if touched and rng.random() < 0.5:  # half the sample where the change is
            if rng.random() < 0.5:
                s = rng.choice(touched)
            else:
                d = rng.choice(touched)
        pairs.append((s, d))
    si = np.array([s for s, _ in pairs])
    di = np.array([d for _, d in pairs])
    space = reach.FlowSpace.build([a, b])
    classes = space.classes[4]
    t = time.perf_counter()
    before = reach.judge_pairs(a, singles, singles, si, di, classes, 4, {}, records=False)
    after = reach.judge_pairs(b, singles, singles, si, di, classes, 4, {}, records=False)
    per_pair = (time.perf_counter() - t) / len(pairs)
    # The answers: a sampled flow changed exactly when diff printed it.
    printed: dict[tuple[str, str], list[tuple]] = {}
    for c in doc["changes"]:
        if c["from"]["kind"] == "outside" or c["to"]["kind"] == "outside":
            continue
        for f in c["flows"]:
            for src in c["from"]["endpoints"]:
                for dst in c["to"]["endpoints"]:
                    printed.setdefault((src, dst), []).append((f["protocol"], f["ports"] or [], f["icmp"]))
    flows = 0
    for k, (s, d) in enumerate(pairs):
        said = printed.get((pods[s].ref, pods[d].ref), [])
        for col, fc in enumerate(classes):
            hit = any(proto == _proto(fc) and _holds(ports, icmp, fc) for proto, ports, icmp in said)
            assert hit == bool(before[k, col] != after[k, col]), (pods[s].ref, pods[d].ref, fc)
            flows += hit
    return per_pair, len(pairs), flows


def _proto(fc: reach.FlowClass) -> str:
    from pyclassify.kinds.common import protocol_name

    return "other" if fc.protocol == -1 else protocol_name(fc.protocol)


def _holds(ports: list, icmp: list | None, fc: reach.FlowClass) -> bool:
    if fc.dport is not None:
        return any(lo <= fc.dport[0] <= hi for lo, hi in ports)
    if icmp is not None:
        return {"type": fc.icmp_type, "code": fc.icmp_code} in icmp
    return True


def test_diff_one_policy_change(workload: tuple[Path, list[Path]]) -> None:
    cluster, changes = workload
    rng = random.Random(1)
    for change in changes:
        runs = [_run(cluster, change) for _ in range(ROUNDS)]
        times = sorted(r[0] for r in runs)
        doc = runs[0][1]
        per_pair, sampled, changed_flows = _pairwise(cluster, change, doc, rng)
        pods = doc["summary"]["groups"]  # groups, for the record
        total_pairs = PODS * PODS
        row = {
            "change": change.name,
            "best": times[0],
            "median": statistics.median(times),
            "rss_mb": max(r[2] for r in runs) / 1024,
            "changes": doc["summary"]["changes"],
            "groups": pods,
            "classes": doc["summary"]["flow_classes"],
            "judged": doc["summary"]["flows_judged"],
            "pairwise_s": per_pair * total_pairs,
            "sampled": sampled,
            "sample_changed": changed_flows,
        }
        row["ratio"] = row["pairwise_s"] / row["median"]
        RESULTS.append(row)
        print(
            f"\n{change.name}: diff whole process best {row['best']:.2f} s, median {row['median']:.2f} s, "
            f"peak RSS {row['rss_mb']:.0f} MB; {row['changes']} changes; {row['groups']} groups x "
            f"{row['classes']} flow classes, {row['judged']:,} flows judged; pairwise brute force "
            f"{per_pair * 1e6:.1f} µs a pod pair -> {row['pairwise_s']:.0f} s for {total_pairs:,} pairs "
            f"({row['ratio']:.0f}x the diff); sample {sampled} pairs, {changed_flows} changed flows, all printed"
        )


def test_summary() -> None:
    if not RESULTS:
        pytest.skip("no result")
    med = statistics.median(r["median"] for r in RESULTS)
    print(
        f"\ndiff, {PODS} pods, {len(RESULTS)} one-policy changes: median of medians {med:.2f} s; "
        f"pairwise brute force median {statistics.median(r['pairwise_s'] for r in RESULTS):.0f} s "
        f"({statistics.median(r['ratio'] for r in RESULTS):.0f}x)"
    )
