"""``pyclassify report`` at cluster size: its generation time beside the ``matrix --by identity``
it draws from (same cluster, same flow, same run), the report's size, and its load time in
headless Chromium.

The 10k-pod cluster of ``bench.cluster`` as single-line JSON. Each round runs, as whole
processes (start, loading, engine, grouping, judging, output), ``pyclassify matrix cluster.json
--by identity --proto TCP --port 8080 --json`` then ``pyclassify report cluster.json --proto TCP
--port 8080 -o report.html``; best and median of the rounds, and the ratio of the medians.

In the browser (Debian's chromium through chromedriver, headless): the page's own time from
navigation start to the namespace heatmap drawn with its handlers set (``data-ready``, after the
cells are inflated), best and median of fresh loads; then the time to open the busiest namespace
pair into its identity groups, and into its pods (one click each, drawn synchronously).

With flow records (``test_report_with_traffic``): ``bench.flowrecords`` writes the cluster's
traffic as Hubble JSON lines (``PYCLASSIFY_REPORT_BENCH_RECORDS``, 1 M by default, of 50k
distinct connections), and each round runs the same ``matrix`` baseline then ``report
cluster.json --proto TCP --port 8080 --traffic flows.jsonl --no-redundant -o report.html``: the
report with every rule's usage (the redundant-policy search, one exact diff per policy, left
out); its size and load as above.

    .venv/bin/python -m pytest bench/test_bench_report.py -s
    PYCLASSIFY_REPORT_BENCH_PODS=1000 .venv/bin/python -m pytest bench/test_bench_report.py -s
    .venv/bin/python -m pytest bench/test_bench_report.py -s -k traffic

``test_change_report_with_traffic``: the same with a NetworkPolicy added (``--apply``), the
page adding what the change opens and closes and the observed flows it flips.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cluster import generate, write_json_compact

PODS = int(os.environ.get("PYCLASSIFY_REPORT_BENCH_PODS", "10000"))
ROUNDS = int(os.environ.get("PYCLASSIFY_REPORT_BENCH_ROUNDS", "3"))
RECORDS = int(os.environ.get("PYCLASSIFY_REPORT_BENCH_RECORDS", "1000000"))
ROOT = Path(__file__).resolve().parents[1]
FLOW = ("--proto", "TCP", "--port", "8080")


def _timed(*args: str) -> float:
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "pyclassify", *args], cwd=ROOT, capture_output=True, text=True, timeout=3600
    )
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-2000:]
    return took


def _generation(cluster: Path, page: Path, *extra: str, label: str = "") -> None:
    matrix_s, report_s = [], []
    for _ in range(ROUNDS):
        matrix_s.append(_timed("matrix", str(cluster), "--by", "identity", *FLOW, "--json"))
        report_s.append(_timed("report", str(cluster), *FLOW, *extra, "-o", str(page)))
    ratio = statistics.median(report_s) / statistics.median(matrix_s)
    size = page.stat().st_size
    print(
        f"\n{PODS} pods{label}: matrix --by identity best {min(matrix_s):.2f} s "
        f"median {statistics.median(matrix_s):.2f} s; report best {min(report_s):.2f} s median "
        f"{statistics.median(report_s):.2f} s; report/matrix {ratio:.2f}x (medians); report {size / 1e6:.2f} MB"
    )


def _load(page: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_exe = shutil.which("chromedriver")
    if binary is None or driver_exe is None:
        pytest.skip(
            "Chromium and its driver are not installed (apt-get install chromium chromium-driver): "
            "generation and size measured, load time not"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    loads, groups_ms, pods_ms = [], [], []
    for _ in range(ROUNDS):
        driver = webdriver.Chrome(service=Service(driver_exe), options=options)  # a fresh browser: no cache
        try:
            driver.get(page.as_uri())
            deadline = time.monotonic() + 120
            ready = None
            while ready is None and time.monotonic() < deadline:
                ready = driver.execute_script("return document.body && document.body.dataset.ready || null")
                time.sleep(0.01)
            assert ready is not None, "the report never became ready"
            loads.append(float(ready))
            busiest = driver.execute_script(
                "const cells = [...document.querySelectorAll('#heatmap td')];"
                "cells.sort((a, b) => b.dataset.pairs - a.dataset.pairs); return [cells[0].dataset.from, cells[0].dataset.to]"
            )
            took = driver.execute_script(
                "const td = [...document.querySelectorAll('#heatmap td')].find(t => t.dataset.from === arguments[0] "
                "&& t.dataset.to === arguments[1]);"
                "let t = performance.now(); td.click(); const groups = performance.now() - t;"
                "t = performance.now(); document.getElementById('by-pod').click(); const pods = performance.now() - t;"
                "return [groups, pods]",
                *busiest,
            )
            groups_ms.append(took[0])
            pods_ms.append(took[1])
            assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
        finally:
            driver.quit()
    print(
        f"load to interactive (navigation start to heatmap drawn) best {min(loads):.0f} ms median "
        f"{statistics.median(loads):.0f} ms; busiest namespace pair opened into groups median "
        f"{statistics.median(groups_ms):.0f} ms, into pods {statistics.median(pods_ms):.0f} ms"
    )


def test_report_generation_size_and_load(tmp_path: Path) -> None:
    cluster = write_json_compact(generate(PODS, seed=1), tmp_path / "cluster.json")
    page = tmp_path / "report.html"
    _generation(cluster, page)
    _load(page)


def test_report_with_traffic(tmp_path: Path) -> None:
    from bench import flowrecords

    generated = generate(PODS, seed=1)
    cluster = write_json_compact(generated, tmp_path / "cluster.json")
    flows = flowrecords.write(generated, tmp_path / "flows.jsonl", "hubble", RECORDS)
    page = tmp_path / "report.html"
    _generation(
        cluster,
        page,
        "--traffic",
        str(flows),
        "--no-redundant",
        label=f", report --traffic ({RECORDS:,} Hubble records) --no-redundant",
    )
    _load(page)


def test_change_report_with_traffic(tmp_path: Path) -> None:
    """A NetworkPolicy added (``bench.cluster.random_change``, as ``diff``'s benchmark; seed 16 opens
    some flows at 10k pods, where its changed NetworkPolicy changes no verdict), its
    report with the traffic: what the change opens and closes, the observed flows it flips."""
    import json
    import random

    from bench import flowrecords
    from bench.cluster import random_change

    generated = generate(PODS, seed=1)
    cluster = write_json_compact(generated, tmp_path / "cluster.json")
    flows = flowrecords.write(generated, tmp_path / "flows.jsonl", "hubble", RECORDS)
    change = tmp_path / "change.json"
    change.write_text(json.dumps(random_change(generated, random.Random(16), "networkpolicy-added").after))
    page = tmp_path / "report.html"
    _generation(
        cluster,
        page,
        "--apply",
        str(change),
        "--traffic",
        str(flows),
        "--no-redundant",
        label=f", report --apply (a NetworkPolicy added) --traffic ({RECORDS:,} Hubble records) --no-redundant",
    )
    text = page.read_text("utf-8")
    start = text.index('<script id="report-data" type="application/json">') + 49
    data = json.loads(text[start : text.index("</script>", start)])
    s = data["observed"]["summary"]
    print(
        f"the page: {len(data['changes'])} changes; observed: {s['closed']} rows closing {s['closed_flows']:,} flows, "
        f"{s['opened']} opening {s['opened_flows']:,}; {len(data['usage']['rules']):,} rules"
    )
    _load(page)
