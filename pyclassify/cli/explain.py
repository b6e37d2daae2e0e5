"""The ``explain`` command: the verdict of one flow between two endpoints, and the rule of each
side that decided it."""

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
    protocol_number,
    utf8_text,
)
from pyclassify.counted import count


def _describe(d: Any) -> str:
    """One line saying what decided one direction."""
    if d is None:
        return "[dim]no policy applies[/dim]"
    if d.awaits_request:
        return _describe_decision(d) + " [yellow]unless the HTTP request matches an http rule before it[/yellow]"
    return _describe_decision(d)


def _describe_decision(d: Any) -> str:
    colour = "green" if d.verdict == "allow" else "red"
    verdict = f"[{colour}]{d.verdict}[/{colour}]"
    tier = f" in tier {escape(d.tier)}" if d.tier else ""
    if d.reason == "rule":
        return f"{verdict} by {escape(d.policy or '')} rule {escape(str(d.rule))}{tier}"
    if d.reason == "end-of-tier":
        return f"{verdict} at the end of tier {escape(d.tier or '')} ({escape(d.isolation())})"
    if d.reason == "profile":
        what = f"by {escape(d.policy)} rule {escape(str(d.rule))}" if d.policy else "by its profiles (no rule matched)"
        return f"{verdict} {what}"
    return f"{verdict} by the default (every applicable tier passed)"


ENDPOINT_HELP = (
    "a pod as ns/pod, a workload as ns/Kind/name (or ns/name), a host endpoint's name, "
    "or an IP address (an address no endpoint owns is outside the cluster)"
)


@click.command(
    "explain",
    epilog="""\b
Examples:
  pyclassify explain examples/demo --from frontend/web --to backend/api --proto TCP --port 8080
  pyclassify explain examples/demo --from 203.0.113.7 --to frontend/Deployment/web --port 80 --json
  pyclassify explain examples/demo --from frontend/web --to 10.0.2.20 --proto ICMP --icmp-type 8
""",
)
@cluster_paths_argument
@kube_options
@click.option("--from", "src", required=True, metavar="A", callback=utf8_text, help=f"Source: {ENDPOINT_HELP}.")
@click.option("--to", "dst", required=True, metavar="B", callback=utf8_text, help=f"Destination: {ENDPOINT_HELP}.")
@click.option(
    "--proto",
    "proto",
    default="TCP",
    show_default=True,
    help="Protocol: TCP, UDP, SCTP, ICMP, ICMPv6 or a number 0-255.",
)
@click.option(
    "--port",
    "port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Destination port (TCP, UDP, SCTP). Left out: a flow without a port, which rules "
    "that name ports do not match.",
)
@click.option("--sport", "sport", type=click.IntRange(0, 65535), default=None, help="Source port (TCP, UDP, SCTP).")
@click.option(
    "--icmp-type",
    type=click.IntRange(0, 255),
    default=None,
    help="ICMP/ICMPv6 type (with --proto ICMP or ICMPv6), e.g. 8 for an echo request.",
)
@click.option(
    "--icmp-code",
    type=click.IntRange(0, 255),
    default=None,
    help="ICMP/ICMPv6 code (with --proto ICMP or ICMPv6 and --icmp-type).",
)
@click.option(
    "--service-backend",
    "service_backend",
    metavar="ADDR|NS/POD",
    callback=utf8_text,
    default=None,
    help="With --to a Service's ClusterIP (or a node address and NodePort): judge only this backend.",
)
@click.option(
    "--resolve",
    "resolve",
    metavar="NAME=IP,...",
    callback=utf8_text,
    default=None,
    help="DNS answers to judge domains/domainNames rules by (as if learned from DNS).",
)
@click.option(
    "--pre-dnat",
    "pre_dnat",
    metavar="ADDR[:PORT]",
    callback=utf8_text,
    default=None,
    help="Where the flow to a host endpoint was going before a DNAT on the host (preDNAT "
    "policy judges that; the rest judge --to and --port).",
)
@click.option(
    "--in-via",
    "in_via",
    metavar="HOST_ENDPOINT",
    callback=utf8_text,
    default=None,
    help="The host routes the flow in by this host endpoint's interface: its applyOnForward "
    "(and doNotTrack, preDNAT) policy judges it too.",
)
@click.option(
    "--out-via",
    "out_via",
    metavar="HOST_ENDPOINT",
    callback=utf8_text,
    default=None,
    help="The host routes the flow out by this host endpoint's interface (as --in-via).",
)
@click.option(
    "--request",
    "request",
    metavar="'METHOD /PATH'",
    callback=utf8_text,
    default=None,
    help="The HTTP request the TCP connection carries, for Calico http rules (e.g. 'GET "
    "/api/v1'). Left out: a verdict that depends on the request says so.",
)
@default_option
@engine_option
@json_option
def explain_cmd(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    src: str,
    dst: str,
    proto: str,
    port: int | None,
    sport: int | None,
    icmp_type: int | None,
    icmp_code: int | None,
    service_backend: str | None,
    resolve: str | None,
    pre_dnat: str | None,
    in_via: str | None,
    out_via: str | None,
    request: str | None,
    default: str | None,
    engine: str,
    as_json: bool,
) -> None:
    """Verdict for one flow, with the deciding tier, policy and rule of each direction.

    A flow to a Service's ClusterIP, or to a node's address on a NodePort, is judged as
    kube-proxy delivers it: once per backend (the Service's EndpointSlices, or the pods its
    selector picks), to the backend's target port; it is allowed when every backend is
    (--service-backend picks one)."""
    from pyclassify.analysis import UnknownEnd, explain
    from pyclassify.flow import HttpRequest

    protocol = protocol_number(proto)
    _check_flow_options(protocol, port, sport, icmp_type, icmp_code)
    http_request = None
    if request is not None:
        if protocol != 6:
            raise click.UsageError(f"--request needs --proto TCP, not {_proto_text(protocol)}")
        try:
            http_request = HttpRequest.parse(request)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--request") from e
    project = load_manifests(paths, (kubeconfig, kube_context, in_cluster))
    if resolve is not None:
        from pyclassify import domains

        try:
            answers = domains.resolve_option(resolve)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--resolve") from e
        project.inventory.domains = domains.new_facts()
        for name, ip in answers:
            project.inventory.domains.learn(name, ip, 0, 0)  # judged with no time: valid whenever
    try:
        from pyclassify.ir import Direction

        via = tuple((d, name) for d, name in ((Direction.INGRESS, in_via), (Direction.EGRESS, out_via)) if name)
        result = explain(
            project,
            src,
            dst,
            protocol,
            port,
            sport,
            icmp_type,
            icmp_code,
            default,
            engine,
            service_backend,
            pre_dnat,
            http_request,
            via,
        )
    except UnknownEnd as e:
        raise click.BadParameter(str(e), param_hint=e.option) from e
    if as_json:
        emit_json(result.to_json())
        return
    if not result.families:
        _print_explanation(result, protocol, icmp_type, icmp_code)
        return
    # Two dual-stack endpoints: each family judged, then the verdict of both.
    for r in result.families:
        out.print(f"[bold]IPv{r.family}[/bold]")
        _print_explanation(r, protocol, icmp_type, icmp_code)
    colour = "green" if result.verdict.allowed else "red"
    each = ", ".join(f"IPv{r.family} {r.verdict.verdict}" for r in result.families)
    out.print(
        f"verdict: [{colour}]{result.verdict.verdict.upper()}[/{colour}] in every family ({each})"
        if result.verdict.allowed or all(not r.verdict.allowed for r in result.families)
        else f"verdict: [{colour}]{result.verdict.verdict.upper()}[/{colour}] ({each}: the families differ)"
    )


def _print_explanation(result: Any, protocol: int, icmp_type: int | None, icmp_code: int | None) -> None:
    """One flow's explanation as ``explain`` prints it: the flow, each side, the host's hooks,
    the Service's backends, the verdict."""
    from pyclassify.analysis import end_json
    from pyclassify.kinds.common import protocol_name

    f = result.flow
    ends = [end_json(f.src), end_json(f.dst)]
    names = [escape(e["endpoint"] or "outside") + f" ({e['ip'] or 'no IP'})" for e in ends]
    port_text = f"/{f.dport}" if f.dport is not None else ""
    if result.service is not None:
        svc = result.service.service
        names[1] = f"Service {escape(svc.namespace)}/{escape(svc.name)} ({ends[1]['ip']})"
    if icmp_type is not None:
        port_text = f" type {icmp_type}" + (f" code {icmp_code}" if icmp_code is not None else "")
    request_text = f", request {escape(str(f.request))}" if f.request is not None else ""
    out.print(f"flow:    {names[0]} -> {names[1]} {escape(protocol_name(protocol))}{port_text}{request_text}")
    if result.service is None:
        _print_sides(names[0], names[1], result.verdict)
        for step in result.host_path.steps if result.host_path is not None else ():
            if step.outcome == "continue":
                what = "no policy applies" if step.decision is None else "no rule decided"
                out.print(f"  hook {step.hook.value}: [dim]{what}: goes on[/dim]")
            else:
                out.print(f"  hook {step.hook.value}: {_describe(step.decision)}")
        for direction, name, path in result.forward:
            way = "in by" if direction.value == "ingress" else "out by"
            out.print(f"routed {way} host endpoint {escape(name)}: {path.verdict}")
            for step in path.steps:
                what = (
                    _describe(step.decision)
                    if step.outcome != "continue"
                    else "[dim]no policy applies: goes on[/dim]"
                    if step.decision is None
                    else "[dim]no rule decided: goes on[/dim]"
                )
                out.print(f"  hook {step.hook.value}: {what}")
    else:
        svc = result.service.service
        out.print(
            f"service: {escape(svc.namespace)}/{escape(svc.name)} by its {result.service.via}: "
            f"{count(len(result.backends or []), 'backend')} judged as kube-proxy delivers the flow"
        )
        for b in result.backends or []:
            end = end_json(b.flow.dst)
            name = escape(end["endpoint"] or "outside") + f" ({end['ip']})"
            colour = "green" if b.verdict.allowed else "red"
            out.print(
                f"backend: {name} {escape(protocol_name(protocol))}/{b.flow.dport}: "
                f"[{colour}]{b.verdict.verdict.upper()}[/{colour}]"
            )
            _print_sides(names[0], name, b.verdict, indent="  ")
        if result.note:
            out.print(f"note:    {escape(result.note)}")
    colour = "green" if result.verdict.allowed else "red"
    every = ""
    if result.backends is not None and len(result.backends) > 1:
        denied = sum(not b.verdict.allowed for b in result.backends)
        every = " (every backend)" if not denied else f" ({denied} of {count(len(result.backends), 'backend')})"
    out.print(f"verdict: [{colour}]{result.verdict.verdict.upper()}[/{colour}]{every}")
    if result.verdict.awaits_request:
        out.print(
            "http:    the connection is admitted provisionally: its HTTP request decides (an http "
            "rule matched all but the request; pass --request 'METHOD /PATH' to judge one)"
        )
    if result.staged is not None:
        changed = " (differs)" if result.staged.verdict != result.verdict.verdict else ""
        out.print(f"staged:  {escape(result.staged.would())}{changed}")


def _print_sides(src_name: str, dst_name: str, verdict: Any, indent: str = "") -> None:
    sides = (("egress ", src_name, verdict.egress), ("ingress", dst_name, verdict.ingress))
    for direction, name, decision in sides:
        out.print(f"{indent}{direction}: {name}: {_describe(decision)}")
        for tier, policy, rule in decision.logs if decision else []:
            out.print(
                f"{indent}         logged by {escape(policy)} rule {escape(str(rule))}"
                + (f" in tier {tier}" if tier else "")
            )


def _proto_text(protocol: int) -> str:
    from pyclassify.kinds.common import protocol_name

    return protocol_name(protocol)


def _check_flow_options(
    protocol: int, port: int | None, sport: int | None, icmp_type: int | None, icmp_code: int | None
) -> None:
    """Options that the protocol has no field for are usage errors, not silently ignored."""
    from pyclassify.kinds.common import ICMP_PROTOCOLS, PORT_PROTOCOLS

    if protocol not in PORT_PROTOCOLS:
        for name, value in (("--port", port), ("--sport", sport)):
            if value is not None:
                raise click.UsageError(
                    f"{name} needs a protocol with ports (TCP, UDP, SCTP or UDPLite), not {_proto_text(protocol)}"
                )
    if protocol not in ICMP_PROTOCOLS:
        for name, value in (("--icmp-type", icmp_type), ("--icmp-code", icmp_code)):
            if value is not None:
                raise click.UsageError(f"{name} needs --proto ICMP or ICMPv6, not {_proto_text(protocol)}")
    if icmp_code is not None and icmp_type is None:
        raise click.UsageError("--icmp-code needs --icmp-type")
