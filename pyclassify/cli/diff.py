"""The ``diff`` command: what a policy change opens or closes, between two sets of manifests (or a
set and a change applied to it), and over recorded traffic."""

from __future__ import annotations

import click
from rich.markup import escape

from pyclassify.cli.common import (
    EXIT_CHANGED,
    EXIT_CLUSTER,
    EXIT_INVALID,
    cluster_options,
    default_option,
    diff_projects,
    emit_json,
    err,
    fail,
    json_option,
    kube_options,
    out,
    output_options,
    split_against,
    traffic_format_option,
)
from pyclassify.counted import count
from pyclassify.terminal import ascii_only


@click.command(
    "diff",
    context_settings={"ignore_unknown_options": True},
    epilog="""\b
Examples:
  pyclassify diff examples/demo --apply examples/changes/db-behind-pgbouncer.yaml
  pyclassify diff cluster/ --against cluster-after/ --json
  pyclassify diff --kubeconfig ~/.kube/config --apply change.yaml
  pyclassify diff examples/demo --apply examples/changes/db-behind-pgbouncer.yaml --traffic examples/traffic/hubble.jsonl
  pyclassify diff policies/ --apply change.yaml --traffic archive/*.jsonl.gz --scheduler tcp://dask-scheduler:8786
\b
--against NEW...: the whole new policy set (every path after it is NEW). NEW
may hold policy only: it is then judged over OLD's inventory (pods,
namespaces, services...). When both hold an inventory, it must be the same.
Exit 0: nothing changes; 5: some flow changes verdict; 1: invalid input.
""",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="OLD... (--against NEW... | --apply FILE)")
@kube_options
@click.option(
    "--apply",
    "apply_paths",
    metavar="PATH",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Policy objects to apply to OLD (as kubectl apply would: an object with the same kind, "
    "namespace and name is replaced, a new one added); NEW is the result. Repeat for several.",
)
@click.option(
    "--traffic",
    "traffic",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Flow records (as replay --traffic reads them): list the observed connections whose verdict "
    "the change flips, with their counts; exit 5 when one it closes was observed.",
)
@traffic_format_option
@cluster_options
@default_option
@json_option
@output_options("identity")
def diff_cmd(
    args: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    apply_paths: tuple[str, ...],
    traffic: tuple[str, ...],
    traffic_format: str | None,
    scheduler: str | None,
    workers: int | None,
    default: str | None,
    as_json: bool,
    output: str,
    by: str,
) -> None:
    """Which connections a policy change opens or closes, before it is applied.

    Compares the policy sets OLD and NEW over one inventory: every pod group, host endpoint and
    outside address class as policy sees them, every protocol and port class some rule
    distinguishes. Prints each change of verdict with the rule responsible, and what decided
    before."""
    old_paths, new_paths = split_against(args)
    old, new, new_paths = diff_projects(old_paths, new_paths, apply_paths, (kubeconfig, kube_context, in_cluster))
    if traffic:
        from pyclassify.records import RecordError
        from pyclassify.trafficdiff import print_diff, traffic_diff

        if scheduler and workers:
            raise click.UsageError("--scheduler names a running cluster, --workers starts one: give one of them")
        try:
            if scheduler or workers:
                from pyclassify.dask_replay import ClusterError, run_diff

                try:
                    observed, _ = run_diff(
                        old.policy_set,
                        new.policy_set,
                        old.inventory,
                        list(traffic),
                        scheduler=scheduler,
                        workers=workers,
                        format=traffic_format,
                        default=default,
                    )
                except ClusterError as e:
                    err.print(f"[red]error[/red]: {escape(str(e))}")
                    fail(EXIT_CLUSTER)
            else:
                observed = traffic_diff(
                    old.policy_set, new.policy_set, old.inventory, list(traffic), traffic_format, default
                )
        except RecordError as e:
            err.print(f"[red]error[/red]: {escape(str(e))}")
            fail(EXIT_INVALID)
        if as_json:
            emit_json(observed.to_json())
        else:
            print_diff(observed, out, escape, ascii_only())
        if observed.totals[0] == 0 and any(f.problems for f in observed.files):
            err.print("[red]error[/red]: no record could be read")
            fail(EXIT_INVALID)
        if any(c.closed for c in observed.changes):
            fail(EXIT_CHANGED)
        return
    from pyclassify.diff import diff

    result = diff(
        old.policy_set,
        new.policy_set,
        old.inventory,
        default,
        old_paths or [f"cluster {kubeconfig or 'in-cluster'}"],
        new_paths,
    )
    if output not in ("text", "json"):
        from pyclassify.cli.report import diff_output

        diff_output(result, old, new, output, by, default)
    elif as_json or output == "json":
        emit_json(result.to_json())
    else:
        summary = result.to_json()["summary"]
        changed = ", ".join(result.policies_changed[:5]) + (
            f" and {len(result.policies_changed) - 5} more" if len(result.policies_changed) > 5 else ""
        )
        out.print(f"policies changed: {escape(changed) if changed else 'none'}", highlight=False)
        for c in result.changes:
            colour = "green" if c.opened else "red"
            text = result.change_text(c)
            if ascii_only():
                text = text.replace("→", "->").replace("…", "...")
            out.print(
                f"[{colour}]{'+' if c.opened else '-'}[/{colour}] {escape(text)}", highlight=False, soft_wrap=True
            )
        for note in result.notes:
            out.print(f"note: {escape(note)}", highlight=False)
        out.print(
            f"{count(summary['changes'], 'change')} in reachability "
            f"({summary['opened']} opened, {summary['closed']} closed) over {count(summary['groups'], 'group')} "
            f"and {count(summary['flow_classes'], 'flow class')}",
            highlight=False,
        )
    if result.changes:
        fail(EXIT_CHANGED)
