#!/usr/bin/env bash
# What a user installs works (issue 17): build an sdist and, from that sdist, a wheel
# (`python -m build`); install the wheel into a fresh virtualenv outside the checkout; from a
# directory outside the checkout run `pyclassify --help`, every subcommand's --help, the demo
# (scripts/demo.sh --installed, on this checkout's examples/ by absolute path), an import of every
# module, and the test modules that exercise the installed command and package, copied out of the
# checkout so that they import the installed pyclassify, never the source tree (checked).
#
# Run by .ci/run after scripts/test.sh; standalone: `bash scripts/install_check.sh` (needs python3
# >= 3.11, a Rust toolchain, a C compiler and git; leaves nothing behind but pip's cache).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
python="${PYTHON:-python3}"
BUILD_VERSION=1.6.1  # the `build` frontend, pinned like every other dependency

# The test modules run against the installed package: they use the command, the package's public
# modules and both extensions, and read only examples/, pcaps/, the README and docs/commands.md
# (copied beside them).
TESTS=(
    tests/conftest.py
    tests/shared_data.py
    tests/test_cli.py
    tests/test_stubs.py
    tests/test_batch_abi.py
    tests/test_project.py
    tests/test_render.py
    tests/test_replay.py
    tests/admission
    tests/enforce/__init__.py
    tests/enforce/report.py  # the admission bounds test records its figures for bench/RELIABILITY.md
)

start=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/pyclassify-install.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
case "$work/" in "$repo"/*) echo "temp dir $work is inside the checkout" >&2; exit 1 ;; esac
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
export PIP_DISABLE_PIP_VERSION_CHECK=1

echo "== python -m build (build==$BUILD_VERSION): the sdist, then a wheel from that sdist, into $work/dist"
"$python" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q "build==$BUILD_VERSION"
if ! "$work/tools/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1; then
    tail -n 150 "$work/build.log"
    echo "== python -m build FAILED (last 150 lines above)" >&2
    exit 1
fi
sdists=("$work"/dist/pyclassify-*.tar.gz)
wheels=("$work"/dist/pyclassify-*.whl)
if [ "${#sdists[@]}" -ne 1 ] || [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${sdists[0]}" ] || [ ! -f "${wheels[0]}" ]; then
    echo "expected one sdist and one wheel, got: $(ls "$work/dist")" >&2
    exit 1
fi
sdist="${sdists[0]}" wheel="${wheels[0]}"
ls -l "$work/dist" | tail -n +2
echo "   (build took $((SECONDS - start)) s)"

echo "== sdist: every tracked file the build needs, nothing untracked (no build output, no fuzz corpora)"
git ls-files -z > "$work/tracked"
"$python" - "$sdist" "$work/tracked" <<'EOF'
import fnmatch, sys, tarfile
sdist, tracked_list = sys.argv[1], sys.argv[2]
tracked = set(open(tracked_list, encoding="utf-8").read().split("\0")) - {""}
with tarfile.open(sdist) as tar:
    root = tar.getnames()[0].split("/")[0]
    names = {m.name.partition("/")[2] for m in tar.getmembers() if m.isfile()}
needed = {"pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "rust/Cargo.toml", "rust/Cargo.lock"}
needed |= {f for f in tracked if f.startswith(("pyclassify/", "native/", "rust/core/", "rust/py/"))}
generated = {"PKG-INFO", "setup.cfg"}
missing = sorted(needed - names)
extra = sorted(n for n in names - tracked - generated if not n.startswith("pyclassify.egg-info/"))
forbidden = sorted(n for n in names if n.startswith(("rust/target/", "rust/fuzz/", ".venv/"))
                   or fnmatch.fnmatch(n, "*.so") or fnmatch.fnmatch(n, "native/*.c"))
print(f"   {root}: {len(names)} files")
for label, items in (("missing from the sdist", missing), ("in the sdist but not tracked", extra),
                     ("build output or fuzz data in the sdist", forbidden)):
    for item in items:
        print(f"   {label}: {item}", file=sys.stderr)
sys.exit(1 if missing or extra or forbidden else 0)
EOF

echo "== fresh virtualenv $work/venv: pip install $(basename "$wheel")[test]"
"$python" -m venv "$work/venv"
venv="$work/venv"
"$venv/bin/python" -m pip install -q "${wheel}[test]"
"$venv/bin/python" -m pip check
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"

# Everything from here runs outside the checkout.
mkdir "$work/run"
cd "$work/run"

echo "== the wheel holds every tracked file of pyclassify/ and both extensions; imports come from the venv"
"$venv/bin/python" - "$repo" "$venv" "$work/tracked" <<'EOF'
import importlib, pkgutil, sys
from pathlib import Path
repo, venv, tracked_list = Path(sys.argv[1]), Path(sys.argv[2]).resolve(), sys.argv[3]
import pyclassify, pyclassify._engine, pyclassify._native
installed = Path(pyclassify.__file__).resolve().parent
print(f"   pyclassify.__file__ = {pyclassify.__file__}")
for mod in (pyclassify, pyclassify._engine, pyclassify._native):
    where = Path(mod.__file__).resolve()
    assert where.is_relative_to(venv) and not where.is_relative_to(repo), f"{mod.__name__} imported from {where}"
tracked = [f for f in open(tracked_list, encoding="utf-8").read().split("\0") if f.startswith("pyclassify/")]
missing = [f for f in tracked if not (installed.parent / f).is_file()]
assert not missing, f"tracked files missing from the installed wheel: {missing}"
# Every module but the __main__ ones (importing one runs the command line).
modules = [m.name for m in pkgutil.walk_packages(pyclassify.__path__, "pyclassify.") if not m.name.endswith(".__main__")]
for name in modules:
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(venv), f"{name} imported from {module.__file__}"
print(f"   {len(tracked)} tracked files installed; {len(modules)} modules import from the venv"
      f" (subpackages: {', '.join(sorted({m.split('.')[1] for m in modules if m.count('.') > 1}))})")
EOF

echo "== pyclassify --help, and every subcommand's --help"
pyclassify --help
commands="$("$venv/bin/python" -c 'from pyclassify.cli import main; print(" ".join(main.list_commands(None)))')"
for command in $commands; do
    usage="$(pyclassify "$command" --help)"
    printf '   pyclassify %-18s --help: %s\n' "$command" "$(head -n 1 <<<"$usage")"
done

echo "== the demo (scripts/demo.sh --installed), from $PWD"
bash "$repo/scripts/demo.sh" --installed

echo "== pytest against the installed package: ${TESTS[*]} (copied to $work/suite)"
mkdir "$work/suite"
(cd "$repo" && cp -r --parents "${TESTS[@]}" examples pcaps README.md docs/commands.md "$work/suite/")
cat >"$work/suite/conftest.py" <<EOF
"""Fails the run if any pyclassify module comes from anywhere but the fresh virtualenv."""
import sys
from pathlib import Path

import pyclassify

VENV = Path("$venv").resolve()


def pytest_report_header(config):
    return f"pyclassify under test: {pyclassify.__file__}"


def pytest_sessionfinish(session, exitstatus):
    foreign = sorted(name for name, module in list(sys.modules.items())
                     if name.split(".")[0] == "pyclassify" and getattr(module, "__file__", None)
                     and not Path(module.__file__).resolve().is_relative_to(VENV))
    if foreign:
        print(f"\npyclassify modules imported from outside {VENV}: {foreign}", file=sys.stderr)
        session.exitstatus = 1
EOF
printf '[pytest]\naddopts = -ra\n' >"$work/suite/pytest.ini"
cd "$work/suite"
rc=0
"$venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$work/suite" -c "$work/suite/pytest.ini" \
    tests || rc=$?
cd "$work"
if [ "$rc" -ne 0 ]; then
    echo "== install check FAILED: pytest exit $rc against the installed package" >&2
    exit 1
fi
echo "== install check passed in $((SECONDS - start)) s: the wheel built from the sdist installs and works outside the checkout"
