"""The ``render`` command: the compiled rule tables of one endpoint (``pyclassify.render``)."""

from __future__ import annotations

import click

from pyclassify.cli.common import cluster_paths_argument, kube_options, load_manifests, utf8_text
from pyclassify.render import NoSuchEndpoint, render_lines


@click.command(
    "render",
    epilog="""\b
Examples:
  pyclassify render examples/demo --endpoint backend/db
  pyclassify render examples/demo --endpoint 10.0.1.10 --json
  pyclassify render --kubeconfig ~/.kube/config --endpoint backend/db
""",
)
@cluster_paths_argument
@kube_options
@click.option(
    "--endpoint",
    "endpoint",
    required=True,
    metavar="NS/POD",
    callback=utf8_text,
    help="The endpoint: ns/pod, workload, host endpoint or IP.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def render_command(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    in_cluster: bool,
    kube_context: str | None,
    endpoint: str,
    as_json: bool,
) -> None:
    """Print the compiled rule tables of one endpoint as 6-tuples (src, sport, dst, dport,
    protocol, action), egress and ingress, per tier, in evaluation order.

    PATH (files, directories, - for stdin) and/or a cluster (--kubeconfig, --in-cluster) are
    the input; invalid manifests print every error and exit 1."""
    project = load_manifests(paths, (kubeconfig, kube_context, in_cluster))
    lines = render_lines(paths, endpoint, as_json, project)
    try:
        first = next(lines)  # a missing endpoint is said before anything is printed
    except NoSuchEndpoint as e:
        raise click.BadParameter(str(e), param_hint="--endpoint") from None
    click.echo(first, nl=False)
    for line in lines:
        click.echo("" if as_json else "\n", nl=False)
        click.echo(line, nl=False)
    click.echo()
