# Sourced by scripts/test.sh and scripts/demo.sh: create or reuse .venv at the repo root and
# install pyclassify into it, editable, with the extras given as arguments (e.g. "test").
# Building compiles both extensions (Rust via setuptools-rust, Cython); cargo reuses rust/target.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
extras=""
if [ "$#" -gt 0 ]; then
    extras="[$(IFS=,; echo "$*")]"
fi
echo "== pip install -e .${extras} into .venv"
echo "   (builds the Rust engine and the Cython reader: several minutes on a first run, less when"
echo "   rust/target is warm; pip reports each step below, 'still running...' while cargo compiles)"
.venv/bin/python -m pip install --disable-pip-version-check --progress-bar on -e ".${extras}"
# Activate it for the rest of the calling script, so the console script `pyclassify` is on PATH
# (for the tests that run it, and for the demo).
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
