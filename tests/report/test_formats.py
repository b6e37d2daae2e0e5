"""``matrix`` and ``diff`` as CSV, Markdown, Graphviz dot and SVG, held to their own ``--json``;
dot and SVG are rendered by Graphviz and read back."""

from __future__ import annotations

import csv
import io
import shlex
import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.report.conftest import run, run_json

DEMO = "examples/demo"
CHANGE = "examples/changes/db-behind-pgbouncer.yaml"


def rendered(graphviz: str, dot: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Graphviz's layout of ``dot`` (``-Tplain``): node name -> label, and (tail, head, colour)
    per edge drawn (not the invisible ones that only order the layout)."""
    r = subprocess.run([graphviz, "-Tplain"], input=dot, capture_output=True, text=True, check=True)
    nodes: dict[str, str] = {}
    edges = []
    for line in r.stdout.splitlines():
        parts = shlex.split(line)
        if parts[0] == "node":
            nodes[parts[1]] = parts[6]
        elif parts[0] == "edge" and parts[-2] != "invis":
            edges.append((parts[1], parts[2], parts[-1]))
    return nodes, edges


@pytest.mark.parametrize("by", ["pod", "identity"])
def test_matrix_dot_rendered_by_graphviz_draws_the_allowed_pairs(graphviz: str, by: str) -> None:
    doc = run_json("matrix", DEMO, "--port", "80", "--by", by, "--json")
    names = doc["pods"] if by == "pod" else [", ".join(g["endpoints"]) for g in doc["groups"]]
    r = run("matrix", DEMO, "--port", "80", "--by", by, "--output", "dot")
    assert r.returncode == 0, r.stderr
    nodes, edges = rendered(graphviz, r.stdout)
    assert len(nodes) == len(names)
    index = {node: int(node[1:]) for node in nodes}
    drawn = {(index[t], index[h]) for t, h, _ in edges}
    allowed = {(i, j) for i, row in enumerate(doc["matrix"]) for j, ok in enumerate(row) if ok}
    assert drawn == allowed and allowed
    assert {colour for *_, colour in edges} == {"#2e8b57"}  # every pod pair of an edge allowed
    if by == "pod":
        assert [nodes[f"n{k}"] for k in range(len(names))] == names


def test_matrix_by_namespace_counts_the_pod_matrix() -> None:
    pods = run_json("matrix", DEMO, "--port", "80", "--json")
    ns = run_json("matrix", DEMO, "--port", "80", "--by", "namespace", "--json")
    names = ns["namespaces"]
    want = [[0] * len(names) for _ in names]
    for i, a in enumerate(pods["pods"]):
        for j, b in enumerate(pods["pods"]):
            want[names.index(a.split("/")[0])][names.index(b.split("/")[0])] += pods["matrix"][i][j]
    assert ns["matrix"] == want
    assert sum(ns["pods"]) == len(pods["pods"])
    text = run("matrix", DEMO, "--port", "80", "--by", "namespace")
    assert (
        text.returncode == 0 and f"{sum(map(sum, want))} of {len(pods['pods']) ** 2} pod pairs allowed" in text.stdout
    )


def test_matrix_csv_and_markdown_are_the_json_table() -> None:
    doc = run_json("matrix", DEMO, "--port", "any", "--json")
    rows = list(csv.reader(io.StringIO(run("matrix", DEMO, "--port", "any", "--output", "csv").stdout)))
    assert rows[0][1:] == doc["pods"]
    assert [r[0] for r in rows[1:]] == doc["pods"]
    assert [[None if c == "" else c == "true" for c in r[1:]] for r in rows[1:]] == doc["matrix"]
    md = run("matrix", DEMO, "--port", "any", "--output", "md").stdout.splitlines()
    table = [line for line in md if line.startswith("| ") and "from \\ to" not in line and "---" not in line]
    assert [[c.strip() == "✓" for c in line.strip("|").split("|")[1:]] for line in table] == doc["matrix"]


def test_matrix_svg_is_graphviz_drawing(graphviz: str) -> None:
    r = run("matrix", DEMO, "--port", "80", "--output", "svg", "--by", "namespace")
    assert r.returncode == 0, r.stderr
    svg = ET.fromstring(r.stdout)
    ns = {"s": "http://www.w3.org/2000/svg"}
    titles = [t.text for t in svg.iterfind(".//s:g[@class='node']/s:title", ns)]
    assert len(titles) == len(run_json("matrix", DEMO, "--by", "namespace", "--json")["namespaces"])
    doc = run_json("matrix", DEMO, "--port", "80", "--by", "namespace", "--json")
    edges = svg.findall(".//s:g[@class='edge']", ns)
    assert len(edges) == sum(1 for row in doc["matrix"] for n in row if n)


@pytest.mark.parametrize("by", ["namespace", "identity", "pod"])
def test_diff_dot_draws_each_change_opened_or_closed(graphviz: str, by: str) -> None:
    doc = run_json("diff", DEMO, "--apply", CHANGE, "--json")
    r = run("diff", DEMO, "--apply", CHANGE, "--output", "dot", "--by", by)
    assert r.returncode == 5, r.stderr
    nodes, edges = rendered(graphviz, r.stdout)
    colours = sorted(c for *_, c in edges)
    if by != "namespace":  # each change one edge (its groups are single pods in the demo)
        want = sorted("#1e6fd9" if c["now"]["verdict"] == "allow" else "#111111" for c in doc["changes"])
        assert colours == want
    labels = set(nodes.values())
    for c in doc["changes"]:
        src = c["from"]
        if src["kind"] == "pod":
            name = {"namespace": src["namespace"], "pod": src["endpoints"][0]}.get(by)
            assert name is None or name in labels


def test_diff_csv_and_markdown_rows_are_the_changes() -> None:
    doc = run_json("diff", DEMO, "--apply", CHANGE, "--json")
    r = run("diff", DEMO, "--apply", CHANGE, "--output", "csv")
    assert r.returncode == 5
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert sorted(row["change"] for row in rows) == sorted(
        "opened" if c["now"]["verdict"] == "allow" else "closed" for c in doc["changes"]
    )
    assert all(row["flows"] for row in rows)
    md = run("diff", DEMO, "--apply", CHANGE, "--output", "md").stdout.splitlines()
    assert len(md) == 2 + len(doc["changes"])


def test_svg_without_graphviz_says_what_to_install(tmp_path) -> None:
    import os
    import sys

    env = {**os.environ, "PATH": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "pyclassify", "matrix", DEMO, "--output", "svg"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 1 and "graphviz" in r.stderr.lower() and "Traceback" not in r.stderr


def test_output_html_is_the_report_on_stdout() -> None:
    r = run("matrix", DEMO, "--port", "80", "--output", "html")
    assert r.returncode == 0 and r.stdout.startswith("<!DOCTYPE html>") and 'id="report-data"' in r.stdout
    r = run("diff", DEMO, "--apply", CHANGE, "--output", "html")
    assert r.returncode == 5 and '"ns_opened"' in r.stdout and "allow-api-to-db" in r.stdout


TRAFFIC = "examples/traffic/hubble.jsonl"


def _usage_want(doc: dict) -> list[dict]:
    """``usage --json`` per rule: its counts, whether it decided nothing, what covers it."""
    covered = {(s["policy"], s["direction"], str(s["rule"])): str(s["covered_by"]) for s in doc["shadowed"]}
    unused = {(r["policy"], r["direction"], str(r["rule"])) for r in doc["unused"]}
    redundant = {r["policy"] for r in doc["redundant"]}
    want = []
    for r in doc["rules"]:
        key = (r["policy"], r["direction"], str(r["rule"]))
        counted = r.get("counted", False)
        want.append(
            {
                "policy": r["policy"],
                "direction": r["direction"],
                "rule": str(r["rule"]),
                **{m: str(r[m]) if counted else "" for m in ("records", "flows", "packets", "bytes")},
                "never_hit": ("true" if key in unused else "false") if counted else "",
                "shadowed_by": covered.get(key, ""),
                "policy_redundant": "true" if r["policy"] in redundant else "false",
            }
        )
    return want


@pytest.mark.parametrize("traffic", [(), ("--traffic", TRAFFIC)])
def test_usage_csv_is_the_json_per_rule(traffic: tuple[str, ...]) -> None:
    doc = run_json("usage", DEMO, *traffic, "--json")
    r = run("usage", DEMO, *traffic, "--output", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    keys = (
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
    assert [{k: row[k] for k in keys} for row in rows] == _usage_want(doc)
    assert any(row["shadowed_by"] for row in rows) or not doc["shadowed"]
    if traffic:
        assert any(row["never_hit"] == "true" for row in rows) and any(row["never_hit"] == "false" for row in rows)


def test_usage_markdown_has_a_row_per_rule_and_json_is_its_short_form() -> None:
    doc = run_json("usage", DEMO, "--traffic", TRAFFIC, "--json")
    assert run_json("usage", DEMO, "--traffic", TRAFFIC, "--output", "json") == doc
    r = run("usage", DEMO, "--traffic", TRAFFIC, "--output", "md")
    assert r.returncode == 0, r.stderr
    table = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(doc["rules"])  # the header, its rule, a row per rule
    assert f"{doc['traffic']['records']:,} records" in r.stdout


def test_usage_output_html_is_the_usage_page() -> None:
    r = run("usage", DEMO, "--traffic", TRAFFIC, "--output", "html", "--no-redundant")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("<!DOCTYPE html>") and 'id="usage-table"' in r.stdout and '"usage":' in r.stdout


def test_usage_dot_draws_each_rule_with_what_it_decided_and_what_shadows_it(graphviz: str, tmp_path) -> None:
    from tests.test_usage import NAMESPACE, POLICIES

    (tmp_path / "inv.yaml").write_text(NAMESPACE)
    (tmp_path / "pol.yaml").write_text(POLICIES)
    for paths in ([DEMO, "--traffic", TRAFFIC], [str(tmp_path)]):
        doc = run_json("usage", *paths, "--json")
        r = run("usage", *paths, "--output", "dot")
        assert r.returncode == 0, r.stderr
        nodes, edges = rendered(graphviz, r.stdout)
        assert len(nodes) == len(doc["rules"])
        for k, rule in enumerate(doc["rules"]):
            label = nodes[f"r{k}"]
            assert label.startswith(f"{rule['direction']} rule {rule['rule']}: {rule['action']}"), label
            if doc["traffic"] is None:
                assert "\\n" not in label
            elif rule["flows"] == 0 and rule["records"] == 0:
                assert label.endswith("never hit"), label
            else:
                assert label.endswith(f"{rule['flows']:,} flows, {rule['packets']:,} packets"), label
        index = {(r["policy"], r["direction"], str(r["rule"])): k for k, r in enumerate(doc["rules"])}
        shadows = {
            (
                index[(s["policy"], s["direction"], str(s["covered_by"]))],
                index[(s["policy"], s["direction"], str(s["rule"]))],
            )
            for s in doc["shadowed"]
        }
        assert {(int(t[1:]), int(h[1:])) for t, h, _ in edges} == shadows
    assert shadows  # the second set has a shadowed rule: drawn as an edge from the rule covering it
    r = run("usage", str(tmp_path), "--output", "svg")
    assert r.returncode == 0, r.stderr
    svg = ET.fromstring(r.stdout)
    assert len(svg.findall(".//{http://www.w3.org/2000/svg}g[@class='node']")) == len(doc["rules"])
