"""The ``selector`` command: parses a Calico selector, and matches it against labels."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.markup import escape

from pyclassify.cli.common import EXIT_INVALID, EXIT_NO_MATCH, emit_json, err, fail, out, utf8_text
from pyclassify.documents import printable
from pyclassify.selector import Selector, SelectorError, excerpt, parse_labels
from pyclassify.terminal import ascii_only


def _restrictions_json(sel: Selector) -> dict[str, Any]:
    return {
        key: {
            "must_be_present": r.must_be_present,
            "must_be_absent": r.must_be_absent,
            "must_have_one_of_values": r.must_have_one_of_values,
        }
        for key, r in sorted(sel.restrictions().items())
    }


@click.command(
    "selector",
    epilog="""\b
Examples:
  pyclassify selector "app == 'web' && has(tier)"
  pyclassify selector "app in {'web', 'api'}" --labels app=web,tier=front
""",
)
@click.argument("expr", callback=utf8_text)
@click.option(
    "--labels",
    "labels_text",
    metavar="K=V,...",
    callback=utf8_text,
    help="Evaluate against these labels (each key once).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def selector_cmd(expr: str, labels_text: str | None, as_json: bool) -> None:
    """Parse a Calico selector EXPR and print its canonical form.

    With --labels, evaluate it: exit 0 on a match, 3 on no match. A parse error exits 1 and
    points at the position of the problem.
    """
    labels: dict[str, str] | None = None
    if labels_text is not None:
        try:
            labels = parse_labels(labels_text)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--labels") from e
    try:
        sel = Selector.parse(expr)
    except SelectorError as e:
        if as_json:
            emit_json({"selector": expr, "valid": False, "error": e.message, "position": e.position})
        else:
            err.print(
                f"[red]error[/red]: selector: {escape(e.message)} (at position {e.position})"
                if e.position is not None
                else f"[red]error[/red]: selector: {escape(str(e))}"
            )
            if e.position is not None:
                # Show at most ~80 characters around the problem, not a whole hostile input.
                shown, caret = excerpt(expr, e.position)
                if ascii_only(sys.stderr):
                    shown = shown.replace("…", "...")
                    caret = (caret or 0) + (2 if shown.startswith("...") else 0)
                # Control bytes (an ESC sequence, a bidi override) are shown escaped, never
                # sent to the terminal; the caret moves with what is shown before it.
                before, after = printable(shown[: caret or 0]), printable(shown[caret or 0 :])
                shown, caret = before + after, len(before)
                err.print(f"  {escape(shown)}", markup=True)
                err.print("  " + " " * (caret or 0) + "^")
        fail(EXIT_INVALID)
    matched = sel.matches(labels) if labels is not None else None
    if as_json:
        result: dict[str, Any] = {"selector": expr, "valid": True, "canonical": sel.canonical}
        if labels is not None:
            result["labels"] = labels
            result["matches"] = matched
        result["restrictions"] = _restrictions_json(sel)
        emit_json(result)
    else:
        out.print(escape(sel.canonical))
        if labels is not None:
            verdict = "[green]match[/green]" if matched else "[yellow]no match[/yellow]"
            out.print(f"{verdict}: {escape(labels_text or '')}")
    if matched is False:
        fail(EXIT_NO_MATCH)
