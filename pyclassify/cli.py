"""The ``pyclassify`` command line (DESIGN.md §4).

Exit codes: 0 success (or a match), 1 invalid input, 2 usage error, 3 no match (``selector``).
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from pyclassify import __version__
from pyclassify.selector import Selector, SelectorError, parse_labels

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_NO_MATCH = 3

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _fail(code: int) -> NoReturn:
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pyclassify")
def main() -> None:
    """pyclassify: packet classification for network policy.

    Reads Kubernetes, Calico and AdminNetworkPolicy manifests and decides, for every flow or
    packet, whether policy allows it, and why.
    """


def _restrictions_json(sel: Selector) -> dict[str, Any]:
    return {
        key: {
            "must_be_present": r.must_be_present,
            "must_be_absent": r.must_be_absent,
            "must_have_one_of_values": r.must_have_one_of_values,
        }
        for key, r in sorted(sel.restrictions().items())
    }


@main.command("selector")
@click.argument("expr")
@click.option("--labels", "labels_text", metavar="K=V,...", help="Evaluate against these labels.")
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
            _emit_json({"selector": expr, "valid": False, "error": e.message, "position": e.position})
        else:
            err.print(f"[red]error[/red]: selector: {escape(str(e))}")
            if e.position is not None:
                err.print(f"  {escape(expr)}", markup=True)
                err.print("  " + " " * e.position + "^")
        _fail(EXIT_INVALID)
    matched = sel.matches(labels) if labels is not None else None
    if as_json:
        result: dict[str, Any] = {"selector": expr, "valid": True, "canonical": sel.canonical}
        if labels is not None:
            result["labels"] = labels
            result["matches"] = matched
        result["restrictions"] = _restrictions_json(sel)
        _emit_json(result)
    else:
        out.print(escape(sel.canonical))
        if labels is not None:
            verdict = "[green]match[/green]" if matched else "[yellow]no match[/yellow]"
            out.print(f"{verdict}: {escape(labels_text or '')}")
    if matched is False:
        _fail(EXIT_NO_MATCH)


if __name__ == "__main__":  # pragma: no cover
    main()
