"""What the commands share (``pyclassify.cli.common``)."""

from __future__ import annotations

import io

from rich.console import Console

from pyclassify.cli import common


def test_the_progress_of_a_cluster_run_counts_tasks_and_the_rate_of_what_they_judged(monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=terminal, force_terminal=True, width=200, highlight=False))
    progress = common.cluster_progress(False, "packets")
    progress(3, 8, 1_500_000)
    line = terminal.getvalue()
    assert "tasks 3/8" in line and "1,500,000 packets judged" in line and "packets/s" in line
    rate = int(line.split("judged, ")[1].split(" packets/s")[0].replace(",", ""))
    assert rate > 0


def test_no_progress_line_with_json_or_off_a_terminal(monkeypatch):
    for as_json, tty in ((True, True), (False, False)):
        stream = io.StringIO()
        monkeypatch.setattr(common, "err", Console(file=stream, force_terminal=tty, width=200, highlight=False))
        common.cluster_progress(as_json, "records")(1, 2, 10)
        assert stream.getvalue() == ""
