"""What every command of the ``pyclassify`` command line shares: exit codes, the output
consoles, JSON emission, the common options and the loading of manifests (or a cluster) into a
checked project."""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from pyclassify.counted import count
from pyclassify.documents import printable
from pyclassify.selector import unencodable
from pyclassify.terminal import ascii_only

if TYPE_CHECKING:
    from pyclassify.project import Project

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_NO_MATCH = 3
EXIT_REJECTED = 4  # admit: a resource rejected
EXIT_CHANGED = 5  # diff: reachability changes (for CI gates)
EXIT_CLUSTER = 8  # replay --scheduler: the Dask cluster cannot be used (unreachable, other versions)

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def tolerate_narrow_encodings() -> None:
    """What still cannot be encoded (a non-ASCII name in a message) is escaped, not a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if ascii_only(stream) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a detached or closed stream
                pass


def utf8_text(ctx: click.Context | None, param: click.Parameter | None, value: Any) -> Any:
    """A click callback: a text argument (a selector, labels, an endpoint) must be UTF-8 —
    bytes that are not arrive as lone surrogates, which the engine cannot take."""
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, str):
            why = unencodable(item)
            if why is not None:
                raise click.BadParameter(why, ctx=ctx, param=param)
    return value


WRITE_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG}


def silence_stdout() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush of what could not be
    written does not fail a second time, with its own traceback, at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no file descriptor
        pass


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def fail(code: int) -> NoReturn:
    sys.exit(code)


def one_shot_budget(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--memory-budget`` of the commands that read manifests: a size, or none."""
    if value is None:
        return None
    from pyclassify.budget import parse_size

    try:
        budget = parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    ctx.meta[MEMORY_BUDGET] = budget
    return budget


# Where --memory-budget keeps its value for the loading of manifests (click.Context.meta).
MEMORY_BUDGET = "pyclassify.memory_budget"

# --- options ---------------------------------------------------------------------------------

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")

#: ``--format`` of the commands that read ``--traffic`` beside their own input (diff, usage, report).
traffic_format_option = click.option(
    "--format",
    "traffic_format",
    default=None,
    metavar="FORMAT",
    help="The format of every --traffic file (found from the content otherwise).",
)


def output_options(by_default: str) -> Any:
    """``--output`` (``--json`` is its short form for json) and ``--by``, of matrix and diff:
    the formats and levels of ``pyclassify.report``."""
    return lambda f: click.option(
        "--output",
        "output",
        type=click.Choice(OUTPUTS),
        default="text",
        show_default=True,
        help="text, json, csv, md (Markdown), dot or svg (Graphviz: the graph of who may reach "
        "whom), html (the report: pyclassify report).",
    )(
        click.option(
            "--by",
            "by",
            type=click.Choice(["namespace", "identity", "pod"]),
            default=by_default,
            show_default=True,
            help="Rows, columns or graph nodes: each namespace, each group of pods "
            "policy cannot tell apart (with counts), or each pod.",
        )(f)
    )


OUTPUTS = ("text", "json", "csv", "md", "dot", "svg", "html")
# Commands that can read a cluster: PATH may be left out when --kubeconfig or --in-cluster is given.
cluster_paths_argument = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True))


def kube_options(f: Any) -> Any:
    f = click.option(
        "--context",
        "kube_context",
        metavar="NAME",
        default=None,
        help="Context of --kubeconfig (default: its current context).",
    )(f)
    f = click.option(
        "--in-cluster", is_flag=True, help="The cluster this runs in (its service account token and CA) as input."
    )(f)
    return click.option(
        "--kubeconfig",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        default=None,
        help="A cluster's live objects as input, beside or instead of PATH.",
    )(f)


engine_option = click.option(
    "--engine",
    type=click.Choice(["native", "reference"]),
    default="native",
    show_default=True,
    help="Compiled Rust engine, or the pure-Python reference evaluator it is tested against.",
)


def from_environment(parameter: str) -> bool:
    """Whether the current command's ``parameter`` came from an environment variable (a
    setting of the shell, not asked for by this command line)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(parameter) == click.core.ParameterSource.ENVIRONMENT


def cluster_progress(as_json: bool, noun: str) -> Any:
    """The progress line of a run on a Dask cluster, on a terminal's stderr: tasks done of all,
    the ``noun`` (records, packets) the finished tasks judged and their rate since the start."""
    import time

    started = time.perf_counter()

    def progress(done: int, total: int, judged: int) -> None:
        if as_json or not err.is_terminal:
            return
        rate = judged / max(time.perf_counter() - started, 1e-9)
        err.print(f"tasks {done}/{total}, {judged:,} {noun} judged, {rate:,.0f} {noun}/s", end="\r")

    return progress


def cluster_options(f: Any, captures: bool = False) -> Any:
    """``--scheduler ADDR`` and ``--workers N``: flow records judged on a Dask cluster
    (``pyclassify.dask_replay``); with ``captures`` (replay), captures too
    (``pyclassify.dask_capture``)."""
    what = "With --traffic or --pcap" if captures else "With --traffic"
    pcap = (
        "--pcap: each capture is read once, by one task, and split by connection among one judging task per "
        "worker thread (asked on the command line only). "
        if captures
        else ""
    )
    f = click.option(
        "--workers",
        "workers",
        type=click.IntRange(1, 4096),
        default=None,
        metavar="N",
        help=f"{what}: start a local Dask cluster of N worker processes for this run.",
    )(f)
    return click.option(
        "--scheduler",
        "scheduler",
        default=None,
        metavar="ADDR",
        envvar=["PYCLASSIFY_SCHEDULER", "DASK_SCHEDULER_ADDRESS"],
        help=f"{what}: judge the files on the Dask cluster of this scheduler (tcp://host:8786), one task a "
        "file, the engine built once per worker; the answer is the in-process one. The workers read the "
        f"files at the same paths. {pcap}Default: $PYCLASSIFY_SCHEDULER, $DASK_SCHEDULER_ADDRESS, else "
        "in-process. Needs pip install 'pyclassify[dask]'.",
    )(f)


def replay_cluster_options(f: Any) -> Any:
    """``cluster_options`` of ``replay``: captures as well as flow records."""
    return cluster_options(f, captures=True)


default_option = click.option(
    "--default",
    "default",
    type=click.Choice(["allow", "deny"]),
    default=None,
    help="Verdict when no policy decides (default: allow for pods, deny for host endpoints).",
)


def problem_json(p: Any) -> dict[str, Any]:
    return {"file": p.file, "line": p.line, "path": p.path, "message": p.message}


def print_problems(problems: Any) -> None:
    by_place = lambda p: (p.file, p.line)  # noqa: E731 - stable: same line keeps found order
    for p in sorted(problems.errors, key=by_place):
        err.print(escape(str(p)), highlight=False)
    for p in sorted(problems.warnings, key=by_place):
        err.print(f"[yellow]warning[/yellow]: {escape(str(p))}", highlight=False)


def read_manifests(paths: tuple[str, ...], kube: tuple[str | None, str | None, bool] | None = None) -> Project:
    """The manifests under PATH, and the cluster ``kube`` (kubeconfig, context, in-cluster) names."""
    kubeconfig, context, in_cluster = kube or (None, None, False)
    if kubeconfig is None and context is None and not in_cluster:
        if not paths:
            raise click.UsageError("Missing argument 'PATHS...' (or --kubeconfig / --in-cluster).")
        from pyclassify.budget import OverBudget
        from pyclassify.project import load_project

        ctx = click.get_current_context(silent=True)
        try:
            return load_project(list(paths), budget=ctx.meta.get(MEMORY_BUDGET) if ctx is not None else None)
        except OverBudget as e:
            err.print(f"[red]error[/red]: {escape(e.describe('not built'))}")
            fail(EXIT_INVALID)
    from pyclassify.kube.cluster_project import load_cluster_project

    try:
        return load_cluster_project(list(paths), kubeconfig, context, in_cluster or None)
    except Exception as e:  # noqa: BLE001 - unreachable cluster, bad kubeconfig: say so, exit 2
        if isinstance(e, click.ClickException):
            raise
        raise click.UsageError(f"cannot read the cluster: {e}") from e


def load_manifests(paths: tuple[str, ...], kube: tuple[str | None, str | None, bool] | None = None) -> Project:
    """Loads and validates manifests; invalid input prints every error and exits 1."""
    project = read_manifests(paths, kube)
    if project.problems.errors:
        print_problems(project.problems)
        n = len(project.problems.errors)
        err.print(f"[red]{count(n, 'error')}[/red]: fix the manifests (see `pyclassify check`)")
        fail(EXIT_INVALID)
    if project.problems.empty_inputs:
        print_problems(project.problems)
        fail(EXIT_INVALID)
    return project


def protocol_number(text: str) -> int:
    from pyclassify.analysis import parse_protocol

    try:
        return parse_protocol(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--proto") from e


def port_or_any(ctx: Any, param: Any, value: str | None) -> int | str | None:
    if value is None or value == "any":
        return value
    try:
        port = int(value)
    except ValueError:
        raise click.BadParameter(f"{printable(value)!r} is neither a port (0-65535) nor 'any'") from None
    if not 0 <= port <= 65535:
        raise click.BadParameter(f"{port} is not in the range 0-65535")
    return port


def selector_option(ctx: Any, param: Any, value: str | None) -> Any:
    if value is None:
        return None
    from pyclassify.selector import Selector

    try:
        return Selector.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


# --- two sets of manifests over one inventory: diff and report --------------------------------


def _inventory_difference(a: Any, b: Any) -> str | None:
    """Where two inventories differ (the first difference found), or None."""

    def eps(inv: Any) -> dict[str, Any]:
        return {f"{e.kind.value} {e.ref}": e for e in inv.endpoints}

    ea, eb = eps(a), eps(b)
    for ref in sorted(set(ea) ^ set(eb)):
        return f"{ref} is only in {'OLD' if ref in ea else 'NEW'}"
    for ref in sorted(ea):
        if ea[ref] != eb[ref]:
            return f"{ref} differs (labels, addresses or ports)"
    for name, x, y in (
        ("namespaces", a.namespaces, b.namespaces),
        ("services", a.services, b.services),
        ("nodes", a.nodes, b.nodes),
        ("service accounts", a.service_accounts, b.service_accounts),
    ):
        if x != y:
            return f"their {name} differ"
    if sorted(map(repr, a.network_sets)) != sorted(map(repr, b.network_sets)):
        return "their network sets differ"
    return None


def split_against(args: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The OLD and NEW paths of ``OLD... --against NEW...`` (``diff``, ``report``)."""
    old: list[str] = []
    new: list[str] = []
    target = old
    seen = False
    for arg in args:
        if arg == "--against":
            if seen:
                raise click.UsageError("--against is given twice: put every NEW path after one --against")
            target, seen = new, True
        elif arg.startswith("--against="):
            if seen:
                raise click.UsageError("--against is given twice: put every NEW path after one --against")
            seen = True
            new.append(arg.split("=", 1)[1])
            target = new
        elif arg.startswith("-") and arg != "-":
            raise click.UsageError(f"no such option: {printable(arg)}")
        else:
            target.append(arg)
    if seen and not new:
        raise click.UsageError("--against needs the new policy set: OLD... --against NEW...")
    return old, new


def diff_projects(
    old_paths: list[str], new_paths: list[str], apply_paths: tuple[str, ...], kube: tuple[str | None, str | None, bool]
) -> tuple[Project, Project, list[str]]:
    """OLD and NEW of a change over one inventory (``diff``, ``report --against/--apply``), and
    the paths NEW is named by."""
    if bool(new_paths) == bool(apply_paths):
        raise click.UsageError(
            "give the new policy: --against NEW... (a whole policy set) or --apply FILE "
            "(objects applied to OLD), one of them"
        )
    old = load_manifests(tuple(old_paths), kube)
    if apply_paths:
        change = load_manifests(apply_paths)
        if change.has_inventory():
            err.print(
                "[red]error[/red]: --apply takes policy objects (NetworkPolicy, AdminNetworkPolicy, "
                "Calico policies, tiers, profiles); the files hold pods, namespaces or other "
                "inventory: use --against with the whole new state"
            )
            fail(EXIT_INVALID)
        new = old.applied(change)
        new_paths = [f"{', '.join(old_paths) or 'the cluster'} with {', '.join(apply_paths)} applied"]
    else:
        new = load_manifests(tuple(new_paths))
    if not new.has_inventory():
        new = new.over(old.inventory)
    elif not old.has_inventory():
        old = old.over(new.inventory)
    else:
        problem = _inventory_difference(old.inventory, new.inventory)
        if problem is not None:
            err.print(
                f"[red]error[/red]: OLD and NEW have different inventories: {escape(problem)}. "
                "diff compares policy over one inventory: give it on one side only, or the same on both."
            )
            fail(EXIT_INVALID)
        new = new.over(old.inventory)
    return old, new, new_paths
