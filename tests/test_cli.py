"""The ``pyclassify`` command line, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

PYCLASSIFY = [sys.executable, "-m", "pyclassify"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PYCLASSIFY, *args], capture_output=True, text=True, timeout=60)


def test_console_script_is_installed():
    assert shutil.which("pyclassify") or pytest.fail("the pyclassify console script is not on PATH")


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and "pyclassify" in r.stdout
    r = run("--help")
    assert r.returncode == 0 and "selector" in r.stdout


def test_selector_match_exits_0():
    r = run("selector", "a == 'b' && has(c)", "--labels", "a=b,c=1")
    assert r.returncode == 0, r.stderr
    assert '(a == "b" && has(c))' in r.stdout


def test_selector_no_match_exits_3():
    r = run("selector", "a == 'b' && has(c)", "--labels", "a=b")
    assert r.returncode == 3


def test_selector_canonical_without_labels():
    r = run("selector", "a in {'z','x'}")
    assert r.returncode == 0 and r.stdout.strip() == 'a in {"x", "z"}'


def test_selector_parse_error_exits_1_with_position():
    r = run("selector", "a == 'b' && %")
    assert r.returncode == 1
    assert "position 12" in r.stderr
    assert r.stderr.splitlines()[-1].index("^") == 2 + 12


def test_selector_json():
    r = run("selector", "a == 'b'", "--labels", "a=b", "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["canonical"] == 'a == "b"' and doc["matches"] is True
    assert doc["restrictions"] == {
        "a": {"must_be_present": True, "must_be_absent": False, "must_have_one_of_values": ["b"]}
    }
    r = run("selector", "a ==", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False


def test_usage_errors_exit_2():
    assert run("selector").returncode == 2
    assert run("selector", "has(a)", "--labels", "oops").returncode == 2
    assert run("no-such-command").returncode == 2
