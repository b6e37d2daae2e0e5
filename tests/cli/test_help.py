"""Every command's ``--help`` is part of the CLI contract: each is held against its text in
``tests/cli/help/`` (``main.txt`` for ``pyclassify --help``), so a change to an option, its
help or the list of commands shows here. After a deliberate change, rewrite the texts with
``python tests/cli/test_help.py`` and commit them with the change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from pyclassify.cli import main

HELP = Path(__file__).resolve().parent / "help"


def commands() -> list[str]:
    with click.Context(main) as ctx:
        return list(main.list_commands(ctx))


def help_text(command: str | None) -> tuple[int, str]:
    """As a user sees it, from a process of its own: click keeps a command's help option once
    made, so a test that invoked the command alone would change it here. Click wraps help to the
    terminal's width (COLUMNS), at most 80."""
    args = ["--help"] if command is None else [command, "--help"]
    run = "import sys; from pyclassify.cli import main; main(sys.argv[1:], prog_name='pyclassify')"
    r = subprocess.run(
        [sys.executable, "-c", run, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    return r.returncode, r.stdout + r.stderr


def test_the_commands_are_those_with_a_help_text():
    assert sorted(commands()) == sorted(p.stem for p in HELP.glob("*.txt") if p.stem != "main")


@pytest.mark.parametrize("command", [None, *commands()], ids=lambda c: c or "main")
def test_help_is_unchanged(command: str | None):
    code, text = help_text(command)
    assert code == 0
    assert text == (HELP / f"{command or 'main'}.txt").read_text(encoding="utf-8")


if __name__ == "__main__":  # rewrite the texts after a deliberate change
    for name in [None, *commands()]:
        code, text = help_text(name)
        assert code == 0, (name, text)
        (HELP / f"{name or 'main'}.txt").write_text(text, encoding="utf-8")
    sys.exit(0)
