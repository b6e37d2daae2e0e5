#!/usr/bin/env bash
# All tests: pytest (Python, both extensions) and cargo test (pyclassify-core).
# Runs both even if the first fails; exits non-zero if either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
set -e
source scripts/venv.sh test
set +e

# A real etcd and kube-apiserver for tests/kube, built from Go modules into a cache outside the
# checkout (scripts/kube-testenv.sh). The first build takes about 10 minutes on two cores;
# later runs reuse the binaries at once. If it fails, tests/kube say why (and fail in CI).
echo "== etcd and kube-apiserver for tests/kube (cold build about 10 min, then cached)"
kube_start=$SECONDS
bash scripts/kube-testenv.sh >/dev/null || echo "kube-testenv: build failed (tests/kube will report it)"
echo "   ready after $((SECONDS - kube_start)) s"

# helm for the chart's tests (tests/kube/test_helm.py), from Go modules likewise, cached by version.
echo "== helm for tests/kube/test_helm.py (cold build a few minutes, then cached)"
helm_start=$SECONDS
bash scripts/helm-testenv.sh >/dev/null || echo "helm-testenv: build failed (tests/kube/test_helm.py will report it)"
echo "   ready after $((SECONDS - helm_start)) s"

# kubelet, kube-scheduler, kube-controller-manager and kube-proxy for the single-node cluster of
# tests/kube/test_node.py, from Go modules likewise (scripts/kube-node-build.sh), cached by version.
echo "== kubelet and the node's other binaries for tests/kube/test_node.py (cold build about 9 min, then cached)"
node_start=$SECONDS
bash scripts/kube-node-build.sh >/dev/null || echo "kube-node-build: build failed (tests/kube/test_node.py will report it)"
echo "   ready after $((SECONDS - node_start)) s"

# The pinned module zips the bundled API schemas are written from (scripts/update_schemas.py),
# fetched and hash-checked once (~65 MB, cached): tests/kinds/test_schema.py regenerates the
# schemas from them and compares.
echo "== module zips of the bundled API schemas (cached after the first run)"
.venv/bin/python scripts/update_schemas.py --fetch || echo "update_schemas: fetch failed (tests/kinds/test_schema.py skips, saying so)"

echo "== pytest"
# The failures' one-line summaries are kept for the recap at the end (CI shows only the tail).
recap="${PYCLASSIFY_TEST_RECAP:-}"
if [ -n "$recap" ]; then
    .venv/bin/python -m pytest | tee "$recap.pytest"
    pytest_rc=${PIPESTATUS[0]}
    grep -E "^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$" "$recap.pytest" > "$recap" || true
    rm -f "$recap.pytest"
else
    .venv/bin/python -m pytest
    pytest_rc=$?
fi

echo "== cargo test --manifest-path rust/Cargo.toml --release (cargo shows what it compiles)"
cargo test --manifest-path rust/Cargo.toml --release
cargo_rc=$?

# Bounded coverage-guided fuzzing of the selector parser, the manifest reader, the DNS decoder and
# the HTTP request reader (cargo-fuzz needs the nightly toolchain, which machines of this kind
# carry; cargo-fuzz itself is built from crates.io when missing).
fuzz_rc=0
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "== cargo install cargo-fuzz 0.13.2 (once: builds it from crates.io, a few minutes; cargo shows each crate)"
    cargo install cargo-fuzz --locked --version 0.13.2 || fuzz_rc=$?
fi
fuzz() {  # target, seconds
    # The build first, its progress shown (the first one compiles the crate instrumented: minutes);
    # then the bounded run, of which the last lines (libFuzzer's final stats) are kept.
    echo "== cargo +nightly fuzz build $1 (the first build takes minutes; cargo shows each crate)"
    cargo +nightly fuzz build --fuzz-dir rust/fuzz "$1" || return $?
    echo "== cargo +nightly fuzz run $1 (bounded: at most $2 s)"
    mkdir -p "rust/fuzz/corpus/$1" "rust/fuzz/seeds/$1"
    cargo +nightly fuzz run --fuzz-dir rust/fuzz "$1" "rust/fuzz/corpus/$1" "rust/fuzz/seeds/$1" \
        -- -runs=200000 -max_total_time="$2" -print_final_stats=1 2>&1 | tail -n 4
    return "${PIPESTATUS[0]}"
}
if [ "$fuzz_rc" -eq 0 ]; then
    fuzz selector_parse 60 || fuzz_rc=$?
    fuzz manifest_parse 30 || fuzz_rc=$?
    fuzz dns_parse 30 || fuzz_rc=$?
    fuzz http_parse 30 || fuzz_rc=$?
fi

echo "== summary: pytest exit ${pytest_rc}, cargo test exit ${cargo_rc}, fuzz exit ${fuzz_rc}"
[ -n "$recap" ] && echo "== summary: pytest exit ${pytest_rc}, cargo test exit ${cargo_rc}, fuzz exit ${fuzz_rc}" >> "$recap"
if [ "$pytest_rc" -ne 0 ] || [ "$cargo_rc" -ne 0 ] || [ "$fuzz_rc" -ne 0 ]; then
    exit 1
fi
