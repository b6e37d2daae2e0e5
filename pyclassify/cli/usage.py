"""The ``usage`` command: what each rule decided in recorded traffic, rules that never did or can
never match, and policies that change no verdict (``pyclassify.usage``)."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.markup import escape

from pyclassify.cli.common import (
    EXIT_CLUSTER,
    EXIT_INVALID,
    cluster_options,
    cluster_paths_argument,
    default_option,
    emit_json,
    err,
    json_option,
    kube_options,
    load_manifests,
    out,
    traffic_format_option,
)
from pyclassify.usage import USAGE_OUTPUTS, usage_doc


@click.command(
    "usage",
    epilog="""\b
Examples:
  pyclassify usage examples/demo --traffic examples/traffic/hubble.jsonl
  pyclassify usage examples/demo --json
  pyclassify usage examples/demo --traffic examples/traffic/hubble.jsonl --output csv
  pyclassify usage policies/ --traffic archive/*.jsonl.gz --scheduler tcp://dask-scheduler:8786
\b
With --traffic, counts are records, flows, packets and bytes each rule
decided (for a Log rule: logged on the way to a decision). Shadowed rules
and redundant policies are found from the policy alone.
""",
)
@cluster_paths_argument
@kube_options
@click.option(
    "--traffic",
    "traffic",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Flow records (as replay --traffic reads them) whose decisions to count per rule.",
)
@traffic_format_option
@click.option(
    "--no-redundant", is_flag=True, help="Skip the search for redundant policies (one exact diff per policy)."
)
@cluster_options
@default_option
@json_option
@click.option(
    "--output",
    "output",
    type=click.Choice(USAGE_OUTPUTS),
    default="text",
    show_default=True,
    help="text, json, csv or md (Markdown): one row per rule with its counts, never-hit and "
    "shadowed-by; dot or svg (Graphviz): the rules by tier and policy, each with what it "
    "decided, an edge from each rule to the rules it shadows; html: the report's rule "
    "usage page.",
)
def usage_command(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    traffic: tuple[str, ...],
    traffic_format: str | None,
    no_redundant: bool,
    scheduler: str | None,
    workers: int | None,
    default: str | None,
    as_json: bool,
    output: str,
) -> None:
    """Rule usage: what each policy rule decided in observed traffic, which rules never did,
    which can never match (shadowed by an earlier rule) and which policies change no verdict."""
    from pyclassify.records import RecordError

    if scheduler and workers:
        raise click.UsageError("--scheduler names a running cluster, --workers starts one: give one of them")
    project = load_manifests(paths, (kubeconfig, kube_context, in_cluster))
    try:
        doc, summary = usage_doc(project, list(traffic), traffic_format, default, not no_redundant, scheduler, workers)
    except RecordError as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_INVALID)
    except Exception as e:
        from pyclassify.dask_replay import ClusterError

        if not isinstance(e, ClusterError):
            raise
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_CLUSTER)
    if as_json or output == "json":
        emit_json(doc)
    elif output == "text":
        _print_usage(doc, out, escape)
    else:
        from pyclassify.cli.report import usage_output

        usage_output(doc, output, paths or [f"cluster {kubeconfig or 'in-cluster'}"])
    if summary is not None and summary["records"] == 0 and summary["problems"]:
        err.print("[red]error[/red]: no record could be read")
        sys.exit(EXIT_INVALID)


def _print_usage(doc: dict[str, Any], out: Any, escape: Any) -> None:
    counted = doc["traffic"] is not None
    if counted:
        t = doc["traffic"]
        out.print(
            f"rule usage over {t['records']:,} records ({t['flows']:,} flows, {t['packets']:,} packets, "
            f"{t['bytes']:,} bytes); flows / packets / bytes each rule decided:"
        )
    else:
        out.print("rules (no --traffic: nothing counted)")
    policy = None
    for r in doc["rules"]:
        if r["policy"] != policy:
            policy = r["policy"]
            out.print(f"{escape(policy)}" + (f" (tier {escape(r['tier'])})" if r["tier"] else ""))
        what = f"  {r['direction']:<7} rule {escape(str(r['rule'])):<4} {r['action']:<5}"
        if counted and not r["counted"]:
            out.print(f"{what}  [dim](Log: records nothing decided)[/dim]")
        elif counted:
            colour = "yellow" if r["flows"] == 0 and r["records"] == 0 else "default"
            nothing = "logged nothing" if r["action"] == "Log" else "decided nothing"
            out.print(
                f"{what}  [{colour}]{r['flows']:>9,} {r['packets']:>11,} {r['bytes']:>13,}[/{colour}]"
                + (f"  [yellow]{nothing}[/yellow]" if colour == "yellow" else "")
            )
        else:
            out.print(what)
    for r in doc["other_decisions"] or ():
        where = f"end of tier {r['tier']}" if r["reason"] == "end-of-tier" else (r["policy"] or r["reason"])
        out.print(
            f"  {r['direction']:<7} {escape(str(where))} {r['verdict']}: {r['flows']:,} flows, {r['packets']:,} packets, {r['bytes']:,} bytes"
        )
    if counted:
        out.print(f"{len(doc['unused'])} rule{'s' if len(doc['unused']) != 1 else ''} decided nothing in this traffic")
    out.print(
        f"{len(doc['shadowed'])} shadowed rule{'s' if len(doc['shadowed']) != 1 else ''}"
        + (":" if doc["shadowed"] else "")
    )
    for s in doc["shadowed"]:
        out.print(
            f"  {escape(s['policy'])} {s['direction']} rule {escape(str(s['rule']))}: never matches, "
            f"rule {escape(str(s['covered_by']))} before it covers it"
        )
    if doc["redundant"] is not None:
        out.print(
            f"{len(doc['redundant'])} redundant polic{'ies' if len(doc['redundant']) != 1 else 'y'}"
            + (":" if doc["redundant"] else "")
        )
        for r in doc["redundant"]:
            by = f"; decided instead by {', '.join(r['decided_instead_by'])}" if r["decided_instead_by"] else ""
            out.print(f"  {escape(r['policy'])}: removing it changes no verdict{escape(by)}")
