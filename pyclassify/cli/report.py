"""The ``report`` command (an HTML page from ``pyclassify.report``) and the ``--output`` formats
of ``matrix``, ``diff`` and ``usage``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
import numpy as np
from rich.markup import escape

from pyclassify import reachability as reach
from pyclassify.cli.common import (
    EXIT_CLUSTER,
    EXIT_INVALID,
    cluster_options,
    default_option,
    diff_projects,
    emit_json,
    err,
    fail,
    kube_options,
    load_manifests,
    port_or_any,
    protocol_number,
    selector_option,
    split_against,
    traffic_format_option,
)
from pyclassify.kinds.common import protocol_name
from pyclassify.report import formats
from pyclassify.report.grid import Grid, build


def _write(text: str, path: str | None = None) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _flow_text(protocol: int, port: Any) -> str:
    name = protocol_name(protocol)
    return name if port is None else f"{name} on some port" if port == "any" else f"{name} {port}"


def _matrix_grid(
    project: Any,
    protocol: int,
    port: Any,
    default: str | None,
    namespaces: tuple[str, ...],
    selector: Any,
    against: Any = None,
) -> Grid:
    from pyclassify.analysis import matrix_pods
    from pyclassify.engine import EngineState

    state = EngineState()
    engines = [state.update(project.policy_set, project.inventory)]
    policy_sets = [project.policy_set]
    if against is not None:
        engines.append(state.update(against.policy_set, project.inventory))  # a delta
        policy_sets.append(against.policy_set)
    defaults = {} if default is None else {"default_pod": default, "default_host": default}
    return build(engines, matrix_pods(project, namespaces, selector), protocol, port, defaults, policy_sets)


def _matrix_table(
    project: Any,
    protocol: int,
    port: Any,
    default: str | None,
    engine: str,
    namespaces: tuple[str, ...],
    selector: Any,
    by: str,
) -> formats.Table:
    """``matrix``'s own table at ``by`` (pods and groups as ``matrix`` answers them; namespaces
    its identity table counted in pods)."""
    from pyclassify.analysis import matrix

    result = matrix(
        project, protocol, port, default, engine, namespaces, selector, "identity" if by == "namespace" else by
    )
    allowed = np.asarray(result.allowed, bool)
    no_flow = None if result.no_flow is None else np.asarray(result.no_flow, bool)
    flow = _flow_text(protocol, port)
    if by == "pod":
        names = [p.ref for p in result.pods]
        ones = np.ones(allowed.shape, np.int64)
        return formats.Table(
            names, allowed.astype(np.int64), ones, flow, by, [p.namespace or "" for p in result.pods], no_flow
        )
    groups = result.groups or []
    if by == "identity":
        ones = np.ones(allowed.shape, np.int64)
        return formats.Table(
            list(result.group_text or []),
            allowed.astype(np.int64),
            ones,
            flow,
            by,
            [g.endpoints[0].namespace or "" for g in groups],
            no_flow,
        )
    spaces = sorted({g.endpoints[0].namespace or "" for g in groups})
    member = np.zeros((len(groups), len(spaces)))
    for k, g in enumerate(groups):
        member[k, spaces.index(g.endpoints[0].namespace or "")] = len(g.endpoints)
    counts = np.rint(member.T @ allowed.astype(np.float64) @ member).astype(np.int64)
    pods = member.sum(axis=0).astype(np.int64)
    return formats.Table(spaces, counts, np.outer(pods, pods), flow, by)


def matrix_output(
    project: Any,
    paths: Sequence[str],
    protocol: int,
    port: Any,
    default: str | None,
    engine: str,
    namespaces: tuple[str, ...],
    selector: Any,
    by: str,
    output: str,
) -> None:
    """``matrix --output FORMAT`` (and ``--by namespace`` as text or json)."""
    if output == "html":
        grid = _matrix_grid(project, protocol, port, default, namespaces, selector)
        from pyclassify.report.page import render

        _write(render(grid, f"Reachability: {_flow_text(protocol, port)}", paths or ["--kubeconfig ..."]))
        return
    table = _matrix_table(project, protocol, port, default, engine, namespaces, selector, by)
    if output == "json":
        pods = [int(table.pairs[k, k] ** 0.5) for k in range(len(table.names))]
        emit_json(
            {
                "namespaces": table.names,
                "pods": pods,
                "protocol": protocol_name(protocol),
                "port": port,
                "matrix": table.allowed.tolist(),
            }
        )
    elif output == "text":
        for i, name in enumerate(table.names):
            cells = "  ".join(
                f"{table.names[j]} {formats.cell_text(table, i, j, True)}" for j in range(len(table.names))
            )
            click.echo(f"{name} -> {cells}")
        click.echo(f"{int(table.allowed.sum())} of {int(table.pairs.sum())} pod pairs allowed ({table.flow})")
    else:
        _graph_output(table, output)


def _graph_output(table: formats.Table, output: str) -> None:
    if output == "csv":
        _write(formats.table_csv(table))
    elif output == "md":
        _write(formats.table_md(table))
    else:
        dot = formats.table_dot(table)
        _write(dot if output == "dot" else _svg(dot))


def _svg(dot: str) -> str:
    try:
        return formats.svg(dot)
    except formats.GraphvizMissing as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        fail(EXIT_INVALID)


def _end(group: reach.Group, keys: set[str], by: str) -> list[tuple[str, str | None]]:
    """A change's end as graph nodes at ``by``: (name, namespace) per namespace, group or pod;
    outside addresses and host endpoints are their group."""
    if group.outside or group.endpoints[0].namespace is None:
        return [(reach.group_text(group, keys), None)]
    ns = group.endpoints[0].namespace
    if by == "namespace":
        return [(ns, None)]
    if by == "pod":
        return [(e.ref, ns) for e in group.endpoints]
    return [(reach.group_text(group, keys), ns)]


def diff_output(result: Any, old: Any, new: Any, output: str, by: str, default: str | None) -> None:
    """``diff --output FORMAT`` beyond text and json."""
    if output == "html":
        _write(_diff_html(result, old, new, default, 6, "any", (), None))
        return
    edges: list[formats.Edge] = []
    seen: set[tuple[Any, ...]] = set()
    for c in result.changes:
        flows = c.flow_text()
        for src, src_ns in _end(c.src, result.keys, by):
            for dst, dst_ns in _end(c.dst, result.keys, by):
                key = (src, dst, c.opened, flows)
                if key not in seen:  # namespaces: one edge for its groups' changes alike
                    seen.add(key)
                    edges.append(formats.Edge(src, dst, c.opened, flows, src_ns, dst_ns))
    if output == "csv":
        _write(formats.changes_csv(edges))
    elif output == "md":
        _write(formats.changes_md(edges))
    else:
        title = (
            f"What the change opens (blue) and closes (black), by {by}: "
            f"{', '.join(result.policies_changed) or 'no policy'} changed"
        )
        dot = formats.changes_dot(edges, title)
        _write(dot if output == "dot" else _svg(dot))


def _diff_html(
    result: Any,
    old: Any,
    new: Any,
    default: str | None,
    protocol: int,
    port: Any,
    namespaces: tuple[str, ...],
    selector: Any,
    paths: Sequence[str] = (),
    usage: dict[str, Any] | None = None,
    observed: Any = None,
) -> str:
    from pyclassify.report.page import render

    grid = _matrix_grid(old, protocol, port, default, namespaces, selector, against=new)
    changes = [{"opened": c.opened, "text": result.change_text(c)} for c in result.changes]
    return render(
        grid,
        f"What the change does: {_flow_text(protocol, port)}",
        paths or result.old_paths,
        changes,
        result.policies_changed,
        usage,
        None if observed is None else observed_data(observed, grid),
    )


def usage_output(doc: dict[str, Any], output: str, paths: Sequence[str]) -> None:
    """``usage --output FORMAT`` beyond text and json."""
    if output == "csv":
        _write(formats.usage_csv(doc))
    elif output == "md":
        _write(formats.usage_md(doc))
    elif output in ("dot", "svg"):
        dot = formats.usage_dot(doc)
        _write(dot if output == "dot" else _svg(dot))
    else:
        from pyclassify.report.page import render_usage

        _write(render_usage(doc, "Rule usage", paths))


def observed_data(observed: Any, grid: Grid) -> dict[str, Any]:
    """``diff --traffic``'s rows as the page draws them: each with the grid cells (group pairs)
    and namespace pairs its two ends fall in (none for an end outside the grid: an outside
    address, a host endpoint, a pod left out by --namespace/--selector)."""
    doc = observed.to_json()
    where: dict[str, list[int]] = {}
    for k, g in enumerate(grid.groups):
        for e in g.endpoints:
            where.setdefault(e.ref, []).append(k)
    n = len(grid.groups)
    ns_of = np.zeros(n, np.int64)
    for k in range(len(grid.namespaces)):
        ns_of[grid.ns_start[k] : grid.ns_start[k + 1]] = k
    rows = []
    for c, row in zip(observed.changes, doc["changes"]):
        ends = [
            sorted({k for e in ([] if g.outside else g.endpoints) for k in where.get(e.ref, ())})
            for g in (c.src, c.dst)
        ]
        cells = sorted(int(a) * n + int(b) for a in ends[0] for b in ends[1])
        rows.append(
            {
                "closed": c.closed,
                "text": row["text"],
                "protocol": row["protocol"],
                "port": row["port"],
                **{m: row[m] for m in ("records", "flows", "packets", "bytes")},
                "first": row["first"],
                "last": row["last"],
                "cells": cells,
                "ns": sorted({int(ns_of[x // n]) * len(grid.namespaces) + int(ns_of[x % n]) for x in cells}),
            }
        )
    return {"changes": rows, "summary": doc["summary"]}


def _usage(project: Any, summary: dict[str, Any], default: str | None, no_redundant: bool) -> dict[str, Any]:
    """``usage``'s document for the page from what the records' judge counted; as ``usage``,
    nothing readable in the traffic fails (exit 1, no page) rather than drawing every rule
    unused."""
    from pyclassify.usage import usage_document

    if summary["records"] == 0 and summary["problems"]:
        for f in summary["files"]:
            for first in f["first"]:
                where = next(v for k, v in first.items() if k not in ("reason", "detail"))
                err.print(
                    f"{escape(f['file'])}:{where}: {first['reason']}: {escape(str(first['detail']))}", highlight=False
                )
        err.print("[red]error[/red]: no record could be read")
        fail(EXIT_INVALID)
    return usage_document(project.policy_set, project.inventory, summary, default, not no_redundant)


@click.command(
    "report",
    context_settings={"ignore_unknown_options": True},
    epilog="""\b
Examples:
  pyclassify report examples/demo --port 80 -o report.html
  pyclassify report examples/demo --port any --apply examples/changes/db-behind-pgbouncer.yaml -o change.html
  pyclassify report cluster/ --against cluster-after/ --proto TCP --port 5432 -o change.html
  pyclassify report examples/demo --port any --apply examples/changes/db-behind-pgbouncer.yaml \\
      --traffic examples/traffic/hubble.jsonl -o change.html
\b
One HTML file, opened offline: the namespace heatmap opens into identity
groups and pods; a click on a cell explains its verdict (tier, policy, rule
of each direction). With --against/--apply: what the change opens and closes,
on the same grid, and every change diff finds. With --traffic: each rule's
usage in those flow records (usage), and of a change the observed flows it
closes or opens (diff --traffic), marked on the grid.
""",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="PATH... [--against NEW... | --apply FILE]")
@kube_options
@click.option(
    "--apply",
    "apply_paths",
    metavar="PATH",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Policy objects applied to PATH (as diff --apply): draw the change.",
)
@click.option("--proto", "proto", default="TCP", show_default=True, help="Protocol name or number.")
@click.option(
    "--port",
    "port",
    metavar="N|any",
    callback=port_or_any,
    default=None,
    help="Destination port, or 'any': allowed on some port class.",
)
@click.option("--namespace", "namespaces", metavar="NS", multiple=True, help="Only the pods of this namespace.")
@click.option(
    "--selector",
    "selector",
    metavar="EXPR",
    callback=selector_option,
    default=None,
    help="Only the pods whose labels match this Calico selector.",
)
@click.option(
    "--traffic",
    "traffic",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Flow records (as replay --traffic reads them): show each rule's usage and, of a change, "
    "the observed connections it flips. Repeat for several.",
)
@traffic_format_option
@click.option(
    "--no-redundant",
    is_flag=True,
    help="With --traffic, skip the search for redundant policies (one exact diff per policy).",
)
@cluster_options
@default_option
@click.option(
    "-o",
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    default="-",
    show_default=True,
    help="The HTML file to write (- for stdout).",
)
def report_command(
    args: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    apply_paths: tuple[str, ...],
    proto: str,
    port: Any,
    namespaces: tuple[str, ...],
    selector: Any,
    traffic: tuple[str, ...],
    traffic_format: str | None,
    no_redundant: bool,
    scheduler: str | None,
    workers: int | None,
    default: str | None,
    out_path: str,
) -> None:
    """One self-contained HTML report of reachability among pods, or of a change to it."""
    protocol = protocol_number(proto)
    paths, new_paths = split_against(args)
    kube = (kubeconfig, kube_context, in_cluster)
    shown = paths or [f"--kubeconfig {kubeconfig}" if kubeconfig else "--in-cluster"]
    from pyclassify.records import RecordError

    try:
        if new_paths or apply_paths:
            old, new, new_paths = diff_projects(paths, new_paths, apply_paths, kube)
            from pyclassify.diff import diff

            result = diff(old.policy_set, new.policy_set, old.inventory, default, shown, new_paths)
            usage, observed = None, None
            if traffic:
                from pyclassify.trafficdiff import traffic_diff

                # One read of the records: judged under both sets, counted per rule of the old one.
                if scheduler or workers:
                    from pyclassify.dask_replay import run_diff

                    observed, _ = run_diff(
                        old.policy_set,
                        new.policy_set,
                        old.inventory,
                        list(traffic),
                        scheduler=scheduler,
                        workers=workers,
                        format=traffic_format,
                        default=default,
                        rule_usage=True,
                    )
                else:
                    observed = traffic_diff(
                        old.policy_set,
                        new.policy_set,
                        old.inventory,
                        list(traffic),
                        traffic_format,
                        default,
                        rule_usage=True,
                    )
                assert observed.usage is not None
                usage = _usage(old, observed.usage, default, no_redundant)
            page = _diff_html(result, old, new, default, protocol, port, namespaces, selector, shown, usage, observed)
        else:
            project = load_manifests(tuple(paths), kube)
            grid = _matrix_grid(project, protocol, port, default, namespaces, selector)
            from pyclassify.report.page import render

            usage = None
            if traffic:
                from pyclassify.usage import traffic_counts

                usage = _usage(
                    project,
                    traffic_counts(project, list(traffic), traffic_format, default, scheduler, workers),
                    default,
                    no_redundant,
                )
            page = render(grid, f"Reachability: {_flow_text(protocol, port)}", shown, usage=usage)
    except RecordError as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        fail(EXIT_INVALID)
    except Exception as e:
        from pyclassify.dask_replay import ClusterError

        if not isinstance(e, ClusterError):
            raise
        err.print(f"[red]error[/red]: {escape(str(e))}")
        fail(EXIT_CLUSTER)
    _write(page, out_path)
    if out_path != "-":
        err.print(f"wrote {out_path} ({len(page.encode('utf-8')):,} bytes)", highlight=False)
