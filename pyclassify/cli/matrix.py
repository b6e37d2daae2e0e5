"""The ``matrix`` command: which namespaces, groups of pods or pods may reach which, on one
protocol and port."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from pyclassify.cli.common import (
    cluster_paths_argument,
    default_option,
    emit_json,
    engine_option,
    json_option,
    kube_options,
    load_manifests,
    out,
    output_options,
    port_or_any,
    protocol_number,
    selector_option,
)
from pyclassify.counted import count
from pyclassify.terminal import symbol


@click.command(
    "matrix",
    epilog="""\b
Examples:
  pyclassify matrix examples/demo --proto TCP --port 80
  pyclassify matrix examples/demo --proto UDP --port 53 --json
  pyclassify matrix examples/demo --namespace backend --port any
  pyclassify matrix cluster/ --selector 'app == "api"' --by identity --port 5432
""",
)
@cluster_paths_argument
@kube_options
@click.option("--proto", "proto", default="TCP", show_default=True, help="Protocol name or number.")
@click.option(
    "--port",
    "port",
    metavar="N|any",
    callback=port_or_any,
    default=None,
    help="Destination port, or 'any': allowed on some port (the union over every port class).",
)
@click.option(
    "--namespace",
    "namespaces",
    metavar="NS",
    multiple=True,
    help="Only the pods of this namespace (repeat for several), as rows and columns.",
)
@click.option(
    "--selector",
    "selector",
    metavar="EXPR",
    callback=selector_option,
    default=None,
    help="Only the pods whose labels match this Calico selector, as rows and columns.",
)
@default_option
@engine_option
@json_option
@output_options("pod")
def matrix_cmd(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    proto: str,
    port: int | str | None,
    namespaces: tuple[str, ...],
    selector: Any,
    by: str,
    default: str | None,
    engine: str,
    as_json: bool,
    output: str,
) -> None:
    """Reachability truth table among pods: row = from, column = to.

    Exact at any size: pods policy cannot tell apart (same identity and address class) are
    judged once per port class, natively; --by identity prints that table itself."""
    from pyclassify.analysis import matrix

    protocol = protocol_number(proto)
    if engine == "reference" and (port == "any" or by != "pod" or output not in ("text", "json")):
        raise click.UsageError("--engine reference judges one port between pods: drop --port any / --by / --output")
    project = load_manifests(paths, (kubeconfig, kube_context, in_cluster))
    if output not in ("text", "json") or by == "namespace":
        from pyclassify.cli.report import matrix_output

        matrix_output(
            project, paths, protocol, port, default, engine, namespaces, selector, by, "json" if as_json else output
        )
        return
    result = matrix(project, protocol, port, default, engine, namespaces, selector, by)
    if as_json or output == "json":
        emit_json(result.to_json())
        return
    from rich.table import Table

    names = result.group_text if result.group_text is not None else [p.ref for p in result.pods]
    port_text = f"/{port}" if port is not None else ""
    what = "group" if by == "identity" else "pod"
    table = Table(title=f"{escape(proto.upper())}{port_text}: may the row reach the column?")
    table.add_column("from \\ to")
    for i in range(len(names)):
        table.add_column(str(i), justify="center")
    differs = result.differs.tolist()
    no_flow = result.no_flow.tolist() if result.no_flow is not None else None
    v4 = result.by_family[4][0].tolist() if 4 in result.by_family else None
    yes, no, none = symbol("✓", "y"), symbol("✗", "x"), symbol("·", ".")
    for i, row in enumerate(result.rows()):
        cells = []
        for j, ok in enumerate(row):
            if no_flow is not None and no_flow[i][j]:
                cells.append(f"[dim]{none}[/dim]")  # no address family in common: no flow
            elif differs[i][j]:
                assert v4 is not None
                cells.append(f"[yellow]{'4' if v4[i][j] else '6'}[/yellow]")  # the family that allows
            else:
                cells.append(f"[green]{yes}[/green]" if ok else f"[red]{no}[/red]")
        table.add_row(f"{i} {escape(names[i])}", *cells)
    out.print(table)
    total = int(sum(map(sum, result.rows())))
    out.print(
        f"{total} of {count(len(names) ** 2, what + ' pair')} allowed"
        + (" in every address family both have" if len(result.by_family) > 1 else "")
    )
    split = int(sum(map(sum, differs)))
    if split:
        out.print(
            f"{count(split, 'pair')} {'differs' if split == 1 else 'differ'} by address family: "
            "4 = allowed over IPv4 only, "
            "6 = allowed over IPv6 only (dual-stack pods are judged in each family)"
        )
    if no_flow is not None and any(map(any, no_flow)):
        out.print(f"{none} = no flow: the two share no address family (one IPv4 only, the other IPv6 only)")
