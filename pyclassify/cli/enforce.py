"""The ``enforce`` command: the daemon (``pyclassify.enforce``) started from its options, and
``--uninstall``."""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

FAIL_HELP = """\b
Fail mode (--fail, closed by default) decides what the kernel does when pyclassify cannot:
  closed: no --queue-bypass (no listener: queued packets are dropped), a full queue drops,
          malformed packets and engine errors are dropped.
  open:   --queue-bypass (no listener: packets pass), NFQA_CFG_F_FAIL_OPEN (a full queue
          accepts), malformed packets and engine errors are accepted.
The rules stay when the daemon stops (SIGINT/SIGTERM; --on-stop remove: they go) or is
killed, and the next start adopts them (replaced in one transaction, never removed first);
meanwhile, failing closed, new connections are dropped (established ones keep flowing, they
are accepted before the queue), failing open they pass, and the next start judges them. The
node's own traffic (failsafe ports, the API server, DNS, the daemon's own sockets) passes
ahead of the queue either way. `pyclassify enforce --uninstall` removes every rule.

\b
Examples:
  sudo pyclassify enforce policies/ --queue 0 --metrics 127.0.0.1:9100
  sudo pyclassify enforce policies/ --bridge eth1,eth2 --fail open"""


def _metrics_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--metrics`` is HOST:PORT (``:PORT`` or ``PORT``: the loopback; ``[::1]:PORT``;
    ``0.0.0.0:PORT`` every address), checked before anything loads."""
    if value is None:
        return None
    if value.isdigit():
        value = f":{value}"
    _, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT with a port from 1 to 65535, got {value[:80]!r}")
    return value


def _memory_budget(ctx: click.Context, param: click.Parameter, value: str) -> int | str | None:
    """``--memory-budget``: ``auto``, ``none`` or a size (``512Mi``, ``1G``, bytes)."""
    if value == "auto":
        return value
    from pyclassify.budget import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _interface_prefix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An interface name prefix iptables takes (``PREFIX+``): 1-14 characters, no space or '/'."""
    if not 0 < len(value) < 15 or any(c.isspace() or c in "/+!" for c in value):
        raise click.BadParameter(f"expected an interface name prefix of 1-14 characters, got {value[:80]!r}")
    return value


def run_enforce(
    paths: list[str],
    queues: str,
    fail: str = "closed",
    default: str | None = None,
    metrics: str | None = None,
    batch: int = 64,
    copy_range: int = 128,
    maxlen: int = 4096,
    hooks: str = "forward,input,output",
    no_batch_verdicts: bool = False,
    log_allowed: bool = False,
    ipv6: bool = True,
    duration: float | None = None,
    log_stream: Any = None,
    log_flows: bool = True,
    bridge: str | None = None,
    kube: tuple[str | None, str | None, bool | None] | None = None,
    node: str | None = None,
    resync: float = 10.0,
    conntrack_max: int = 262144,
    deny_action: str = "drop",
    workload_interface_prefix: str = "cali",
    on_stop: str = "keep",
    memory_budget: int | str | None = "auto",
    metrics_rule_labels: bool = True,
) -> int:
    """Run the daemon until SIGINT/SIGTERM (or ``duration`` seconds); returns the exit code."""
    from pyclassify.enforce.config import EnforceConfig
    from pyclassify.enforce.daemon import Enforcer, parse_queues
    from pyclassify.enforce.errors import EXIT_PREREQUISITE, EnforceError

    try:
        first, last = parse_queues(queues) if bridge is None else (0, 0)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--queue/--queues") from None
    config = EnforceConfig(
        paths=list(paths),
        queues=(first, last),
        fail_open=fail == "open",
        default=default,
        metrics=metrics,
        log_stream=log_stream if log_stream is not None else sys.stdout,
        log_allowed=log_allowed,
        log_flows=log_flows,
        batch=batch,
        copy_range=copy_range,
        maxlen=maxlen,
        batch_verdicts=not no_batch_verdicts,
        hooks=tuple(h.strip() for h in hooks.split(",") if h.strip()),
        ipv6=ipv6,
        bridge=bridge,
        kube=kube,
        node=node,
        resync=resync,
        conntrack_entries=conntrack_max,
        reject=deny_action == "reject",
        workload_interface_prefix=workload_interface_prefix,
        on_stop=on_stop,
        memory_budget=memory_budget,
        metrics_rule_labels=metrics_rule_labels,
    )
    enforcer = Enforcer(config)

    def on_signal(signum: int, frame: Any) -> None:
        enforcer.request_stop()

    # before the start: a signal during it (right after its start line too) stops cleanly
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            enforcer.start()
        except EnforceError as e:
            click.echo(f"error: {e}", err=True)
            return e.code
        except PermissionError as e:
            click.echo(f"error: {e} (enforce needs root / CAP_NET_ADMIN)", err=True)
            return EXIT_PREREQUISITE
        try:
            enforcer.wait(duration)
        finally:
            enforcer.stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0


def run_uninstall(ipv6: bool = True, log_stream: Any = None) -> int:
    """``enforce --uninstall``: every rule of ours removed; returns the exit code."""
    from pyclassify.enforce.errors import EXIT_PREREQUISITE
    from pyclassify.enforce.iptables import IptablesError, uninstall
    from pyclassify.enforce.log import FlowLog

    try:
        removed, running = uninstall(ipv6)
    except IptablesError as e:
        click.echo(f"error: cannot remove the iptables rules: {e}", err=True)
        return EXIT_PREREQUISITE
    # running: a daemon still listens on the queues; it leaves the rules out and is not ready
    FlowLog(log_stream if log_stream is not None else sys.stdout).emit(
        "uninstall", removed=removed, daemon_running=running
    )
    return 0


@click.command("enforce", epilog=FAIL_HELP)
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option(
    "--kubeconfig",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="Follow this cluster (list, then watch) instead of PATH.",
)
@click.option("--context", "kube_context", metavar="NAME", default=None, help="Context of --kubeconfig.")
@click.option("--in-cluster", is_flag=True, help="Follow the cluster this runs in (its service account).")
@click.option(
    "--node",
    "node",
    metavar="NAME",
    envvar="NODE_NAME",
    show_envvar=True,
    default=None,
    help="Enforce for this node's pods and host endpoints only (default: every endpoint's policy); "
    "selectors still see the whole cluster. The DaemonSet sets NODE_NAME.",
)
@click.option("--queue", "queue", type=click.IntRange(0, 65535), default=None, help="NFQUEUE number to bind.")
@click.option(
    "--queues",
    "queues",
    default=None,
    metavar="N-M",
    help="Several queues (iptables --queue-balance N:M), one worker thread each.",
)
@click.option(
    "--fail",
    "fail",
    type=click.Choice(["closed", "open"]),
    default="closed",
    show_default=True,
    help="What the kernel does when pyclassify cannot judge (see below).",
)
@click.option(
    "--default",
    "default",
    type=click.Choice(["allow", "deny"]),
    default=None,
    help="Verdict when no policy decides (default: allow for pods, deny for host endpoints).",
)
@click.option(
    "--metrics",
    "metrics",
    default=None,
    metavar="HOST:PORT",
    callback=_metrics_address,
    help="Serve Prometheus metrics, /readyz and /healthz here. PORT alone (or :PORT): on the loopback; "
    "give an address (0.0.0.0:PORT, the node's IP) for a scraper elsewhere. At most 64 connections, "
    "2 worker threads, 5 s per request.",
)
@click.option(
    "--metrics-rule-labels/--no-metrics-rule-labels",
    "metrics_rule_labels",
    default=True,
    show_default=True,
    help="Label verdict counters with tier, policy and rule (off: direction and action only, so a "
    "scraper reads no policy names).",
)
@click.option(
    "--hooks",
    "hooks",
    default="forward,input,output",
    show_default=True,
    help="Built-in chains to hook: forward (routed pod traffic), input/output (host endpoints).",
)
@click.option(
    "--batch",
    "batch",
    type=click.IntRange(1, 1024),
    default=64,
    show_default=True,
    help="Packets per receive/judge/verdict batch.",
)
@click.option(
    "--copy-range",
    "copy_range",
    type=click.IntRange(40, 65535),
    default=128,
    show_default=True,
    help="Bytes of each packet copied to userspace (headers only).",
)
@click.option(
    "--queue-maxlen",
    "maxlen",
    type=click.IntRange(1, 1 << 20),
    default=4096,
    show_default=True,
    help="Kernel queue length.",
)
@click.option("--no-batch-verdicts", is_flag=True, help="One verdict message per packet (no NFQNL_MSG_VERDICT_BATCH).")
@click.option("--log-allowed", is_flag=True, help="Also log allowed new connections (JSON lines on stdout).")
@click.option("--no-log", is_flag=True, help="No per-flow JSON lines (daemon events and metrics stay).")
@click.option("--no-ipv6", is_flag=True, help="Do not install ip6tables rules.")
@click.option(
    "--bridge",
    "bridge",
    default=None,
    metavar="IF1,IF2",
    help="Instead of NFQUEUE: an AF_PACKET inline bridge between two interfaces (own conntrack).",
)
@click.option(
    "--resync-interval",
    "resync",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="How often the iptables rules are checked and put back if someone changed them.",
)
@click.option(
    "--conntrack-max",
    "conntrack_max",
    type=click.IntRange(1, 1 << 26),
    default=262144,
    show_default=True,
    metavar="N",
    help="--bridge: cap of the engine's own connection tracker, as nf_conntrack_max (at the "
    "cap the oldest unassured entry is dropped early, counted). With --queue the kernel's "
    "conntrack is the table.",
)
@click.option(
    "--deny-action",
    "deny_action",
    type=click.Choice(["drop", "reject"]),
    default="drop",
    show_default=True,
    help="What a packet policy denies gets: dropped, or rejected (a TCP reset, else an ICMP port "
    "unreachable), as Felix's IptablesFilterDenyAction=REJECT. The bridge answers out of the side "
    "the packet came from, at most 10,000 a second.",
)
@click.option(
    "--workload-interface-prefix",
    "workload_interface_prefix",
    default="cali",
    show_default=True,
    metavar="PREFIX",
    callback=_interface_prefix,
    help="Interfaces whose name begins so are workloads' (Felix's InterfacePrefix): an all-interfaces "
    "host endpoint (interfaceName '*') judges routed traffic by every other interface.",
)
@click.option(
    "--on-stop",
    "on_stop",
    type=click.Choice(["keep", "remove"]),
    default="keep",
    show_default=True,
    help="What a stop (SIGINT/SIGTERM) does to the iptables rules: keep them for the next daemon to "
    "adopt (--fail decides what new connections meet meanwhile), or remove them.",
)
@click.option(
    "--uninstall",
    is_flag=True,
    help="Remove every PYCLASSIFY-* chain and jump (iptables, and ip6tables unless --no-ipv6), then exit; "
    "a daemon still running leaves them out (a preStop or pre-delete hook).",
)
@click.option(
    "--memory-budget",
    "memory_budget",
    default="auto",
    show_default=True,
    metavar="SIZE",
    callback=_memory_budget,
    help="Memory a policy set may take once built (512Mi, 1G, bytes, or none). A set (or, from the cluster, "
    "an object) that would pass it is rejected before it is built, and the policy in force stays. auto: "
    "half of what the container's memory limit (or the machine's memory) leaves after 96 MiB.",
)
@click.option("--duration", type=float, default=None, help="Stop after this many seconds (tests, benchmarks).")
def enforce_command(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    kube_context: str | None,
    in_cluster: bool,
    node: str | None,
    queue: int | None,
    queues: str | None,
    fail: str,
    default: str | None,
    metrics: str | None,
    hooks: str,
    batch: int,
    copy_range: int,
    maxlen: int,
    no_batch_verdicts: bool,
    log_allowed: bool,
    no_log: bool,
    no_ipv6: bool,
    bridge: str | None,
    resync: float,
    conntrack_max: int,
    deny_action: str,
    workload_interface_prefix: str,
    on_stop: str,
    uninstall: bool,
    memory_budget: int | str | None,
    metrics_rule_labels: bool,
    duration: float | None,
) -> None:
    """Enforce the policy on this node's packets, live (NFQUEUE, or --bridge IF1,IF2).

    Needs root (or CAP_NET_ADMIN; CAP_NET_RAW too for --bridge). With --queue/--queues it
    installs PYCLASSIFY-* chains in the filter table of iptables and, unless --no-ipv6, of
    ip6tables too (kept on a stop for the next daemon, removed by --uninstall), hooking FORWARD
    (routed pod traffic) and INPUT/OUTPUT (host endpoints) that send new connections
    (ESTABLISHED/RELATED pass in the kernel) to NFQUEUE;
    judges them natively in batches; watches PATH (inotify) and swaps in a new policy when it
    changes and is valid (an invalid update is rejected whole and logged; the running policy
    stays); connections the new policy denies have their conntrack entries deleted so they are
    judged again and cut. Denies and Log rule hits are printed as JSON lines, once per flow.

    --bridge IF1,IF2 installs no iptables rules: it puts both interfaces in promiscuous mode
    (for as long as it runs) and forwards between them the frames policy allows.
    """
    kube = (
        (kubeconfig, kube_context, True if in_cluster else None) if kubeconfig or kube_context or in_cluster else None
    )
    if uninstall:
        if paths or kube is not None or queue is not None or queues is not None or bridge is not None:
            raise click.UsageError("--uninstall takes no PATH, cluster, --queue(s) or --bridge: it removes every rule")
        sys.exit(run_uninstall(not no_ipv6))
    if kube is None and not paths:
        raise click.UsageError("Missing argument 'PATHS...' (or --kubeconfig / --in-cluster).")
    if kube is not None and paths:
        raise click.UsageError("give PATH or --kubeconfig/--in-cluster, not both")
    given = [name for name, v in (("--queue", queue), ("--queues", queues), ("--bridge", bridge)) if v is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --queue N, --queues N-M or --bridge IF1,IF2")
    if bridge is not None:
        from pyclassify.bridge import parse_bridge_spec

        try:
            parse_bridge_spec(bridge)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--bridge") from None
    spec = queues if queues is not None else str(queue) if queue is not None else ""
    code = run_enforce(
        list(paths),
        spec,
        fail,
        default,
        metrics,
        batch,
        copy_range,
        maxlen,
        hooks,
        no_batch_verdicts,
        log_allowed,
        not no_ipv6,
        duration,
        log_flows=not no_log,
        bridge=bridge,
        kube=kube,
        node=node or None,
        resync=resync,
        conntrack_max=conntrack_max,
        deny_action=deny_action,
        workload_interface_prefix=workload_interface_prefix,
        on_stop=on_stop,
        memory_budget=memory_budget,
        metrics_rule_labels=metrics_rule_labels,
    )
    sys.exit(code)
