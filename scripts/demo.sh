#!/usr/bin/env bash
# The main job, end to end: install pyclassify into .venv and use the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

set -x
.venv/bin/pyclassify --version
.venv/bin/pyclassify selector "a == 'b' && has(c)" --labels a=b,c=1
