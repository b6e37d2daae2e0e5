#!/usr/bin/env bash
# Every benchmark, from one command: the Rust harnesses of the core, then the pytest-benchmark
# suites (root-only ones skip with a reason when not root). Extra arguments go to pytest, e.g.
#   bash bench/run.sh --benchmark-autosave            # save this run as a baseline
#   bash bench/run.sh --benchmark-compare --benchmark-compare-fail=min:10%
# then the instruction counts (bench/callgrind.sh) and the instruction-count gate
# (bench/instructions.py), which run even when a pytest comparison failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh test
for b in classifier conntrack labelindex engine; do
    echo "== cargo bench --bench $b"
    cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench "$b"
done
# A failed --benchmark-compare-fail still runs the instruction counts after it; the exit status
# says whether any of the three failed.
status=0
echo "== pytest-benchmark suites"
.venv/bin/python -m pytest bench -s --benchmark-columns=min,median,rounds "$@" || status=1
echo "== instruction counts (stable signal)"
bash bench/callgrind.sh || status=1
echo "== instruction-count gate against bench/instructions-baseline.json"
.venv/bin/python -m bench.instructions || status=1
exit $status
