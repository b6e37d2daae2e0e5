"""The HTML report in a real browser (Debian's headless Chromium): it loads from its file with
no console error, its cells carry the verdicts ``matrix --json`` gives at every level, a click
explains a cell as ``explain --json`` does, a change is drawn where ``diff --json`` puts it,
and screenshots are written for review (the command guide's with ``PYCLASSIFY_WRITE_DOCS=1``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tests.report.conftest import REPO, console_errors, open_report, run, run_json

DEMO = "examples/demo"
CHANGE = "examples/changes/db-behind-pgbouncer.yaml"
PODS = int(os.environ.get("PYCLASSIFY_REPORT_PODS", "10000"))
DOCS_IMAGE = REPO / "docs" / "report-demo.png"


def report(tmp_path: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    r = run("report", *args, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def cells(driver: Any, css: str, *attrs: str) -> list[tuple[str | None, ...]]:
    """The attributes of every cell ``css`` selects, read in one script call."""
    return [
        tuple(x)
        for x in driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(td => arguments[1].map(a => td.getAttribute(a)))",
            css,
            list(attrs),
        )
    ]


def open_namespaces(driver: Any, a: str, b: str, by_pod: bool) -> None:
    driver.execute_script(
        "const td = [...document.querySelectorAll('#heatmap td')].find(t => t.dataset.from === arguments[0] "
        "&& t.dataset.to === arguments[1]); td.click();"
        "const box = document.getElementById('by-pod'); if (box.checked !== arguments[2]) box.click();",
        a,
        b,
        by_pod,
    )


def shot(driver: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    return path


def matrix_index(browser: Any, groups: dict[str, Any]) -> list[int]:
    """Each of the page's groups' index in ``matrix --by identity --json``: the page orders
    groups by namespace, matrix by pod reference ("a-b/x" before "a/y"); the same groups, told
    apart by their first pod and family."""
    first = browser.execute_script("return R.groups.map((g, k) => [podRef(k, 0), g.family || 0]);")
    at = {(g["endpoints"][0], g["family"] or 0): k for k, g in enumerate(groups["groups"])}
    return [at[(ref, family)] for ref, family in first]


def test_demo_report_carries_matrix_verdicts_and_explains_them(browser: Any, tmp_path: Path) -> None:
    page = report(tmp_path, "demo.html", DEMO, "--port", "80")
    open_report(browser, page)
    assert console_errors(browser) == []
    by_ns = run_json("matrix", DEMO, "--port", "80", "--by", "namespace", "--json")
    names = by_ns["namespaces"]
    heat = cells(browser, "#heatmap td", "data-from", "data-to", "data-allowed")
    assert {(a, b): int(n) for a, b, n in heat} == {
        (a, b): by_ns["matrix"][i][j] for i, a in enumerate(names) for j, b in enumerate(names)
    }

    pods = run_json("matrix", DEMO, "--port", "80", "--json")
    want = {(a, b): pods["matrix"][i][j] for i, a in enumerate(pods["pods"]) for j, b in enumerate(pods["pods"])}
    groups = run_json("matrix", DEMO, "--port", "80", "--by", "identity", "--json")
    index = matrix_index(browser, groups)
    seen: dict[tuple[str, str], bool] = {}
    for a in names:
        for b in names:
            open_namespaces(browser, a, b, by_pod=False)
            for g, h, verdict in cells(browser, "#group-table td", "data-group-from", "data-group-to", "data-verdict"):
                assert (verdict == "allow") == groups["matrix"][index[int(g)]][index[int(h)]]
            open_namespaces(browser, a, b, by_pod=True)
            for src, dst, verdict in cells(browser, "#pod-table td", "data-from", "data-to", "data-verdict"):
                seen[(src, dst)] = verdict == "allow"
    assert seen == want  # every pod pair, once, as matrix --json says

    # A click explains the cell as explain --json explains one of its flows.
    clicked = 0
    for a in names:
        for b in names:
            open_namespaces(browser, a, b, by_pod=True)
            n = len(browser.find_elements("css selector", "#pod-table td"))
            for k in range(n):
                browser.find_elements("css selector", "#pod-table td")[k].click()
                box = browser.find_element("id", "explanation")
                src, dst = box.get_attribute("data-from"), box.get_attribute("data-to")
                side = box.find_element("css selector", "dl[data-side='0']")
                got = {d: json.loads(side.get_attribute(f"data-{d}")) for d in ("egress", "ingress")}
                expected = run_json(
                    "explain", DEMO, "--from", src, "--to", dst, "--proto", "TCP", "--port", "80", "--json"
                )
                assert side.get_attribute("data-verdict") == expected["verdict"], (src, dst)
                for d in ("egress", "ingress"):
                    want_d = expected[d]
                    if want_d is None:
                        assert got[d] is None, (src, dst, d)
                        continue
                    assert {k2: got[d][k2] for k2 in ("verdict", "tier", "policy", "rule", "reason")} == {
                        k2: want_d[k2] for k2 in ("verdict", "tier", "policy", "rule", "reason")
                    }, (src, dst, d)
                clicked += 1
    assert clicked == len(want)
    # For review (and docs/commands.md): frontend into backend, a cell a policy rule decides, explained.
    open_namespaces(browser, "frontend", "backend", by_pod=False)
    for td in browser.find_elements("css selector", "#group-table td"):
        td.click()
        if '"reason": "rule"' in browser.find_element("css selector", "#explanation dl").get_attribute(
            "data-ingress"
        ).replace('":"', '": "'):
            break
    image = shot(browser, tmp_path, "report-demo.png")
    if os.environ.get("PYCLASSIFY_WRITE_DOCS"):
        DOCS_IMAGE.parent.mkdir(exist_ok=True)
        shutil.copyfile(image, DOCS_IMAGE)
    assert console_errors(browser) == []


def test_change_report_draws_what_diff_opens_and_closes(browser: Any, tmp_path: Path) -> None:
    page = report(tmp_path, "change.html", DEMO, "--port", "any", "--apply", CHANGE)
    open_report(browser, page)
    assert console_errors(browser) == []
    doc = run_json("diff", DEMO, "--apply", CHANGE, "--json")
    want: dict[tuple[str, str], set[str]] = {}
    for c in doc["changes"]:
        if (
            c["from"]["kind"] != "pod"
            or c["to"]["kind"] != "pod"
            or not any(f["protocol"] == "TCP" for f in c["flows"])
        ):
            continue
        for src in c["from"]["endpoints"]:
            for dst in c["to"]["endpoints"]:
                want.setdefault((src, dst), set()).add("opened" if c["now"]["verdict"] == "allow" else "closed")
    names = [a for a, b, *_ in cells(browser, "#heatmap td", "data-from", "data-to") if a == b]
    got: dict[tuple[str, str], set[str]] = {}
    for a in names:
        for b in names:
            open_namespaces(browser, a, b, by_pod=True)
            for src, dst, change in cells(browser, "#pod-table td", "data-from", "data-to", "data-change"):
                if change:
                    got[(src, dst)] = set(change.split())
    assert got == want and want
    listed = browser.find_elements("css selector", "#change-list li")
    assert [li.text for li in listed] == [c["text"] for c in doc["changes"]]
    # A changed cell explains one flow that changed, before and after: the one before as
    # explain --json judges it under the old policy.
    open_namespaces(browser, "backend", "backend", by_pod=True)
    browser.find_element("css selector", "#pod-table td[data-change]:not([data-change=''])").click()
    box = browser.find_element("id", "explanation")
    was, now = (box.find_element("css selector", f"dl[data-side='{s}']") for s in (0, 1))
    assert was.get_attribute("data-verdict") != now.get_attribute("data-verdict")
    expected = run_json(
        "explain",
        DEMO,
        "--from",
        box.get_attribute("data-from"),
        "--to",
        box.get_attribute("data-to"),
        *box.get_attribute("data-args").split(),
        "--json",
    )
    assert was.get_attribute("data-verdict") == expected["verdict"]
    for d in ("egress", "ingress"):
        got = json.loads(was.get_attribute(f"data-{d}"))
        assert (got and got["policy"]) == (expected[d] and expected[d]["policy"])
    shot(browser, tmp_path, "report-change.png")
    assert console_errors(browser) == []


def test_generated_cluster_report(browser: Any, tmp_path: Path) -> None:
    from bench.cluster import generate, write_json_compact

    cluster = write_json_compact(generate(PODS, seed=1), tmp_path / "cluster.json")
    page = report(tmp_path, "cluster.html", str(cluster), "--port", "8080")
    open_report(browser, page, timeout=120)
    assert console_errors(browser) == []
    by_ns = run_json("matrix", str(cluster), "--port", "8080", "--by", "namespace", "--json")
    names = by_ns["namespaces"]
    heat = {(a, b): int(n) for a, b, n in cells(browser, "#heatmap td", "data-from", "data-to", "data-allowed")}
    assert heat == {(a, b): by_ns["matrix"][i][j] for i, a in enumerate(names) for j, b in enumerate(names)}
    groups = run_json("matrix", str(cluster), "--port", "8080", "--by", "identity", "--json")
    busiest = max(
        heat, key=lambda k: (0 < heat[k] < by_ns["pods"][names.index(k[0])] * by_ns["pods"][names.index(k[1])], heat[k])
    )
    open_namespaces(browser, *busiest, by_pod=False)
    got = cells(browser, "#group-table td", "data-group-from", "data-group-to", "data-verdict")
    index = matrix_index(browser, groups)
    assert got and all((v == "allow") == groups["matrix"][index[int(g)]][index[int(h)]] for g, h, v in got)
    browser.find_elements("css selector", "#group-table td")[0].click()
    assert browser.find_element("id", "explanation").text
    shot(browser, tmp_path, "report-cluster.png")
    assert console_errors(browser) == []


def test_dual_stack_pods_judged_in_each_family_as_matrix_does(browser: Any, tmp_path: Path) -> None:
    """A dual-stack pod is judged in each family it has (client -> db: allowed over IPv4, denied
    over IPv6, so denied), and pods sharing no family have no flow, as ``matrix --json`` says."""
    from tests.test_analysis import NETPOL, NO_V6, PODS

    cluster = tmp_path / "dual"
    cluster.mkdir()
    for name, text in (("pods.yaml", PODS), ("netpol.yaml", NETPOL), ("calico.yaml", NO_V6)):
        (cluster / name).write_text(text)
    page = report(tmp_path, "dual.html", str(cluster), "--port", "80")
    open_report(browser, page)
    assert console_errors(browser) == []
    pods = run_json("matrix", str(cluster), "--port", "80", "--json")
    verdict = {True: "allow", False: "deny", None: "none"}
    want = {
        (a, b): verdict[pods["matrix"][i][j]] for i, a in enumerate(pods["pods"]) for j, b in enumerate(pods["pods"])
    }
    open_namespaces(browser, "app", "app", by_pod=True)
    listed = cells(browser, "#pod-table td", "data-from", "data-to", "data-verdict")
    assert len(listed) == len(want)  # each pod once, whatever its families
    assert {(src, dst): v for src, dst, v in listed} == want
    assert "none" in want.values()
    assert want[("app/client", "app/db")] == "deny"
    by_ns = run_json("matrix", str(cluster), "--port", "80", "--by", "namespace", "--json")
    heat = cells(browser, "#heatmap td", "data-allowed")
    assert [int(n) for (n,) in heat] == [by_ns["matrix"][0][0]]
    # client -> db explained: its IPv4 flow speaks for it (the first family), allowed.
    open_namespaces(browser, "app", "app", by_pod=False)
    texts = browser.execute_script("return [...document.querySelectorAll('#group-table tbody th')].map(t => t.title)")
    assert any(t.endswith("IPv6") for t in texts) and any(t.endswith("IPv4") for t in texts)
    assert console_errors(browser) == []
