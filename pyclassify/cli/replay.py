"""The ``replay`` command: captures (or flow records) judged packet by packet against the policy,
with connection tracking, and the counts, files and flows it writes."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from rich.markup import escape

from pyclassify.cli.common import (
    EXIT_CLUSTER,
    EXIT_INVALID,
    cluster_paths_argument,
    cluster_progress,
    default_option,
    emit_json,
    err,
    fail,
    from_environment,
    json_option,
    kube_options,
    load_manifests,
    out,
    replay_cluster_options,
)
from pyclassify.counted import count
from pyclassify.terminal import ascii_only, symbol


@click.command(
    "replay",
    epilog="""\b
Examples:
  pyclassify replay examples/demo --pcap pcaps/demo.pcap
  pyclassify replay examples/demo --pcap pcaps/demo.pcapng --out verdicts.jsonl --denied denied.pcap
  pyclassify replay --kubeconfig ~/.kube/config --pcap node1.pcap
  pyclassify replay examples/demo --traffic examples/traffic/hubble.jsonl
  pyclassify replay examples/demo --traffic archive/*.jsonl.gz --scheduler tcp://dask-scheduler:8786
  pyclassify replay examples/demo --pcap node1.pcap --pcap node2.pcap --workers 2
""",
)
@cluster_paths_argument
@kube_options
@click.option(
    "--pcap",
    "pcaps",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Capture to replay (pcap or pcapng; - for stdin). Repeat for several.",
)
@click.option(
    "--traffic",
    "traffic",
    multiple=True,
    type=click.Path(allow_dash=True),
    help="Flow records to judge, one verdict per connection: Hubble, Calico/Goldmane, VPC Flow Logs "
    "(text, Parquet), conntrack -L/-E, NetFlow v5/v9/IPFIX; gzip/zstd read as they are. The format "
    "is found from the content (--format names it). Repeat for several.",
)
@click.option(
    "--format",
    "traffic_format",
    default=None,
    metavar="FORMAT",
    help="The format of every --traffic file: hubble, calico, vpc, conntrack, netflow, parquet.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write one JSON line per packet, or per record with --traffic (verdict and deciding rule per direction).",
)
@replay_cluster_options
@click.option(
    "--out-dir",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="With --scheduler/--workers: --out's lines written by the workers into DIR (made if missing; the "
    "workers must reach it at this path), one file per input file (--traffic) or per partition (--pcap), "
    "and DIR/index.json.",
)
@click.option(
    "--allowed",
    "allowed_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the allowed packets, unchanged, to this capture.",
)
@click.option(
    "--denied",
    "denied_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the denied packets, unchanged, to this capture.",
)
@click.option("--flows", "per_flow", is_flag=True, help="With --out, one line per flow instead of per packet.")
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="An output path that is a symbolic link replaces the file it points to (refused otherwise).",
)
@click.option("--no-conntrack", is_flag=True, help="Judge every packet alone (no connection tracking).")
@click.option(
    "--dns-grace",
    "dns_grace",
    type=click.IntRange(0, 86400),
    default=0,
    show_default=True,
    metavar="SECONDS",
    help="How long an address DNS taught stays valid after its TTL runs out.",
)
@click.option(
    "--vxlan-port",
    "vxlan_ports",
    multiple=True,
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="UDP port of the overlay's VXLAN tunnels (Calico's vxlanPort, Cilium's tunnel-port); repeat "
    "for several. Default: 4789 and 8472.",
)
@click.option(
    "--geneve-port",
    "geneve_ports",
    multiple=True,
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="UDP port of the overlay's Geneve tunnels; repeat for several. Default: 6081.",
)
@click.option(
    "--no-decap",
    "no_decap",
    is_flag=True,
    help="Judge packets inside overlay tunnels by their outer header, as the nodes' own traffic.",
)
@default_option
@json_option
def replay_cmd(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    pcaps: tuple[str, ...],
    traffic: tuple[str, ...],
    traffic_format: str | None,
    out_path: str | None,
    scheduler: str | None,
    workers: int | None,
    out_dir: str | None,
    allowed_path: str | None,
    denied_path: str | None,
    per_flow: bool,
    follow_symlinks: bool,
    no_conntrack: bool,
    dns_grace: int,
    vxlan_ports: tuple[int, ...],
    geneve_ports: tuple[int, ...],
    no_decap: bool,
    default: str | None,
    as_json: bool,
) -> None:
    """Replay captures against the policy: a verdict for every packet, and a summary by rule.

    Replies of allowed connections pass, as on a node (connection tracking); decoding and
    classification run natively, in batches. Packets inside overlay tunnels (VXLAN, Geneve,
    IP in IP, GRE: a capture on a node's uplink) are judged by the packet they carry; one
    whose tunnel cannot be read is not judged (denied, and counted). Each output file is
    written beside its name and put in place when the run succeeds (a failed run leaves an
    earlier file as it was); an output path that is a symbolic link is refused unless
    --follow-symlinks is given.
    """
    if traffic:
        if pcaps or allowed_path or denied_path or per_flow:
            raise click.UsageError(
                "--traffic judges flow records: give captures (--pcap, --allowed, --denied, "
                "--flows) in a run of their own"
            )
        if out_path is not None:
            _refuse_overwriting_inputs(paths, traffic, {"--out": out_path}, input_option="--traffic")
            from pyclassify.output import SymlinkRefused, check_target

            try:
                check_target("--out", out_path, follow_symlinks)
            except SymlinkRefused as e:
                raise click.UsageError(str(e)) from None
        if (scheduler or workers) and out_path is not None:
            raise click.UsageError(
                "--out writes one file in-process: on a cluster, --out-dir DIR has each worker "
                "write the lines of the files it judged"
            )
        if out_dir is not None and not (scheduler or workers):
            raise click.UsageError(
                "--out-dir is written by a cluster's workers: give --scheduler or --workers (in-process, --out FILE)"
            )
        if scheduler and workers:
            raise click.UsageError("--scheduler names a running cluster, --workers starts one: give one of them")
        _replay_records(
            paths,
            (kubeconfig, kube_context, in_cluster),
            traffic,
            traffic_format,
            out_path,
            default,
            as_json,
            follow_symlinks=follow_symlinks,
            scheduler=scheduler,
            workers=workers,
            out_dir=out_dir,
        )
        return
    # a scheduler named only by the environment leaves captures in-process: --scheduler asks
    on_cluster = bool(workers) or (scheduler is not None and not from_environment("scheduler"))
    if out_dir is not None and not on_cluster:
        raise click.UsageError(
            "--out-dir is written by a cluster's workers: give --scheduler or --workers (in-process, --out FILE)"
        )
    if on_cluster and scheduler and workers:
        raise click.UsageError("--scheduler names a running cluster, --workers starts one: give one of them")
    if on_cluster and (out_path or allowed_path or denied_path or per_flow):
        raise click.UsageError(
            "--out, --flows, --allowed and --denied are written in-process: on a cluster (--scheduler, "
            "--workers) --out-dir DIR has each partition write its packets' lines"
        )
    if not pcaps:
        raise click.UsageError("give what to replay: --pcap FILE (captures) or --traffic FILE (flow records)")
    from pyclassify.capture import CaptureError
    from pyclassify.engine import NativeEngine
    from pyclassify.replay import Replay, ReplayError
    from pyclassify.tunnels import DEFAULT_TUNNELS, TunnelPorts

    if no_decap and (vxlan_ports or geneve_ports):
        raise click.UsageError("--no-decap opens no tunnel: --vxlan-port and --geneve-port say which to open")
    try:
        tunnels = TunnelPorts(
            vxlan=vxlan_ports or DEFAULT_TUNNELS.vxlan,
            geneve=geneve_ports or DEFAULT_TUNNELS.geneve,
            decapsulate=not no_decap,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if per_flow and out_path is None:
        raise click.UsageError("--flows says what --out holds (one line per flow): give --out FILE too")
    outputs = {"--out": out_path, "--allowed": allowed_path, "--denied": denied_path}
    _refuse_overwriting_inputs(paths, pcaps, {k: v for k, v in outputs.items() if v is not None})
    from pyclassify.output import OutputFile, SymlinkRefused, check_target

    for option, path in outputs.items():
        if path is not None:
            try:
                check_target(option, path, follow_symlinks)
            except SymlinkRefused as e:
                raise click.UsageError(str(e)) from None
    project = load_manifests(paths, (kubeconfig, kube_context, in_cluster))
    if on_cluster:
        from pyclassify.dask_capture import CaptureOptions

        options = CaptureOptions(conntrack=not no_conntrack, default=default, tunnels=tunnels, dns_grace=dns_grace)
        _captures_on_cluster(project, pcaps, options, as_json, None if workers else scheduler, workers, out_dir)
        return
    from pyclassify import domains, httprules

    dns = None
    if domains.has_domain_rules(project.policy_set):
        project.inventory.domains = domains.new_facts(dns_grace)
        dns = domains.DnsLearner(project.inventory.domains)
    engine = NativeEngine(project.policy_set, project.inventory)
    staged_project = project.staged()
    # a delta from the engine just built (the same inventory), not a second build
    staged = None if staged_project is None else engine.update(staged_project.policy_set, project.inventory)
    try:
        out_file = OutputFile("--out", out_path, binary=False, follow_symlinks=follow_symlinks) if out_path else None
    except OSError as e:
        err.print(
            f"[red]error[/red]: --out {escape(out_path or '')}: cannot open for writing: {escape(e.strerror or str(e))}"
        )
        fail(EXIT_INVALID)
    failure: str | None = None
    replay = None
    try:
        replay = Replay(
            engine,
            conntrack=not no_conntrack,
            default=default,
            out=None if out_file is None else out_file.file,
            allowed_path=allowed_path,
            denied_path=denied_path,
            flows=per_flow,
            staged=staged,
            dns=dns,
            http=httprules.has_http_rules(project.policy_set),
            tunnels=tunnels,
            follow_symlinks=follow_symlinks,
        )
        try:
            if sys.stdout.isatty() and not as_json:
                from rich.progress import Progress

                with Progress(console=err, transient=True) as bar:
                    task = bar.add_task("replaying", total=None)
                    replay.run(list(pcaps), progress=lambda n: bar.advance(task, n))
            else:
                replay.run(list(pcaps))
        except (CaptureError, ReplayError, OSError) as e:
            failure = str(e)
    finally:
        if out_file is not None:
            failure = (
                out_file.finish(failure is None and replay is not None and not replay.summary.unreadable) or failure
            )
    if failure is not None:
        err.print(f"[red]error[/red]: {escape(failure)}")
        fail(EXIT_INVALID)
    assert replay is not None
    summary = replay.summary_json()
    if as_json:
        emit_json(summary)
    else:
        _print_replay(summary)
    _finish_captures(summary, replay.summary.interrupted)


def _finish_captures(summary: dict[str, Any], interrupted: bool) -> None:
    """Names the captures not read whole, then exits 130 on an interrupt and 1 when one was
    not read whole (else returns)."""
    for path in summary["unreadable"]:
        err.print(f"[red]error[/red]: {escape(path)}: could not be read as a capture")
    for path in summary["cut_short"]:
        if path not in summary["unreadable"]:
            err.print(
                f"[red]error[/red]: {escape(path)}: truncated or changed while it was read: the summary "
                "covers the packets read before"
            )
    if interrupted:
        fail(130)
    if summary["unreadable"] or summary["cut_short"]:
        fail(EXIT_INVALID)


def _captures_on_cluster(
    project: Any,
    pcaps: tuple[str, ...],
    options: Any,
    as_json: bool,
    scheduler: str | None,
    workers: int | None,
    out_dir: str | None = None,
) -> None:
    """``replay --pcap`` on a Dask cluster (``pyclassify.dask_capture``): exit as in-process,
    and 8 when the cluster cannot be used (the scheduler unreachable, another version)."""
    from pyclassify import dask_capture, dask_replay
    from pyclassify.capture import CaptureError
    from pyclassify.engine import NativeEngine
    from pyclassify.replay import ReplayError

    engine = NativeEngine(project.policy_set, project.inventory)

    progress = cluster_progress(as_json, "packets")

    try:
        summary, result, info = dask_capture.run(
            engine,
            list(pcaps),
            scheduler=scheduler,
            workers=workers,
            options=options,
            progress=progress,
            out=out_dir,
        )
    except dask_replay.ClusterError as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_CLUSTER)
    except (CaptureError, ReplayError, OSError) as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_INVALID)
    summary["cluster"] = {
        "scheduler": info["scheduler"],
        "workers": info["workers"],
        "tasks": info["tasks"],
        "partitions": info["partitions"],
        "index": info.get("index"),
    }
    if as_json:
        emit_json(summary)
    else:
        _print_replay(summary)
        out.print(
            f"on {info['workers']} Dask worker{'s' if info['workers'] != 1 else ''} of {escape(info['scheduler'])}: "
            f"{info['partitions']} partitions by connection"
        )
    _finish_captures(summary, result.summary.interrupted)


def _file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names, through any link; None if it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _refuse_overwriting_inputs(
    paths: tuple[str, ...], pcaps: tuple[str, ...], outputs: dict[str, str], input_option: str = "--pcap"
) -> None:
    """A usage error, before anything is opened for writing, when an output is an input (the
    same file by device and inode, through any link or spelling) or two outputs are one file;
    ``pcaps``: the inputs given with ``input_option``."""
    if not outputs:
        return  # nothing written: nothing to compare, no directory to walk
    from pathlib import Path

    from pyclassify.loader import manifest_files

    inputs: list[tuple[str, str]] = [(f"{input_option} {p}", p) for p in pcaps if p != "-"]
    for p in paths:
        if p == "-":
            continue
        if Path(p).is_dir():
            inputs.extend((f"manifest {f}", str(f)) for f in manifest_files(Path(p)))
        else:
            inputs.append((f"manifest {p}", p))
    ids: dict[tuple[int, int], str] = {}
    for what, p in inputs:
        fid = _file_id(p)
        if fid is not None:
            ids.setdefault(fid, what)
    seen: dict[object, str] = {}
    for option, p in outputs.items():
        fid = _file_id(p)
        if fid is not None and fid in ids:
            raise click.UsageError(f"{option} {p} is the input {ids[fid]} (the same file): refusing to overwrite it")
        key: object = fid if fid is not None else os.path.realpath(p)
        if key in seen:
            raise click.UsageError(f"{option} {p} and {seen[key]} are the same file")
        seen[key] = f"{option} {p}"


def _by_what(row: dict[str, Any]) -> str:
    """What decided a replay summary's ``by_rule`` row: "by <policy> rule <rule> in tier <tier>"."""
    where = f" in tier {escape(row['tier'])}" if row["tier"] else ""
    if row["reason"] == "rule":
        what = f"{escape(row['policy'])} rule {escape(str(row['rule']))}{where}"
    elif row["reason"] == "end-of-tier":
        what = f"end of tier {escape(row['tier'] or '')}"
    elif row["reason"] == "profile":
        what = f"{escape(row['policy'] or 'profiles')}" + (
            f" rule {escape(str(row['rule']))}" if row["rule"] is not None else ""
        )
    else:
        what = "the default"
    return f"by {what}"


def _print_replay(summary: dict[str, Any]) -> None:
    s = summary
    rate = s["packets_per_second"]
    out.print(
        f"{count(s['packets'], 'packet')} in {count(s['flows'], 'flow')}: [green]{s['allowed']} allowed[/green], "
        f"[red]{s['denied']} denied[/red] {symbol('—', '-')} {rate:,.0f} packets/s"
    )
    # Every packet is in exactly one of these lines, so they add up to the total.
    policy_denied = s["policy"] - s["policy_allowed"]
    width = len(str(s["packets"]))
    out.print(f"  {s['policy']:>{width}} judged by policy ({s['policy_allowed']} allowed, {policy_denied} denied)")
    out.print(
        f"  {s['established']:>{width}} allowed by connection tracking (replies and later packets of allowed connections)"
    )
    out.print(f"  {s['denied_connection']:>{width}} denied with their connection (policy denied its opening packet)")
    out.print(f"  {s['invalid']:>{width}} denied as invalid (belong to no allowed connection)")
    out.print(f"  {s['malformed']:>{width}} denied as malformed (could not be decoded)")
    if s["not_ip"]:
        out.print(
            f"  {s['not_ip']:>{width}} passed as not IP (ARP and other frames no network policy speaks about, "
            "as a firewall passes them)"
        )
    if s["not_judged"]:
        out.print(f"  {s['not_judged']:>{width}} denied as not judged (inside a tunnel that could not be read)")
    if s["pickups"]:
        out.print(
            f"{count(s['pickups'], 'TCP connection')} open before the capture began, picked up mid-stream: "
            "judged as their client opened them (the lower port is the server's)"
        )
    if not s["policy"]:
        out.print("no packet was judged by policy")
    else:
        out.print(
            f"the {count(s['policy'], 'packet')} judged by policy, by what decided each end:"
            if s["policy"] != 1
            else "the packet judged by policy, by what decided each end:"
        )
    for direction in ("egress", "ingress") if s["policy"] else ():
        rows = [row for row in s["by_rule"] if row["direction"] == direction]
        for row in rows:
            colour = "green" if row["verdict"] == "allow" else "red"
            out.print(f"  {row['packets']:>8}  {direction:<7} [{colour}]{row['verdict']:<5}[/{colour}] {_by_what(row)}")
        none = s["no_policy"][direction]
        if none:
            out.print(f"  {none:>8}  {direction:<7} no policy applies at this end")
    http = s.get("http")
    if http is not None:
        # the packets judged by policy that no rule decided alone: the HTTP outcomes
        if http["provisional"]:
            out.print(
                f"  {http['provisional']:>8}  [yellow]admitted provisionally[/yellow]: the connection's HTTP request decides"
            )
        for name, n in http["errors"].items():
            out.print(f"  {n:>8}  [red]deny[/red]  the HTTP request stream cannot be judged ({name})")
        if http["table_full"]:
            out.print(f"  {http['table_full']:>8}  [red]deny[/red]  too many connections await their HTTP request")
        if not http["read"]:
            out.print("http: without connection tracking no request is read: what only an http rule allows is denied")
        held = f"; {count(http['held'], 'segment')} after a gap held back (dropped)" if http["held"] else ""
        out.print(
            f"http: {count(http['provisional'], 'connection')} admitted up to their request; "
            f"{count(http['requests_allowed'] + http['requests_denied'], 'request')} judged "
            f"({http['requests_allowed']} allowed, {http['requests_denied']} denied){held}"
        )
    dns = s.get("dns")
    if dns is not None:
        bad = ", ".join(f"{n} {k}" for k, n in dns["errors"].items())
        denied = (
            f"; {count(dns['denied'], 'answer')} policy denied (or their query) taught nothing" if dns["denied"] else ""
        )
        out.print(
            f"dns: {count(dns['answers'], 'answer')} taught {count(dns['learned'], 'name-address fact')}"
            + (f" ({bad}: learned nothing)" if bad else "")
            + (f"; {dns['evicted']} evicted" if dns["evicted"] else "")
            + denied
        )
    staged = s.get("staged")
    if staged is not None:
        out.print(
            f"staged: with the staged policies enforced, {staged['allowed']} allowed, {staged['denied']} denied: "
            f"{count(staged['would_deny'], 'packet')} allowed now would be denied, "
            f"{staged['would_allow']} denied now would be allowed"
        )
        key = lambda r: (r["direction"], r["tier"], r["policy"], r["rule"], r["verdict"], r["reason"])  # noqa: E731
        now = {key(r): r["packets"] for r in s["by_rule"]}
        for row in staged["by_rule"]:  # the decisions the staged policies change
            if now.get(key(row)) != row["packets"]:
                out.print(f"  {row['packets']:>8}  {row['direction']:<7} would {row['verdict']:<5} {_by_what(row)}")
    tunnels = s["tunnels"]
    if tunnels["decapsulated"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in tunnels["decapsulated"].items())
        out.print(f"tunnels: {kinds} packets judged by the packet inside")
    for kind, errors in tunnels["not_judged"].items():
        why = ", ".join(f"{n} {err}" for err, n in errors.items())
        out.print(f"[yellow]tunnels[/yellow]: {kind} packets not judged: {why}")
    for kind, n in s["decode_errors"].items():
        out.print(f"[yellow]decode[/yellow]: {count(n, 'packet')} {kind}")
    for problem in s["problems"]:
        out.print(f"[yellow]capture[/yellow]: {escape(problem)}")
    if s["interrupted"]:
        out.print("[yellow]interrupted[/yellow]: summary of the packets replayed so far")


def _replay_records(
    paths: tuple[str, ...],
    kube: tuple[str | None, str | None, bool],
    traffic: tuple[str, ...],
    format: str | None,
    out_path: str | None,
    default: str | None,
    as_json: bool,
    follow_symlinks: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    out_dir: str | None = None,
) -> None:
    """``pyclassify replay PATH... --traffic FILE...``: exit 0, 1 when nothing could be read (or
    a file cannot be opened, or is of another format than asked), 130 interrupted. ``--out`` is
    written as replay writes it for captures (``pyclassify.output``): beside its name, put in
    place when the run succeeds, an earlier file left as it was when it fails."""
    from pyclassify.engine import NativeEngine
    from pyclassify.output import OutputFile
    from pyclassify.recordreplay import RecordReplay, print_summary
    from pyclassify.records import RecordError

    project = load_manifests(paths, kube)
    engine = NativeEngine(project.policy_set, project.inventory)
    if scheduler is not None or workers is not None:
        _replay_on_cluster(engine, traffic, format, default, as_json, scheduler, workers, out_dir)
        return
    try:
        out_file = OutputFile("--out", out_path, binary=True, follow_symlinks=follow_symlinks) if out_path else None
    except OSError as e:
        err.print(
            f"[red]error[/red]: --out {escape(out_path or '')}: cannot open for writing: {escape(e.strerror or str(e))}"
        )
        sys.exit(EXIT_INVALID)
    replay = RecordReplay(
        engine, default=default, out=None if out_file is None else out_file.file, format=format, out_name=out_path
    )
    failure = None
    try:
        replay.run(list(traffic))
    except RecordError as e:
        failure = str(e)
    finally:
        if out_file is not None:
            failure = out_file.finish(failure is None and not replay.unreadable) or failure
    if failure is not None:
        err.print(f"[red]error[/red]: {escape(failure)}")
        sys.exit(EXIT_INVALID)
    doc = replay.summary_json()
    if as_json:
        emit_json(doc)
    else:
        print_summary(doc, out, err, escape, symbol("→", "->") if not ascii_only() else "->", symbol("—", "-"))
    if replay.summary.interrupted:
        sys.exit(130)
    if replay.unreadable:
        err.print("[red]error[/red]: no record could be read")
        sys.exit(EXIT_INVALID)


def _replay_on_cluster(
    engine: Any,
    traffic: tuple[str, ...],
    format: str | None,
    default: str | None,
    as_json: bool,
    scheduler: str | None,
    workers: int | None,
    out_dir: str | None = None,
) -> None:
    """``replay --traffic`` on a Dask cluster: exit as in-process (130 interrupted: the summary
    of the files judged whole), and 8 when the cluster cannot be used (the scheduler
    unreachable, workers of another version)."""
    from pyclassify import dask_replay
    from pyclassify.recordreplay import print_summary, summary_json
    from pyclassify.records import RecordError

    progress = cluster_progress(as_json, "records")

    try:
        summary, info = dask_replay.run(
            engine,
            list(traffic),
            scheduler=scheduler,
            workers=workers,
            format=format,
            default=default,
            progress=progress,
            out=out_dir,
        )
    except dask_replay.ClusterError as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_CLUSTER)
    except RecordError as e:
        err.print(f"[red]error[/red]: {escape(str(e))}")
        sys.exit(EXIT_INVALID)
    doc = summary_json(summary, False)
    builds = info["engine_seconds"]
    doc["cluster"] = {
        "scheduler": info["scheduler"],
        "workers": info["workers"],
        "tasks": info["tasks"],
        "engine_seconds": max(builds.values()) if builds else 0.0,
        "index": info.get("index"),
    }
    if as_json:
        emit_json(doc)
    else:
        print_summary(doc, out, err, escape, symbol("→", "->") if not ascii_only() else "->", symbol("—", "-"))
        out.print(
            f"on {info['workers']} Dask worker{'s' if info['workers'] != 1 else ''} of {escape(info['scheduler'])}: "
            f"{info['tasks']} task{'s' if info['tasks'] != 1 else ''}"
        )
    if summary.interrupted:
        sys.exit(130)
    if summary.totals[0] == 0 and any(f.problems for f in summary.files):
        err.print("[red]error[/red]: no record could be read")
        sys.exit(EXIT_INVALID)
