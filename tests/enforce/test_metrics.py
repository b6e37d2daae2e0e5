"""The daemon's metrics listener (pyclassify.enforce.metrics) without root: /readyz and /healthz
answer what the daemon says of itself, /metrics carries the policy source's counters. The
listener with a running daemon is tested in test_enforce_netns.py."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from pyclassify.enforce.metrics import Metrics


def get(address: tuple[str, int], path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class CountingSource:
    """A policy source as the daemon holds it: ``metrics()`` is all the collector reads."""

    def __init__(self) -> None:
        self.figures = {
            "events_Pod": 3,
            "events_NetworkPolicy": 1,
            "lists": 1,
            "relists": 2,
            "reconnects": 4,
            "rejected": 1,
            "rejection_events_created": 1,
            "rejection_events_failed": 2,
        }

    def metrics(self) -> dict[str, int]:
        return dict(self.figures)


def test_probes_follow_the_daemon_and_metrics_carry_the_source() -> None:
    state: dict[str, str | None] = {"ready": "starting: the initial policy is not in force yet", "healthy": None}
    source = CountingSource()
    metrics = Metrics(lambda: [], fail_open=False, source=lambda: source)
    address = metrics.serve("127.0.0.1:0", lambda: state["ready"], lambda: state["healthy"])
    try:
        assert get(address, "/readyz") == (503, "starting: the initial policy is not in force yet\n")
        assert get(address, "/healthz") == (200, "ok\n")
        state["ready"] = None
        assert get(address, "/readyz") == (200, "ok\n")
        state["healthy"] = state["ready"] = "packet loop stopped: pyclassify-nfq0"
        assert get(address, "/healthz")[0] == 503 and get(address, "/readyz")[0] == 503
        status, text = get(address, "/metrics")
        assert status == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert samples[("pyclassify_watch_events_total", (("kind", "Pod"),))] == 3
        assert samples[("pyclassify_watch_events_total", (("kind", "NetworkPolicy"),))] == 1
        assert samples[("pyclassify_watch_relists_total", ())] == 2
        assert samples[("pyclassify_watch_reconnects_total", ())] == 4
        assert samples[("pyclassify_watch_rejected_total", ())] == 1
        assert samples[("pyclassify_watch_bookmarks_total", ())] == 0
        assert samples[("pyclassify_watch_reloads_total", ())] == 0
        assert samples[("pyclassify_rejection_events_total", (("outcome", "created"),))] == 1
        assert samples[("pyclassify_rejection_events_total", (("outcome", "failed"),))] == 2
        assert samples[("pyclassify_rejection_events_total", (("outcome", "dropped"),))] == 0
        source.figures["events_Pod"] = 5  # read at scrape time
        assert 'pyclassify_watch_events_total{kind="Pod"} 5.0' in get(address, "/metrics")[1]
    finally:
        metrics.close()


def test_a_source_without_counters_adds_none() -> None:
    metrics = Metrics(lambda: [], fail_open=False, source=lambda: object())
    address = metrics.serve("127.0.0.1:0")
    try:
        status, text = get(address, "/metrics")
        assert status == 200 and "pyclassify_watch" not in text and "pyclassify_policy_reloads" in text
        assert get(address, "/readyz") == (200, "ok\n")
    finally:
        metrics.close()


def test_lost_log_lines_are_counted_at_scrape_time() -> None:
    lost = [0]
    metrics = Metrics(lambda: [], fail_open=False, lost_lines=lambda: lost[0])
    address = metrics.serve("127.0.0.1:0")
    try:
        assert "pyclassify_log_lines_lost_total 0.0" in get(address, "/metrics")[1]
        lost[0] = 3
        assert "pyclassify_log_lines_lost_total 3.0" in get(address, "/metrics")[1]
    finally:
        metrics.close()


def test_engine_gauges_count_programs_walked_past_the_memory_bound() -> None:
    """A policy of 12,000 rules, each its own address and port atom, is past the compiled form's
    bound: the gauges say its program is walked, for memory, and for which identities."""
    from bench.cluster import adversarial_policy
    from pyclassify.documents import Document, Problems
    from pyclassify.engine import NativeEngine
    from pyclassify.project import build_project

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}]},
    }
    engines = {}
    for name, rules in (("compiled", 40), ("walked", 12000)):
        project = build_project(
            [Document(pod, "pod.yaml", 1), Document(adversarial_policy(rules, 1, 1), "gnp.yaml", 1)], Problems()
        )
        assert not project.problems.errors
        engines[name] = NativeEngine(project.policy_set, project.inventory)
    for name, engine in engines.items():
        metrics = Metrics(lambda: [], fail_open=False, engine=lambda engine=engine: engine)
        address = metrics.serve("127.0.0.1:0")
        try:
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(get(address, "/metrics")[1])
                for s in f.samples
            }
        finally:
            metrics.close()
        walked = name == "walked"
        assert samples[("pyclassify_engine_walked_programs", (("reason", "memory"),))] == walked
        assert samples[("pyclassify_engine_walked_identities", ())] == walked
        assert samples[("pyclassify_engine_programs", (("state", "walked"),))] == walked
        if not walked:
            assert samples[("pyclassify_engine_programs", (("state", "compiled"),))] >= 1
            assert samples[("pyclassify_engine_compiled_bytes", ())] > 0
