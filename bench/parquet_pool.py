"""Parquet flow logs judged with their row groups read from the system allocator (what
``pyclassify.parquet`` does) against pyarrow's default pool, in one run: alternating rounds, each
a fresh process that loads the cluster, then times ``RecordReplay.run`` over the file (reading,
judging, the tally; the load apart). A fresh process each round because the cost being measured
is the pages a process faults in as it reads.

    .venv/bin/python -m bench.parquet_pool [--records 1000000] [--pods 10000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.cluster import generate, write_json_compact
from bench.flowrecords import write

# One round: the replay's seconds, with the reading pool as shipped or replaced by none (every
# buffer from pyarrow's default pool).
ROUND = """
import contextlib, sys, time
from pyclassify import parquet
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay
if sys.argv[3] == "default":
    parquet._reading_pool = lambda pa: contextlib.nullcontext()
project = load_project([sys.argv[1]])
engine = NativeEngine(project.policy_set, project.inventory)
replay = RecordReplay(engine)
parquet.load_pyarrow()  # imported before the clock, as replay does
started = time.perf_counter()
replay.run([sys.argv[2]])
print(time.perf_counter() - started)
"""


def _round(cluster_json: Path, records: Path, pool: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", ROUND, str(cluster_json), str(records), pool], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cluster = generate(args.pods, seed=1)
        cluster_json = write_json_compact(cluster, directory / "cluster.json")
        records = write(cluster, directory / "records", "parquet", args.records)
        times: dict[str, list[float]] = {"system": [], "default": []}
        for _ in range(args.rounds):
            for pool in times:
                times[pool].append(_round(cluster_json, records, pool))
        med = {pool: statistics.median(t) for pool, t in times.items()}
        for pool, t in times.items():
            print(
                f"{pool:>7} pool: median {med[pool]:.3f} s ({args.records / med[pool]:,.0f} records/s), "
                f"min {min(t):.3f} s, max {max(t):.3f} s over {len(t)} rounds"
            )
        print(f"system pool against the default: {med['default'] / med['system']:.2f}x (median seconds)")


if __name__ == "__main__":
    main()
