#!/usr/bin/env bash
# Instruction counts of the Rust classifier on fixed ClassBench workloads, with callgrind.
#
# Wall time on shared machines is too noisy to gate on; instructions executed are not. This
# counts only `classify_workload` (the classification loop of rust/core/examples/
# classifier_workload.rs: build excluded) and prints instructions per packet.
#
#   bench/callgrind.sh                       # acl1_10000 fw1_10000 ipc1_10000, 100000 headers each
#   bench/callgrind.sh --save base.txt       # also write "ruleset instructions" lines to base.txt
#   bench/callgrind.sh --compare base.txt    # fail (exit 1) if any ruleset got >THRESHOLD% worse
#   THRESHOLD=2 HEADERS=20000 bench/callgrind.sh acl1_1000 ...
#   RTE_ACL_METHODS="sse avx2" bench/callgrind.sh   # rte_acl's classify methods to count (scalar sse avx2)
#   CLASSIFIER=bitvector bench/callgrind.sh  # the bit-vector classifier (the engine's) instead of TupleMerge
# With DPDK's headers installed, DPDK rte_acl's classify is counted on the same headers after.
set -euo pipefail
cd "$(dirname "$0")/.."

save="" compare="" sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --save) save="$2"; shift 2 ;;
        --compare) compare="$2"; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) sets+=("$1"); shift ;;
    esac
done
[ ${#sets[@]} -gt 0 ] || sets=(acl1_10000 fw1_10000 ipc1_10000)
headers="${HEADERS:-100000}"
threshold="${THRESHOLD:-1}"

command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
cargo build -q --release --manifest-path rust/Cargo.toml -p pyclassify-core --example classifier_workload
bin=rust/target/release/examples/classifier_workload
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -z "$save" ] || : > "$save"
status=0
for set in "${sets[@]}"; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/$set.out" \
        --toggle-collect='*classify_workload*' "$bin" "$set" "$headers" > "$tmp/$set.stdout" 2> "$tmp/$set.log" \
        || { cat "$tmp/$set.log" "$tmp/$set.stdout" >&2; exit 2; }
    ir=$(grep -m1 '^totals:' "$tmp/$set.out" | awk '{print $2}')
    n=$(sed -n 's/.* rules, \([0-9]*\) headers.*/\1/p' "$tmp/$set.stdout")
    printf '%-12s %14s instructions  %8.1f per packet  (%s)\n' "$set" "$ir" "$(echo "$ir / $n" | bc -l)" "$(cat "$tmp/$set.stdout")"
    [ -z "$save" ] || echo "$set $headers $ir" >> "$save"
    if [ -n "$compare" ]; then
        base=$(awk -v s="$set" -v h="$headers" '$1 == s && $2 == h {print $3}' "$compare")
        if [ -z "$base" ]; then
            echo "  no baseline for $set at $headers headers in $compare"
        else
            pct=$(echo "($ir - $base) * 100 / $base" | bc -l)
            printf '  vs baseline %s: %+.2f%%\n' "$base" "$pct"
            if [ "$(echo "$pct > $threshold" | bc -l)" = 1 ]; then
                echo "  REGRESSION: more than ${threshold}% more instructions" >&2
                status=1
            fi
        fi
    fi
done
# The peer: DPDK's rte_acl on the same headers, rte_acl_classify alone counted, once per classify
# method this CPU offers under valgrind (scalar, SSE, AVX2; valgrind hides AVX-512). The vector
# methods process 4 or 8 flows an instruction: per-packet counts of the two are a reference, not
# a like-for-like cost.
if pkg-config --exists libdpdk 2>/dev/null; then
    gcc -O3 -march=native -o "$tmp/rte_acl_bench" bench/peers/rte_acl_bench.c $(pkg-config --cflags --libs libdpdk)
    for set in "${sets[@]}"; do
        zcat "../shared/classbench/$set.rules.gz" > "$tmp/rules"
        # head stops reading at $headers lines: zcat is fed through a process substitution, so
        # the SIGPIPE it then gets is no pipeline's status (pipefail would end the script with 141)
        head -n "$headers" < <(zcat "../shared/classbench/$set.trace.gz") > "$tmp/trace"
        n=$(wc -l < "$tmp/trace")
        [ "$n" -gt 0 ] || { echo "no headers in ../shared/classbench/$set.trace.gz" >&2; exit 2; }
        for alg in ${RTE_ACL_METHODS:-scalar sse avx2}; do
            valgrind --tool=callgrind --callgrind-out-file="$tmp/acl.out" --toggle-collect='rte_acl_classify' \
                "$tmp/rte_acl_bench" "$tmp/rules" "$tmp/trace" "$tmp/ids" 1 64 "$alg" > "$tmp/acl.stdout" 2> "$tmp/acl.log" \
                || { echo "rte_acl $alg not counted: $(tail -n 1 "$tmp/acl.log")"; continue; }
            ir=$(grep -m1 '^totals:' "$tmp/acl.out" | awk '{print $2}')
            # two passes over the headers: the warm one and one timed round
            printf '%-12s %14s instructions  %8.1f per packet  (rte_acl, %s, %s headers)\n' "$set" "$ir" \
                "$(echo "$ir / (2 * $n)" | bc -l)" "$alg" "$n"
        done
    done
else
    echo "rte_acl not counted: libdpdk not installed (Debian dpdk-dev)"
fi
exit $status
