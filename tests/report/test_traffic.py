"""The report with flow records (``report --traffic``) in a real browser: its rule usage read
back from the DOM is ``usage --json``'s, and of a change its observed flows are ``diff --traffic
--json``'s rows, in order, the grid cells they close marked; ``usage --output html`` is the
same panel alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.report.conftest import console_errors, open_report, run, run_json
from tests.report.test_formats import _usage_want
from tests.report.test_page import cells, open_namespaces, report, shot

DEMO = "examples/demo"
CHANGE = "examples/changes/db-behind-pgbouncer.yaml"
TRAFFIC = "examples/traffic/hubble.jsonl"
VPC = "examples/traffic/vpc-flow-logs.txt"
KEYS = (
    "policy",
    "direction",
    "rule",
    "records",
    "flows",
    "packets",
    "bytes",
    "never_hit",
    "shadowed_by",
    "policy_redundant",
)


def usage_rows(driver: Any) -> list[dict[str, str | None]]:
    attrs = (
        "data-policy",
        "data-direction",
        "data-rule",
        "data-records",
        "data-flows",
        "data-packets",
        "data-bytes",
        "data-never-hit",
        "data-shadowed-by",
        "data-redundant",
    )
    return [dict(zip(KEYS, row)) for row in cells(driver, "#usage-table tbody tr", *attrs)]


def test_traffic_report_shows_rule_usage_as_usage_json(browser: Any, tmp_path: Path) -> None:
    page = report(tmp_path, "usage.html", DEMO, "--port", "80", "--traffic", TRAFFIC, "--traffic", VPC)
    open_report(browser, page)
    assert console_errors(browser) == []
    doc = run_json("usage", DEMO, "--traffic", TRAFFIC, "--traffic", VPC, "--json")
    got = usage_rows(browser)
    assert got == _usage_want(doc)
    assert any(r["never_hit"] == "true" for r in got) and any(int(r["flows"] or 0) > 0 for r in got)
    redundant = [
        li.get_attribute("data-policy")
        for li in browser.find_elements("css selector", "#redundant-list li")
        if li.get_attribute("data-policy")
    ]
    assert redundant == [r["policy"] for r in doc["redundant"]]
    other = cells(browser, "#other-decisions li", "data-direction", "data-flows")
    assert other == [(r["direction"], str(r["flows"])) for r in doc["other_decisions"]]
    assert browser.find_element("id", "heatmap").find_elements("css selector", "td")  # the grid is still drawn
    shot(browser, tmp_path, "report-usage.png")
    assert console_errors(browser) == []


def test_change_report_lists_the_observed_flows_it_breaks(browser: Any, tmp_path: Path) -> None:
    both = ("--traffic", TRAFFIC, "--traffic", VPC)
    page = report(tmp_path, "change.html", DEMO, "--port", "any", "--apply", CHANGE, *both)
    open_report(browser, page)
    assert console_errors(browser) == []
    doc = run_json("diff", DEMO, "--apply", CHANGE, *both, "--json")
    listed = cells(browser, "#observed-list li", "data-closed", "data-flows", "data-packets", "data-bytes")
    texts = [li.text for li in browser.find_elements("css selector", "#observed-list li")]
    assert texts == [c["text"] for c in doc["changes"]]
    closed_first = [c["now"]["verdict"] == "deny" for c in doc["changes"]]
    assert listed == [
        (str(k).lower(), str(c["flows"]), str(c["packets"]), str(c["bytes"]))
        for k, c in zip(closed_first, doc["changes"])
    ]
    assert any(closed_first)
    # The namespace cells marked: those holding a pod pair of a closed observed row, with its flows.
    want: dict[tuple[str, str], int] = {}
    for c in doc["changes"]:
        if c["now"]["verdict"] != "deny" or c["from"]["kind"] != "pod" or c["to"]["kind"] != "pod":
            continue
        pairs = {(s.split("/")[0], d.split("/")[0]) for s in c["from"]["endpoints"] for d in c["to"]["endpoints"]}
        for pair in pairs:
            want[pair] = want.get(pair, 0) + c["flows"]
    marked = {
        (a, b): int(n)
        for a, b, n in cells(browser, "#heatmap td.observed-closed", "data-from", "data-to", "data-observed-closed")
    }
    assert marked == want and want
    # Opened into groups and pods, the cells marked are those of the closed rows' ends.
    a, b = next(iter(want))
    open_namespaces(browser, a, b, by_pod=True)
    pods = {(s, d) for s, d in cells(browser, "#pod-table td.observed-closed", "data-from", "data-to")}
    ends = {
        (s, d)
        for c in doc["changes"]
        if c["now"]["verdict"] == "deny"
        for s in c["from"].get("endpoints", ())
        for d in c["to"].get("endpoints", ())
        if s.split("/")[0] == a and d.split("/")[0] == b
    }
    assert ends <= pods
    # The rule usage, counted in the same read of the records, is usage's of the policy before.
    assert usage_rows(browser) == _usage_want(run_json("usage", DEMO, *both, "--json"))
    shot(browser, tmp_path, "report-change-traffic.png")
    assert console_errors(browser) == []


def test_usage_output_html_is_the_usage_panel_alone(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "usage.html"
    r = run("usage", DEMO, "--traffic", TRAFFIC, "--output", "html")
    assert r.returncode == 0, r.stderr
    out.write_text(r.stdout, encoding="utf-8")
    open_report(browser, out)
    assert console_errors(browser) == []
    assert usage_rows(browser) == _usage_want(run_json("usage", DEMO, "--traffic", TRAFFIC, "--json"))
    assert browser.find_element("id", "namespaces").get_attribute("hidden") is not None
    assert console_errors(browser) == []
