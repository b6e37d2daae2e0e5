"""The ``pyclassify`` command line: ``main`` and its commands, one module each, loaded when
used; what they share (exit codes, consoles, options, loading) is ``pyclassify.cli.common``.

Exit codes (``main``'s help lists them all): 0 success (or a match), 1 invalid input, 2 usage
error, 3 no match (``selector``), 4 rejected (``admit``), 5 changes (``diff``), 6 and 7
(``enforce``: a missing prerequisite, something in use or absent), 8 the Dask cluster cannot be
used (``replay --scheduler``), 130 interrupted.
"""

from __future__ import annotations

from typing import Any

import click

from pyclassify.cli.common import (
    EXIT_INVALID,
    WRITE_ERRNOS,
    one_shot_budget,
    silence_stdout,
    tolerate_narrow_encodings,
)


class LazyGroup(click.Group):
    """Commands whose modules load only when used, so `pyclassify --version` stays quick."""

    lazy: dict[str, str] = {
        "admission-webhook": "pyclassify.cli.admission:admission_webhook_command",
        "admit": "pyclassify.cli.admission:admit_command",
        "check": "pyclassify.cli.check:check_cmd",
        "diff": "pyclassify.cli.diff:diff_cmd",
        "enforce": "pyclassify.cli.enforce:enforce_command",
        "explain": "pyclassify.cli.explain:explain_cmd",
        "matrix": "pyclassify.cli.matrix:matrix_cmd",
        "monitor": "pyclassify.cli.monitor:monitor_command",
        "render": "pyclassify.cli.render:render_command",
        "replay": "pyclassify.cli.replay:replay_cmd",
        "report": "pyclassify.cli.report:report_command",
        "selector": "pyclassify.cli.selector:selector_cmd",
        "usage": "pyclassify.cli.usage:usage_command",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as e:
            # An output stream that cannot be written (stdout on a full disk or /dev/full): one
            # line, exit 1, not a traceback. Named outputs (--out ...) say their own name first;
            # a closed pipe (EPIPE) is click's to handle.
            if e.errno not in WRITE_ERRNOS or e.filename is not None:
                raise
            silence_stdout()
            click.echo(f"error: cannot write the output (stdout): {e.strerror or e}", err=True)
            ctx.exit(EXIT_INVALID)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy.get(name)
        if target is None:
            return super().get_command(ctx, name)
        import importlib

        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pyclassify", prog_name="pyclassify")
@click.option(
    "--memory-budget",
    metavar="SIZE",
    default=None,
    expose_value=False,
    callback=one_shot_budget,
    help="Memory the manifests' policy set may take once built (512Mi, 1G, bytes): a set that would pass it "
    "is refused before it is built, naming its costliest objects (exit 1), instead of the command "
    "being killed for memory. Default: none. (enforce has its own.)",
)
def main() -> None:
    """pyclassify: packet classification for network policy.

    Reads Kubernetes, Calico and AdminNetworkPolicy manifests and decides, for every flow or
    packet, whether policy allows it, and why.

    \b
    Exit codes:
      0    success (selector: a match; admit: admitted)
      1    invalid input: manifests with errors, a path with no manifest, a capture that
           cannot be read (or was truncated or changed while read), an output that
           cannot be written
      2    usage error: an unknown or missing option or argument, options that do
           not go together, an output that is one of the inputs
      3    selector --labels: no match
      4    admit: rejected
      5    diff: some flow changes verdict
      6    enforce: a missing prerequisite (root or CAP_NET_ADMIN, iptables, kernel
           support)
      7    enforce: something it needs is in use or absent (an NFQUEUE taken, a
           --metrics address in use, a --bridge interface that does not exist)
      8    replay --scheduler: the Dask cluster cannot be used (the scheduler
           unreachable, workers of another pyclassify version)
      130  interrupted (Ctrl-C)
    """
    tolerate_narrow_encodings()
