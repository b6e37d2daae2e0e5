"""The ``pyclassify`` command line (DESIGN.md §4).

Exit codes: 0 success (or a match), 1 invalid input, 2 usage error, 3 no match (``selector``).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from pyclassify.selector import Selector, SelectorError, parse_labels

if TYPE_CHECKING:
    from pyclassify.project import Project

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


class LazyGroup(click.Group):
    """Commands whose modules load only when used, so `pyclassify --version` stays quick."""

    lazy: dict[str, str] = {
        "admit": "pyclassify.admission.commands:admit_command",
        "admission-webhook": "pyclassify.admission.commands:admission_webhook_command",
        "enforce": "pyclassify.enforce.commands:enforce_command",
        "monitor": "pyclassify.enforce.monitor:monitor_command",
        "render": "pyclassify.render:render_command",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy.get(name)
        if target is None:
            return super().get_command(ctx, name)
        import importlib

        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pyclassify", prog_name="pyclassify")
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
            err.print(f"[red]error[/red]: selector: {escape(e.message)} (at position {e.position})"
                      if e.position is not None else f"[red]error[/red]: selector: {escape(str(e))}")
            if e.position is not None:
                # Show at most ~80 characters around the problem, not a whole hostile input.
                start = max(0, e.position - 40)
                shown = expr[start:start + 80]
                prefix = "…" if start else ""
                err.print(f"  {prefix}{escape(shown)}", markup=True)
                err.print("  " + " " * (len(prefix) + e.position - start) + "^")
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


# --- manifests: check, explain, matrix -----------------------------------------------------

paths_argument = click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
# Commands that can read a cluster: PATH may be left out when --kubeconfig or --in-cluster is given.
cluster_paths_argument = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True))


def kube_options(f: Any) -> Any:
    f = click.option("--context", "kube_context", metavar="NAME", default=None,
                     help="Context of --kubeconfig (default: its current context).")(f)
    f = click.option("--in-cluster", is_flag=True,
                     help="The cluster this runs in (its service account token and CA) as input.")(f)
    return click.option("--kubeconfig", metavar="FILE", type=click.Path(dir_okay=False), default=None,
                        help="A cluster's live objects as input, beside or instead of PATH.")(f)
engine_option = click.option(
    "--engine",
    type=click.Choice(["native", "reference"]),
    default="native",
    show_default=True,
    help="Compiled Rust engine, or the pure-Python reference evaluator it is tested against.",
)
default_option = click.option(
    "--default",
    "default",
    type=click.Choice(["allow", "deny"]),
    default=None,
    help="Verdict when no policy decides (default: allow for pods, deny for host endpoints).",
)


def _problem_json(p: Any) -> dict[str, Any]:
    return {"file": p.file, "line": p.line, "path": p.path, "message": p.message}


def _print_problems(problems: Any) -> None:
    by_place = lambda p: (p.file, p.line)  # noqa: E731 - stable: same line keeps found order
    for p in sorted(problems.errors, key=by_place):
        err.print(escape(str(p)), highlight=False)
    for p in sorted(problems.warnings, key=by_place):
        err.print(f"[yellow]warning[/yellow]: {escape(str(p))}", highlight=False)


def _read(paths: tuple[str, ...], kube: tuple[str | None, str | None, bool] | None = None) -> "Project":
    """The manifests under PATH, and the cluster ``kube`` (kubeconfig, context, in-cluster) names."""
    kubeconfig, context, in_cluster = kube or (None, None, False)
    if kubeconfig is None and context is None and not in_cluster:
        if not paths:
            raise click.UsageError("Missing argument 'PATHS...' (or --kubeconfig / --in-cluster).")
        from pyclassify.project import load_project

        return load_project(list(paths))
    from pyclassify.kube.snapshot import load_cluster_project

    try:
        return load_cluster_project(list(paths), kubeconfig, context, in_cluster or None)
    except Exception as e:  # noqa: BLE001 - unreachable cluster, bad kubeconfig: say so, exit 2
        if isinstance(e, click.ClickException):
            raise
        raise click.UsageError(f"cannot read the cluster: {e}") from e


def _load(paths: tuple[str, ...], kube: tuple[str | None, str | None, bool] | None = None) -> "Project":
    """Loads and validates manifests; invalid input prints every error and exits 1."""
    project = _read(paths, kube)
    if project.problems.errors:
        _print_problems(project.problems)
        n = len(project.problems.errors)
        err.print(f"[red]{n} error{'s' if n != 1 else ''}[/red]: fix the manifests (see `pyclassify check`)")
        _fail(EXIT_INVALID)
    return project


@main.command("check")
@cluster_paths_argument
@kube_options
@json_option
def check_cmd(paths: tuple[str, ...], kubeconfig: str | None, in_cluster: bool, kube_context: str | None,
              as_json: bool) -> None:
    """Validate manifests (files, directories, or - for stdin) and print every error.

    Exit 1 if any manifest is invalid. Policies that cannot be enforced faithfully yet (for
    example `domains` rules) are reported as warnings.
    """
    from pyclassify.admission.policy import check_admission_documents

    project = _read(paths, (kubeconfig, kube_context, in_cluster))
    problems = project.problems
    # ContainerAdmissionPolicy decides on resources, not packets: validated beside the IR.
    check_admission_documents(project.admission_documents, project.problems)
    admission = sum(n for k, n in project.skipped.items() if k.endswith("/ContainerAdmissionPolicy"))
    skipped_kinds = {k: n for k, n in project.skipped.items() if not k.endswith("/ContainerAdmissionPolicy")}
    policies = project.policy_set.policies
    unenforceable = [{"policy": p.ref, "reasons": list(p.unenforceable)} for p in policies if p.unenforceable]
    if as_json:
        _emit_json(
            {
                "valid": not problems.errors,
                "documents": project.document_count,
                "policies": len(policies),
                "endpoints": len(project.inventory.endpoints),
                "errors": [_problem_json(p) for p in problems.errors],
                "warnings": [_problem_json(p) for p in problems.warnings],
                "unenforceable": unenforceable,
                "admission_policies": admission,
                "skipped": skipped_kinds,
            }
        )
    else:
        _print_problems(problems)
        for item in unenforceable:
            err.print(f"[yellow]not enforceable[/yellow]: {item['policy']}: {'; '.join(item['reasons'])}")
        skipped = ", ".join(f"{k} x{v}" for k, v in skipped_kinds.items())
        summary = (
            f"{project.document_count} documents: {len(policies)} policies, "
            + (f"{admission} admission policies, " if admission else "")
            + f"{len(project.inventory.endpoints)} endpoints"
            + (f"; skipped {skipped}" if skipped else "")
        )
        n_err, n_warn = len(problems.errors), len(problems.warnings)
        status = "[green]valid[/green]" if not n_err else f"[red]{n_err} error{'s' if n_err != 1 else ''}[/red]"
        out.print(f"{status}, {n_warn} warning{'s' if n_warn != 1 else ''} — {summary}")
    if problems.errors:
        _fail(EXIT_INVALID)


def _protocol(text: str) -> int:
    from pyclassify.analysis import parse_protocol

    try:
        return parse_protocol(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--proto") from e


def _describe(d: Any) -> str:
    """One line saying what decided one direction."""
    if d is None:
        return "[dim]no policy applies[/dim]"
    colour = "green" if d.verdict == "allow" else "red"
    verdict = f"[{colour}]{d.verdict}[/{colour}]"
    tier = f" in tier {escape(d.tier)}" if d.tier else ""
    if d.reason == "rule":
        return f"{verdict} by {escape(d.policy or '')} rule {escape(str(d.rule))}{tier}"
    if d.reason == "end-of-tier":
        return f"{verdict} at the end of tier {escape(d.tier or '')} (a policy applied, no rule matched)"
    if d.reason == "profile":
        what = f"by {escape(d.policy)} rule {escape(str(d.rule))}" if d.policy else "by its profiles (no rule matched)"
        return f"{verdict} {what}"
    return f"{verdict} by the default (every applicable tier passed)"


@main.command("explain")
@cluster_paths_argument
@kube_options
@click.option("--from", "src", required=True, metavar="A", help="Source: ns/pod, workload, host endpoint or IP.")
@click.option("--to", "dst", required=True, metavar="B", help="Destination: ns/pod, workload, host endpoint or IP.")
@click.option("--proto", "proto", default="TCP", show_default=True, help="Protocol name or number.")
@click.option("--port", "port", type=click.IntRange(0, 65535), default=None, help="Destination port.")
@click.option("--sport", "sport", type=click.IntRange(0, 65535), default=None, help="Source port.")
@click.option("--icmp-type", type=click.IntRange(0, 255), default=None)
@click.option("--icmp-code", type=click.IntRange(0, 255), default=None)
@default_option
@engine_option
@json_option
def explain_cmd(paths: tuple[str, ...], kubeconfig: str | None, in_cluster: bool, kube_context: str | None, src: str,
                dst: str, proto: str, port: int | None, sport: int | None, icmp_type: int | None,
                icmp_code: int | None, default: str | None, engine: str, as_json: bool) -> None:
    """Verdict for one flow, with the deciding tier, policy and rule of each direction."""
    from pyclassify.analysis import UnknownEnd, explain

    protocol = _protocol(proto)
    project = _load(paths, (kubeconfig, kube_context, in_cluster))
    try:
        result = explain(project, src, dst, protocol, port, sport, icmp_type, icmp_code, default, engine)
    except UnknownEnd as e:
        raise click.BadParameter(str(e)) from e
    if as_json:
        _emit_json(result.to_json())
        return
    from pyclassify.analysis import end_json

    f = result.flow
    ends = [end_json(f.src), end_json(f.dst)]
    names = [escape(e["endpoint"] or "outside") + f" ({e['ip'] or 'no IP'})" for e in ends]
    port_text = f"/{f.dport}" if f.dport is not None else ""
    out.print(f"flow:    {names[0]} -> {names[1]} {escape(proto.upper())}{port_text}")
    sides = (("egress ", names[0], result.verdict.egress), ("ingress", names[1], result.verdict.ingress))
    for direction, name, decision in sides:
        out.print(f"{direction}: {name}: {_describe(decision)}")
        for tier, policy, rule in decision.logs if decision else []:
            out.print(f"         logged by {escape(policy)} rule {escape(str(rule))}" + (f" in tier {tier}" if tier else ""))
    colour = "green" if result.verdict.allowed else "red"
    out.print(f"verdict: [{colour}]{result.verdict.verdict.upper()}[/{colour}]")


@main.command("matrix")
@cluster_paths_argument
@kube_options
@click.option("--proto", "proto", default="TCP", show_default=True, help="Protocol name or number.")
@click.option("--port", "port", type=click.IntRange(0, 65535), default=None, help="Destination port.")
@default_option
@engine_option
@json_option
def matrix_cmd(paths: tuple[str, ...], kubeconfig: str | None, in_cluster: bool, kube_context: str | None,
               proto: str, port: int | None, default: str | None, engine: str, as_json: bool) -> None:
    """Reachability truth table among all pods: row = from, column = to."""
    from pyclassify.analysis import matrix

    protocol = _protocol(proto)
    project = _load(paths, (kubeconfig, kube_context, in_cluster))
    result = matrix(project, protocol, port, default, engine)
    if as_json:
        _emit_json(result.to_json())
        return
    from rich.table import Table

    names = [p.ref for p in result.pods]
    port_text = f"/{port}" if port is not None else ""
    table = Table(title=f"{proto.upper()}{port_text}: may the row reach the column?")
    table.add_column("from \\ to")
    for i in range(len(names)):
        table.add_column(str(i), justify="center")
    for i, row in enumerate(result.allowed):
        cells = ["[green]✓[/green]" if ok else "[red]✗[/red]" for ok in row]
        table.add_row(f"{i} {escape(names[i])}", *cells)
    out.print(table)
    total = sum(map(sum, result.allowed))
    out.print(f"{total} of {len(names) ** 2} pod pairs allowed")


@main.command("replay")
@paths_argument
@click.option("--pcap", "pcaps", multiple=True, required=True, type=click.Path(allow_dash=True),
              help="Capture to replay (pcap or pcapng; - for stdin). Repeat for several.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write one JSON line per packet (verdict and deciding rule per direction).")
@click.option("--allowed", "allowed_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the allowed packets, unchanged, to this capture.")
@click.option("--denied", "denied_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the denied packets, unchanged, to this capture.")
@click.option("--flows", "per_flow", is_flag=True, help="With --out, one line per flow instead of per packet.")
@click.option("--no-conntrack", is_flag=True, help="Judge every packet alone (no connection tracking).")
@default_option
@json_option
def replay_cmd(paths: tuple[str, ...], pcaps: tuple[str, ...], out_path: str | None, allowed_path: str | None,
               denied_path: str | None, per_flow: bool, no_conntrack: bool, default: str | None,
               as_json: bool) -> None:
    """Replay captures against the policy: a verdict for every packet, and a summary by rule.

    Replies of allowed connections pass, as on a node (connection tracking); decoding and
    classification run natively, in batches.
    """
    from pyclassify.capture import CaptureError
    from pyclassify.engine import NativeEngine
    from pyclassify.replay import Replay, ReplayError

    project = _load(paths)
    engine = NativeEngine(project.policy_set, project.inventory)
    out_file = open(out_path, "w", encoding="utf-8") if out_path else None  # noqa: SIM115 - closed below
    try:
        replay = Replay(engine, conntrack=not no_conntrack, default=default, out=out_file,
                        allowed_path=allowed_path, denied_path=denied_path, flows=per_flow)
        try:
            if sys.stdout.isatty() and not as_json:
                from rich.progress import Progress

                with Progress(console=err, transient=True) as bar:
                    task = bar.add_task("replaying", total=None)
                    replay.run(list(pcaps), progress=lambda n: bar.advance(task, n))
            else:
                replay.run(list(pcaps))
        except (CaptureError, ReplayError, OSError) as e:
            err.print(f"[red]error[/red]: {escape(str(e))}")
            _fail(EXIT_INVALID)
    finally:
        if out_file is not None:
            out_file.close()
    summary = replay.summary_json()
    if as_json:
        _emit_json(summary)
    else:
        _print_replay(summary)
    if replay.summary.interrupted:
        _fail(130)


def _print_replay(summary: dict[str, Any]) -> None:
    s = summary
    rate = s["packets_per_second"]
    out.print(
        f"{s['packets']} packets in {s['flows']} flows: [green]{s['allowed']} allowed[/green], "
        f"[red]{s['denied']} denied[/red] ({s['established']} by connection tracking, "
        f"{s['malformed']} malformed, {s['invalid']} invalid) — {rate:,.0f} packets/s"
    )
    out.print("decided by policy:")
    for row in s["by_rule"]:
        colour = "green" if row["verdict"] == "allow" else "red"
        where = f" in tier {row['tier']}" if row["tier"] else ""
        if row["reason"] == "rule":
            what = f"{escape(row['policy'])} rule {escape(str(row['rule']))}{where}"
        elif row["reason"] == "end-of-tier":
            what = f"end of tier {row['tier']}"
        elif row["reason"] == "profile":
            what = f"{escape(row['policy'] or 'profiles')}" + (f" rule {row['rule']}" if row["rule"] is not None else "")
        else:
            what = "the default"
        out.print(f"  {row['packets']:>8}  {row['direction']:<7} [{colour}]{row['verdict']:<5}[/{colour}] by {what}")
    for kind, n in s["decode_errors"].items():
        out.print(f"[yellow]decode[/yellow]: {n} packets {kind}")
    for problem in s["problems"]:
        out.print(f"[yellow]capture[/yellow]: {escape(problem)}")
    if s["interrupted"]:
        out.print("[yellow]interrupted[/yellow]: summary of the packets replayed so far")



if __name__ == "__main__":  # pragma: no cover
    main()
