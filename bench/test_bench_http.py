"""What http rules cost in replay: the same connections judged with and without reading requests.

A capture of 20,000 TCP connections frontend/web -> backend/api:8080 of ``examples/demo``, each
a handshake, one request (``GET /public/item/NNNNNN``) and its answer (5 packets, 100,000 in
all), is replayed with connection tracking against:

- the demo plus ``examples/http`` (Calico ``http`` rules: every connection is admitted up to its
  request, its payload read natively and the request judged), and
- the baseline, measured in the same run: the same policy with the ``http`` clauses removed (the
  connections allowed at their SYN, no payload read).

    .venv/bin/python -m pytest bench/test_bench_http.py -s --benchmark-columns=min,median,rounds
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.captures import write_http_capture
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.replay import Replay

REPO = Path(__file__).resolve().parents[1]
DEMO, HTTP = str(REPO / "examples" / "demo"), str(REPO / "examples" / "http")
CONNECTIONS = int(os.environ.get("PYCLASSIFY_HTTP_CONNECTIONS", "20000"))
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_http_capture(tmp_path_factory.mktemp("http") / "http.pcap", CONNECTIONS)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``examples/http`` with its http clauses removed: the baseline's policy."""
    text = (Path(HTTP) / "api-http.yaml").read_text()
    lines, skip = [], False
    for line in text.splitlines():
        if line.strip().startswith("http:"):
            skip, indent = True, len(line) - len(line.lstrip())
            continue
        if skip and (not line.strip() or len(line) - len(line.lstrip()) > indent):
            continue
        skip = False
        lines.append(line)
    d = tmp_path_factory.mktemp("plain")
    (d / "api-plain.yaml").write_text("\n".join(lines) + "\n")
    return str(d)


def _replay(engine: NativeEngine, capture: Path, http: bool) -> dict:
    replay = Replay(engine, http=http)
    replay.run([str(capture)])
    return replay.summary_json()


@pytest.mark.parametrize("case", ["plain", "http"])
def test_replay_http_rules(benchmark, capture: Path, plain: str, case: str) -> None:
    project = load_project([DEMO, HTTP if case == "http" else plain])
    assert not project.problems.errors and any(p.name == "api-http" for p in project.policy_set.policies)
    engine = NativeEngine(project.policy_set, project.inventory)
    summary = benchmark(_replay, engine, capture, case == "http")
    packets = 5 * CONNECTIONS
    assert summary["packets"] == packets and summary["denied"] == 0
    if case == "http":
        assert summary["http"]["requests_allowed"] == CONNECTIONS and summary["http"]["provisional"] == CONNECTIONS
    RESULTS[case] = benchmark.stats.stats.median
    print(
        f"\n{case}: {packets / RESULTS[case] / 1e6:.3f} M packets/s (median {RESULTS[case] * 1e3:.1f} ms "
        f"for {packets} packets, {CONNECTIONS} connections)"
    )
    if len(RESULTS) == 2:
        print(f"http rules / baseline (same policy, no http clauses): {RESULTS['http'] / RESULTS['plain']:.2f}x time")
