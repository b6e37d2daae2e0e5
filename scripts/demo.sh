#!/usr/bin/env bash
# The main job, end to end: install pyclassify into .venv and run it on the bundled examples.
#
# `bash scripts/demo.sh --installed` runs the same commands with the `pyclassify` already on PATH,
# from the current directory, on this checkout's examples/ and pcaps/ by absolute path, and leaves
# .venv alone: scripts/install_check.sh runs the demo that way on a wheel installed elsewhere.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = "--installed" ]; then
    ex="$repo/examples" pcaps="$repo/pcaps"
    out="$PWD/pyclassify-demo-verdicts.jsonl"
    echo "== demo with $(command -v pyclassify)"
else
    cd "$repo"
    source scripts/venv.sh
    ex=examples pcaps=pcaps
    out=/tmp/pyclassify-demo-verdicts.jsonl
fi

# Each command is printed as one would type it: arguments with spaces or quotes quoted.
quote() {
    local a=$1
    if [[ $a =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then
        printf '%s' "$a"
    elif [[ $a != *[\"\$\`\\!]* ]]; then
        printf '"%s"' "$a"
    else
        printf "'%s'" "${a//\'/\'\\\'\'}"
    fi
}
run() {
    local line="" a
    for a in "$@"; do line+="${line:+ }$(quote "$a")"; done
    printf '\n$ %s\n' "$line"
    "$@"
}

run pyclassify --version
run pyclassify selector "a == 'b' && has(c)" --labels a=b,c=1
# Validate the bundled manifests (Kubernetes, AdminNetworkPolicy, Calico tiers, inventory).
run pyclassify check "$ex/demo"
# Why is one flow allowed or denied? The deciding tier, policy and rule for each direction.
run pyclassify explain "$ex/demo" --from frontend/web --to backend/api --proto TCP --port 8080
run pyclassify explain "$ex/demo" --from frontend/web --to backend/db --proto TCP --port 5432
run pyclassify explain "$ex/demo" --from 203.0.113.7 --to frontend/web --proto TCP --port 80
# Who may reach whom on TCP/8080.
run pyclassify matrix "$ex/demo" --proto TCP --port 8080
# What would a change do before it is applied? Exit 5: some connections open or close.
rc=0
run pyclassify diff "$ex/demo" --apply "$ex/changes/db-behind-pgbouncer.yaml" || rc=$?
if [ "$rc" -ne 5 ]; then echo "expected exit 5 from diff (the change closes and opens connections), got $rc" >&2; exit 1; fi
# Replay bundled captures of the demo pods: a verdict for every packet, a summary by policy/rule.
run pyclassify replay "$ex/demo" --pcap "$pcaps/demo.pcap"
run pyclassify replay "$ex/demo" --pcap "$pcaps/demo.pcapng" --out "$out"
# Flow records of the same pods: which observed connections would the change break (exit 5),
# and which rules did the traffic use, never use, or can never reach?
rc=0
run pyclassify diff "$ex/demo" --apply "$ex/changes/db-behind-pgbouncer.yaml" --traffic "$ex/traffic/hubble.jsonl" || rc=$?
if [ "$rc" -ne 5 ]; then echo "expected exit 5 from diff --traffic (an observed connection closes), got $rc" >&2; exit 1; fi
run pyclassify usage "$ex/demo" --traffic "$ex/traffic/hubble.jsonl"
# The same replay on a Dask cluster of two local workers (with the dask extra): the same answer
# but for the rate and the line that says where it ran.
py="$(dirname "$(command -v pyclassify)")/python"
if [ -x "$py" ] && "$py" -c "import distributed" 2>/dev/null; then
    here="$(mktemp)" there="$(mktemp)"
    run pyclassify replay "$ex/demo" --traffic "$ex/traffic/hubble.jsonl" --traffic "$ex/traffic/vpc-flow-logs.txt" | tee "$here"
    run pyclassify replay "$ex/demo" --traffic "$ex/traffic/hubble.jsonl" --traffic "$ex/traffic/vpc-flow-logs.txt" --workers 2 | tee "$there"
    # past the blank line, the command and the rate line that `run` and replay print first
    if ! diff <(tail -n +4 "$here") <(tail -n +4 "$there" | grep -v '^on [0-9]* Dask workers of '); then
        rm -f "$here" "$there"
        echo "replay on Dask workers answered otherwise than in-process" >&2
        exit 1
    fi
    rm -f "$here" "$there"
else
    echo "(no dask beside this pyclassify: the replay on a Dask cluster is left out)"
fi
# Calico http rules without a proxy: each connection admitted up to its request, each request judged.
run pyclassify replay "$ex/demo" "$ex/http" --pcap "$pcaps/http.pcap"
run pyclassify explain "$ex/demo" "$ex/http" --from frontend/web --to backend/api --port 8080 --request "POST /public/a"
# A broken manifest: every error, with file, line and field (exit 1 is expected here).
errors="$(mktemp)"
trap 'rm -f "$errors"' EXIT
rc=0
run pyclassify check "$ex/broken" 2>"$errors" || rc=$?
cat "$errors" >&2
if [ "$rc" -ne 1 ] || grep -q '^Traceback' "$errors"; then
    echo "pyclassify check $ex/broken: exit $rc, expected 1 with the errors listed (invalid input)" >&2
    exit 1
fi
echo "(exit 1: invalid input, as expected)"
