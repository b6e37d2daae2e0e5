"""The ``admit`` and ``admission-webhook`` commands (``pyclassify.admission``).

``pyclassify admit PATH... --resource FILE``: exit 0 when every resource in FILE is admitted,
4 when one is rejected, 1 on invalid input (policies, resources or scans; ``file:line: path:
message`` errors), 2 on usage errors.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import click
from rich.markup import escape

from pyclassify.admission.evaluate import (
    REASON_NO_POLICY,
    REASON_RULE,
    ResourceDecision,
    evaluate,
    resource_from_document,
)
from pyclassify.admission.policy import KIND, format_time, load_admission, parse_time
from pyclassify.admission.scans import ScanResults, load_scans
from pyclassify.cli.common import EXIT_INVALID, EXIT_OK, EXIT_REJECTED, err, fail, out
from pyclassify.counted import count
from pyclassify.documents import Problem, Problems
from pyclassify.kinds import schema
from pyclassify.loader import load_paths


def _print_problems(problems: list[Problem]) -> None:
    for p in problems:
        color = "red" if p.severity == "error" else "yellow"
        err.print(f"[{color}]{p.severity}[/{color}]: {escape(str(p))}")


def _parse_now(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    when = parse_time(value)
    if when is None:
        raise click.BadParameter(f"{value!r} is not an RFC 3339 time (2006-01-02T15:04:05Z)", param_hint="--now")
    return when


def run_admit(
    paths: tuple[str, ...] | list[str],
    resource_path: str,
    scan_paths: tuple[str, ...] | list[str] = (),
    now: dt.datetime | None = None,
    trust_annotations: bool = False,
) -> tuple[list[ResourceDecision], Problems]:
    """Decisions for every pod-creating resource in ``resource_path``; problems instead if any input
    is invalid (then the list is empty)."""
    problems = Problems()
    admission = load_admission(paths, problems)
    scans = load_scans(scan_paths, problems) if scan_paths else ScanResults()
    docs = load_paths([resource_path], problems)
    resources = []
    for doc in docs:
        if schema.check(doc, problems):  # a resource the API server would refuse: reported
            continue
        r = resource_from_document(doc, problems)
        if r is not None:
            resources.append(r)
    if not docs and not problems and not problems.empty_inputs:
        name = "<stdin>" if resource_path == "-" else resource_path
        problems.add(Problem(name, 0, "", "no resource found here"))
    if problems or problems.empty_inputs:
        # A path that held nothing at all (an empty policy directory, an empty --resource):
        # invalid input, exit 1, as for every other command — not "admitted by no policy".
        return [], problems
    when = now or dt.datetime.now(dt.UTC)
    return [evaluate(admission, r, scans, when, trust_annotations) for r in resources], problems


def _print_decision(d: ResourceDecision) -> None:
    r = d.resource
    verdict = "[green]ADMITTED[/green]" if d.allowed else "[red]REJECTED[/red]"
    out.print(f"{escape(r.kind)} {escape(r.namespace)}/{escape(r.name)}: {verdict}")
    if d.selected:
        out.print(f"  selected by: {escape(', '.join(d.selected))}")
    else:
        out.print(f"  no {KIND} selects this resource: every image is admitted")
    for c in d.containers:
        mark = "[green]admit [/green]" if c.allowed else "[red]reject[/red]"
        cont = c.container
        head = f"  {mark} {cont.type} {escape(cont.name)} ({escape(cont.image)})"
        if c.reason == REASON_RULE:
            out.print(f"{head}: {escape(c.policy or '')} rule {c.rule}: {escape(c.rule_text or '')}")
            scan = c.scan_status + (f", last scan {format_time(c.last_scan)}" if c.last_scan else "")
            out.print(f"         because {escape(c.why)} (scan: {escape(scan)})")
        elif c.reason == REASON_NO_POLICY:
            out.print(f"{head}: no policy selects the resource")
        else:
            out.print(f"{head}: no rule of the selecting policies matches (admitted)")
    for w in d.warnings:
        out.print(f"  [yellow]warning[/yellow]: {escape(w)}")


@click.command(
    "admit",
    epilog="""\b
Examples:
  pyclassify admit policies/ --resource pod.yaml
  kubectl get deploy web -o yaml | pyclassify admit policies/ --resource - --json
""",
)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--resource",
    "resource_path",
    required=True,
    type=click.Path(),
    help="Manifest(s) of the Pod or pod-creating resource(s) to judge ('-' for stdin).",
)
@click.option(
    "--scans",
    "scan_paths",
    multiple=True,
    type=click.Path(),
    help="Scan-results file (kind ImageScanResults): image or digest -> status, lastScan. Repeatable.",
)
@click.option(
    "--trust-scan-annotations",
    "trust_annotations",
    is_flag=True,
    help="Also read scan results from the resource's admission.pyclassify.io/image-scans annotation.",
)
@click.option("--now", "now_text", metavar="TIME", help="Judge as of this RFC 3339 time (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def admit_command(
    paths: tuple[str, ...],
    resource_path: str,
    scan_paths: tuple[str, ...],
    trust_annotations: bool,
    now_text: str | None,
    as_json: bool,
) -> None:
    """Decide whether ContainerAdmissionPolicies in PATH... admit the resource(s) in --resource.

    For each container image: the policy and rule that decided, or why none did. Exit 0 when
    admitted, 4 when rejected, 1 on invalid input.
    """
    now = _parse_now(now_text)
    decisions, problems = run_admit(paths, resource_path, scan_paths, now, trust_annotations)
    if problems or problems.empty_inputs:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "valid": False,
                        "errors": [str(p) for p in problems.errors],
                        "warnings": [str(p) for p in problems.warnings],
                    },
                    indent=2,
                )
            )
        _print_problems(list(problems))
        fail(EXIT_INVALID)
    if as_json:
        allowed = all(d.allowed for d in decisions)
        result: dict[str, Any] = {
            "decision": "admit" if allowed else "reject",
            "allowed": allowed,
            "resources": [d.to_json() for d in decisions],
            "warnings": [str(p) for p in problems.warnings],
        }
        click.echo(json.dumps(result, indent=2))
    else:
        _print_problems(problems.warnings)
        for d in decisions:
            _print_decision(d)
    fail(EXIT_OK if all(d.allowed for d in decisions) else EXIT_REJECTED)


@click.command(
    "admission-webhook",
    epilog="""\b
Examples:
  pyclassify admission-webhook policies/ --tls-cert tls.crt --tls-key tls.key
  pyclassify admission-webhook policies/ --listen 127.0.0.1:9443 --tls-cert tls.crt --tls-key tls.key --failure-policy Ignore
  pyclassify admission-webhook --in-cluster --tls-cert /tls/tls.crt --tls-key /tls/tls.key
  pyclassify admission-webhook --in-cluster --tls-self-signed --service pyclassify-system/pyclassify-webhook \
      --tls-secret pyclassify-system/pyclassify-webhook-tls --webhook-configuration pyclassify-webhook
""",
)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "--kubeconfig",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help="A cluster's ContainerAdmissionPolicies and Namespaces as input, beside or instead of PATH.",
)
@click.option("--context", "kube_context", metavar="NAME", default=None, help="Context of --kubeconfig.")
@click.option("--in-cluster", is_flag=True, help="The cluster this runs in (its service account) as input.")
@click.option(
    "--listen", default="0.0.0.0:8443", show_default=True, metavar="HOST:PORT", help="Address to serve HTTPS on."
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM certificate (chain); read again when it changes. Or --tls-self-signed.",
)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key (with --tls-cert).")
@click.option(
    "--tls-self-signed",
    is_flag=True,
    help="Make the serving certificate and its authority here, and rotate them before they expire.",
)
@click.option(
    "--service",
    metavar="NAMESPACE/NAME",
    help="With --tls-self-signed: the Service the API server calls; its DNS names go into the certificate.",
)
@click.option(
    "--tls-san",
    "tls_sans",
    multiple=True,
    metavar="NAME|IP",
    help="With --tls-self-signed: another DNS name or IP address for the certificate. Repeatable.",
)
@click.option(
    "--tls-secret",
    metavar="NAMESPACE/NAME",
    help="With --tls-self-signed: keep the certificates in this Secret (shared by replicas and restarts).",
)
@click.option(
    "--webhook-configuration",
    metavar="NAME",
    help="With --tls-self-signed: the ValidatingWebhookConfiguration whose caBundle is kept current.",
)
@click.option(
    "--tls-rotation-period",
    default="720h",
    show_default=True,
    metavar="DURATION",
    help="With --tls-self-signed: a certificate is replaced after this long (90s, 15m, 720h, 30d); "
    "it is valid twice as long.",
)
@click.option("--scans", "scan_paths", multiple=True, type=click.Path(), help="Scan-results file(s); hot-reloaded too.")
@click.option(
    "--failure-policy",
    type=click.Choice(["Fail", "Ignore"]),
    default="Fail",
    show_default=True,
    help="Answer to an internal error: Fail rejects, Ignore admits (with a warning).",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1024),
    default=3 * 1024 * 1024,
    show_default=True,
    help="Largest AdmissionReview body accepted, in bytes.",
)
@click.option(
    "--reload-interval",
    type=click.FloatRange(min=0.05, max=60.0),
    default=2.0,
    show_default=True,
    help="Seconds between checks of the policy files and the certificate and key for changes (mtime "
    "polling); a new certificate serves the connections made after it.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Threads deciding reviews (connections wait in one event loop, not in threads).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 65536),
    default=256,
    show_default=True,
    help="Connections open at once; past it the longest idle is closed to make room.",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0.5, max=300.0),
    default=30.0,
    show_default=True,
    help="Seconds a request may take from its first byte to its answer (the API server waits 10 s by "
    "default, 30 s at most); a TLS handshake, the same.",
)
@click.option(
    "--trust-scan-annotations",
    "trust_annotations",
    is_flag=True,
    help="Also read scan results from the resource's admission.pyclassify.io/image-scans annotation.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
def admission_webhook_command(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    kube_context: str | None,
    in_cluster: bool,
    listen: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_self_signed: bool,
    service: str | None,
    tls_sans: tuple[str, ...],
    tls_secret: str | None,
    webhook_configuration: str | None,
    tls_rotation_period: str,
    scan_paths: tuple[str, ...],
    failure_policy: str,
    max_body: int,
    reload_interval: float,
    workers: int,
    max_connections: int,
    request_timeout: float,
    trust_annotations: bool,
    log_level: str,
) -> None:
    """Serve a Kubernetes validating admission webhook (AdmissionReview v1 over HTTPS) that
    decides pod-creating resources with the ContainerAdmissionPolicies in PATH....

    POST /validate (or /) for reviews, GET /healthz, GET /metrics. Policy and scan files are
    polled for changes and reloaded; an invalid change is refused and the last good policy stays.
    With --kubeconfig/--in-cluster the cluster's ContainerAdmissionPolicies (and its Namespaces)
    are polled too, at the same interval; an unreachable API server keeps the last good policy.

    The serving certificate: --tls-cert/--tls-key (a mounted Secret, e.g. cert-manager's), or
    --tls-self-signed: made here for the --service's DNS names and --tls-san, kept in --tls-secret,
    its authority put into the caBundle of --webhook-configuration, rotated every
    --tls-rotation-period while serving.
    """
    from pyclassify.admission.certs import CertificateError, SelfSignedCertificates, parse_duration, service_names
    from pyclassify.admission.webhook import AdmissionWebhook, parse_listen
    from pyclassify.documents import InvalidInput

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        address = parse_listen(listen)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from e
    if tls_self_signed:
        if tls_cert or tls_key:
            raise click.UsageError(
                "--tls-self-signed makes the certificate: give it or --tls-cert/--tls-key, not both."
            )
        if not service and not tls_sans:
            raise click.UsageError("--tls-self-signed needs --service or --tls-san: the names to certify.")
    else:
        if not (tls_cert and tls_key):
            raise click.UsageError("Missing option '--tls-cert' and '--tls-key' (or --tls-self-signed).")
        for name, value in (("--service", service), ("--tls-san", tls_sans), ("--tls-secret", tls_secret)):
            if value:
                raise click.UsageError(f"{name} goes with --tls-self-signed.")
        if webhook_configuration:
            raise click.UsageError("--webhook-configuration goes with --tls-self-signed.")
    try:
        rotation_period = parse_duration(tls_rotation_period)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--tls-rotation-period") from e
    names = list(service_names(*_namespaced(service, "--service"))) if service else []
    names += [n for n in tls_sans if n not in names]
    secret = _namespaced(tls_secret, "--tls-secret") if tls_secret else None
    cluster = None
    client = None
    if kubeconfig or kube_context or in_cluster:
        from pyclassify.kube import load_client
        from pyclassify.kube.admission import ClusterAdmissionInput

        try:
            client = load_client(kubeconfig, kube_context, True if in_cluster else None)
            cluster = ClusterAdmissionInput(client)
        except Exception as e:  # noqa: BLE001 - a bad kubeconfig: say so
            raise click.UsageError(f"cannot read the cluster: {e}") from e
    elif not paths:
        raise click.UsageError("Missing argument 'PATHS...' (or --kubeconfig / --in-cluster).")
    if (secret or webhook_configuration) and client is None:
        raise click.UsageError("--tls-secret and --webhook-configuration need --kubeconfig or --in-cluster.")
    certificates = None
    if tls_self_signed:
        certificates = SelfSignedCertificates(
            names,
            rotation_period=rotation_period,
            client=client,
            secret=secret,
            webhook_configuration=webhook_configuration,
        )
    try:
        webhook = AdmissionWebhook(
            paths,
            tls_cert=tls_cert,
            tls_key=tls_key,
            certificates=certificates,
            listen=address,
            scan_paths=scan_paths,
            failure_policy=failure_policy,
            max_body=max_body,
            reload_interval=reload_interval,
            trust_annotations=trust_annotations,
            cluster=cluster,
            workers=workers,
            max_connections=max_connections,
            request_timeout=request_timeout,
        )
    except InvalidInput as e:
        _print_problems(e.problems)
        fail(EXIT_INVALID)
    except (OSError, ValueError, CertificateError) as e:
        # ssl.SSLError is an OSError: a bad certificate or key, a busy port; a Secret or a webhook
        # configuration the webhook cannot write
        err.print(f"[red]error[/red]: {escape(str(e))}")
        fail(EXIT_INVALID)
    except Exception as e:  # noqa: BLE001 - the cluster cannot be read at the start: nothing to decide with
        if cluster is None:
            raise
        err.print(f"[red]error[/red]: cannot read the cluster: {escape(str(e))}")
        fail(EXIT_INVALID)
    host, port = webhook.address
    err.print(
        f"admission webhook on https://{host}:{port}/validate: "
        f"{count(len(webhook.snapshot.admission.policies), 'policy')}, failure policy {failure_policy}"
    )
    try:
        webhook.serve_forever()
    except KeyboardInterrupt:
        pass


def _namespaced(text: str, option: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise click.BadParameter(f"{text!r} is not NAMESPACE/NAME", param_hint=option)
    return namespace, name
