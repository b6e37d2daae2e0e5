"""The ``monitor`` command: the event stream of ``pyclassify enforce`` in a readable form
(``pyclassify.enforce.monitor``)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import click

from pyclassify.enforce.monitor import EVENTS, LineTooLong, follow_lines, parse_only, run_monitor, stream_lines


@click.command(
    "monitor",
    epilog="""\b
Examples:
  sudo pyclassify enforce policies/ --queue 0 | pyclassify monitor --only deny,log
  pyclassify monitor /var/log/pyclassify.jsonl --follow
""",
)
@click.argument("file", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-f", "--follow", is_flag=True, help="Keep reading FILE as it grows (like tail -f).")
@click.option("--only", metavar="KINDS", help=f"Comma-separated event kinds to show ({','.join(EVENTS)}).")
@click.option("--json", "as_json", is_flag=True, help="Print the kept events as the original JSON lines.")
def monitor_command(file: str, follow: bool, only: str | None, as_json: bool) -> None:
    """Follow the JSON-line event stream of `pyclassify enforce` (FILE, or stdin) in a readable form."""
    try:
        kinds = parse_only(only)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--only") from e
    out = sys.stdout
    err = sys.stderr
    if file == "-":
        if follow:
            raise click.BadParameter("--follow needs a FILE (stdin is followed anyway)", param_hint="--follow")
        lines: Iterator[str] = stream_lines(sys.stdin)
        try:
            run_monitor(lines, out, err, kinds, as_json)
        except LineTooLong as e:
            raise click.ClickException(f"<stdin>: {e}") from None
        return
    if not follow:
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                run_monitor(stream_lines(f), out, err, kinds, as_json)
        except OSError as e:
            raise click.ClickException(f"{file}: {e.strerror or e}") from e
        except LineTooLong as e:
            raise click.ClickException(f"{file}: {e}") from None
        return
    stop = threading.Event()
    try:
        run_monitor(follow_lines(file, stop), out, err, kinds, as_json)
    except KeyboardInterrupt:
        stop.set()
    except LineTooLong as e:
        raise click.ClickException(f"{file}: {e}") from None
