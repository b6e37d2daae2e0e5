#!/usr/bin/env bash
# The main job, end to end: install pyclassify into .venv and run it on the bundled examples.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

run() { printf '\n$ %s\n' "$*"; "$@"; }

run pyclassify --version
run pyclassify selector "a == 'b' && has(c)" --labels a=b,c=1
# Validate the bundled manifests (Kubernetes, AdminNetworkPolicy, Calico tiers, inventory).
run pyclassify check examples/demo
# Why is one flow allowed or denied? The deciding tier, policy and rule for each direction.
run pyclassify explain examples/demo --from frontend/web --to backend/api --proto TCP --port 8080
run pyclassify explain examples/demo --from frontend/web --to backend/db --proto TCP --port 5432
run pyclassify explain examples/demo --from 203.0.113.7 --to frontend/web --proto TCP --port 80
# Who may reach whom on TCP/8080.
run pyclassify matrix examples/demo --proto TCP --port 8080
# Replay bundled captures of the demo pods: a verdict for every packet, a summary by policy/rule.
run pyclassify replay examples/demo --pcap pcaps/demo.pcap
run pyclassify replay examples/demo --pcap pcaps/demo.pcapng --out /tmp/pyclassify-demo-verdicts.jsonl
# A broken manifest: every error, with file, line and field (exit 1 is expected here).
run pyclassify check examples/broken || echo "(exit $? : invalid input, as expected)"
