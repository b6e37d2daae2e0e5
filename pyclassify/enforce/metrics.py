"""Prometheus metrics of ``pyclassify enforce`` (``--metrics ADDR``), and its health.

The listener serves ``/metrics`` (any other path too, as prometheus_client does), ``/readyz``
(200 once the initial policy is in force and the loops run, 503 before, after a stop, or when a
loop has died) and ``/healthz`` (200 while no loop has died): what a DaemonSet's probes ask. It
listens on the loopback unless given another address (with the host network, every pod of the
node reaches the node's other addresses), and is bounded (``pyclassify.httpserver``): two
worker threads, at most ``MAX_CONNECTIONS`` connections (the idle ones closed first when more
come), a deadline on every request. ``rule_labels=False`` counts verdicts by direction and
action only, leaving every policy's name out of what a scraper reads.

Counters that the native loops keep (packets, verdicts, malformed, errors, batches, batch time)
are read at scrape time by a collector, so the packet path never touches Python. Verdicts by
direction/tier/policy/rule/action are counted from the policy-judged packets the daemon drains
from the loops in bulk. Kernel figures: queue depth and drops from
``/proc/net/netfilter/nfnetlink_queue``, conntrack size from ``nf_conntrack_count``.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from pyclassify.httpserver import BoundedServer, Request, Response

#: The metrics listener's bounds: connections open at once, worker threads, the seconds a
#: request may take from its first byte, and an idle connection may stay.
MAX_CONNECTIONS = 64
WORKERS = 2
REQUEST_TIMEOUT = 5.0
IDLE_TIMEOUT = 30.0
DEFAULT_HOST = "127.0.0.1"

NFQ_PROC = "/proc/net/netfilter/nfnetlink_queue"
CT_COUNT = "/proc/sys/net/netfilter/nf_conntrack_count"
CT_MAX = "/proc/sys/net/netfilter/nf_conntrack_max"
CT_STAT = "/proc/net/stat/nf_conntrack"
#: The columns of CT_STAT exported, as the kernel names them: what a full table or a flood does.
CT_STAT_EVENTS = ("early_drop", "insert_failed", "drop", "invalid", "search_restart")


def kernel_queues() -> dict[int, dict[str, int]]:
    """Per queue: ``depth`` (queue_total), ``queue_dropped`` (queue full), ``user_dropped``
    (netlink socket full), ``id_sequence``."""
    out: dict[int, dict[str, int]] = {}
    try:
        with open(NFQ_PROC) as f:
            for line in f:
                cols = line.split()
                if len(cols) >= 8:
                    out[int(cols[0])] = {
                        "depth": int(cols[2]),
                        "queue_dropped": int(cols[5]),
                        "user_dropped": int(cols[6]),
                        "id_sequence": int(cols[7]),
                    }
    except OSError:
        pass
    return out


def conntrack_count(path: str = CT_COUNT) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def conntrack_stats() -> dict[str, int]:
    """The kernel's conntrack statistics of this network namespace, summed over CPUs (the table
    is hex, one row per CPU): ``early_drop`` (entries dropped to make room at nf_conntrack_max),
    ``drop`` (new connections dropped: table full, nothing to drop early), ``insert_failed``..."""
    try:
        with open(CT_STAT) as f:
            names = f.readline().split()
            totals = dict.fromkeys(names, 0)
            for line in f:
                for name, value in zip(names, line.split()):
                    totals[name] += int(value, 16)
    except (OSError, ValueError):
        return {}
    return totals


class LoopCollector(Collector):
    """Reads the loops' native counters at scrape time (``loops()`` returns the live NfQueue
    objects) and the kernel's: queue depth and drops, conntrack size, cap and events."""

    def __init__(self, loops: Callable[[], list[Any]], fail_open: bool) -> None:
        self.loops = loops
        self.fail_open = fail_open

    def collect(self) -> Iterator[Any]:
        loops = self.loops()
        packets = CounterMetricFamily(
            "pyclassify_nfqueue_packets", "Packets received from NFQUEUE, by outcome", labels=["queue", "outcome"]
        )
        batches = CounterMetricFamily("pyclassify_nfqueue_batches", "Batches judged", labels=["queue"])
        errors = CounterMetricFamily("pyclassify_nfqueue_errors", "Loop errors by kind", labels=["queue", "kind"])
        failopen = CounterMetricFamily(
            "pyclassify_fail_open_events",
            "Packets accepted by the fail-open mode (malformed, engine error, lost)",
            labels=["queue"],
        )
        hist = HistogramMetricFamily(
            "pyclassify_batch_seconds", "Per-batch processing time (decode, judge, verdict)", labels=["queue"]
        )
        depth = GaugeMetricFamily("pyclassify_nfqueue_depth", "Packets waiting in the kernel queue", labels=["queue"])
        kdrops = CounterMetricFamily(
            "pyclassify_nfqueue_kernel_drops", "Packets the kernel dropped, by reason", labels=["queue", "reason"]
        )
        kq = kernel_queues()
        for loop in loops:
            q = str(loop.queue)
            s = loop.stats
            for outcome in ("accepted", "malformed", "lost"):
                packets.add_metric([q, outcome], s[outcome])
            packets.add_metric([q, "dropped"], s["dropped"] - s["rejected"])  # rejected ones apart
            packets.add_metric([q, "rejected"], s["rejected"])
            batches.add_metric([q], s["batches"])
            for kind in ("errors", "send_errors", "recv_errors", "netlink_errors", "event_drops"):
                errors.add_metric([q, kind], s[kind])
            failopen.add_metric([q], (s["malformed"] + s["errors"] + s["lost"]) if self.fail_open else 0)
            bounds, counts, total = loop.batch_histogram()
            cum, buckets = 0, []
            for b, c in zip(bounds, counts):
                cum += c
                buckets.append((repr(b), cum))
            cum += counts[-1]
            buckets.append(("+Inf", cum))
            hist.add_metric([q], buckets, total)
            k = kq.get(loop.queue)
            if k:
                depth.add_metric([q], k["depth"])
                kdrops.add_metric([q, "queue_full"], k["queue_dropped"])
                kdrops.add_metric([q, "socket_full"], k["user_dropped"])
        yield from (packets, batches, errors, failopen, hist, depth, kdrops)
        # The connection table on this path is the kernel's: its size, cap and what it did at the cap.
        for name, path, help_text in (
            ("entries", CT_COUNT, "Kernel conntrack entries (nf_conntrack_count)"),
            ("max", CT_MAX, "Kernel conntrack cap (nf_conntrack_max)"),
        ):
            value = conntrack_count(path)
            if value is not None:
                g = GaugeMetricFamily(f"pyclassify_kernel_conntrack_{name}", help_text)
                g.add_metric([], value)
                yield g
        stats = conntrack_stats()
        if stats:
            events = CounterMetricFamily(
                "pyclassify_kernel_conntrack_events",
                "Kernel conntrack statistics (/proc/net/stat/nf_conntrack), by event",
                labels=["event"],
            )
            for event in CT_STAT_EVENTS:
                if event in stats:
                    events.add_metric([event], stats[event])
            yield events


class BridgeCollector(Collector):
    """The AF_PACKET bridge's counters at scrape time (``bridge()`` returns the running Bridge,
    or None): frames by outcome, ring overruns, and its connection table (the engine's own
    tracker): size and events, early drops at ``--conntrack-max`` among them."""

    FRAMES = (
        "allowed",
        "denied",
        "established",
        "malformed",
        "truncated",
        "arp",
        "nd",
        "other_dropped",
        "other_forwarded",
        "tx_failed",
        "decapsulated",
        "tunnel_unread",
        "tunnel_not_ip",
    )
    CT_EVENTS = ("inserts", "expired", "early_drops", "insert_failed", "revoked", "restored", "denied", "pickups")

    def __init__(self, bridge: Callable[[], Any]) -> None:
        self.bridge = bridge

    def collect(self) -> Iterator[Any]:
        bridge = self.bridge()
        if bridge is None:
            return
        c = bridge.counters
        frames = CounterMetricFamily(
            "pyclassify_bridge_frames", "Frames the bridge handled, by outcome", labels=["outcome"]
        )
        for outcome in self.FRAMES:
            frames.add_metric([outcome], c[outcome])
        yield frames
        drops = CounterMetricFamily("pyclassify_bridge_kernel_drops", "Frames the kernel dropped: ring full")
        drops.add_metric([], c["kernel_drops"])
        yield drops
        tracked = GaugeMetricFamily(
            "pyclassify_engine_conntrack_entries",
            "Connections in the engine's tracker (revoked ones included, until idle)",
        )
        tracked.add_metric([], c["tracked"])
        yield tracked
        events = CounterMetricFamily(
            "pyclassify_engine_conntrack_events",
            "Engine tracker events: inserts, expired, early_drops (unassured entries dropped at the cap), "
            "insert_failed (refused: the table is full of assured entries), revoked, restored, denied (frames of "
            "connections whose opening policy denied), pickups (TCP connections picked up mid-stream)",
            labels=["event"],
        )
        for event in self.CT_EVENTS:
            events.add_metric([event], c[f"ct_{event}"])
        yield events
        http = CounterMetricFamily(
            "pyclassify_bridge_http",
            "http rules on the bridge: connections admitted up to their request (provisional), requests allowed "
            "and denied, streams that could not be judged (unjudgeable), RST frames sent to cut connections",
            labels=["event"],
        )
        for event in ("provisional", "allowed", "denied", "errors", "resets"):
            http.add_metric(["unjudgeable" if event == "errors" else event], c[f"http_{event}"])
        yield http
        rejects = CounterMetricFamily(
            "pyclassify_bridge_rejects",
            "--deny-action reject on the bridge: answers sent to denied packets (tcp_reset, icmp_unreachable), and "
            "denied packets only dropped (limited: over the rate, or none is due)",
            labels=["kind"],
        )
        for kind, key in (("tcp_reset", "tcp"), ("icmp_unreachable", "icmp"), ("limited", "limited")):
            rejects.add_metric([kind], c[f"rejects_{key}"])
        yield rejects


class SourceCollector(Collector):
    """The policy source's own counters at scrape time (``source.metrics()``): for the cluster
    source, watch events by kind, lists, relists, reconnects, bookmarks, rejected objects and
    whole-project reloads."""

    def __init__(self, source: Callable[[], Any]) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        figures = getattr(self.source(), "metrics", None)
        if not callable(figures):
            return  # the file source has no counters of its own
        values: dict[str, int] = figures()
        events = CounterMetricFamily("pyclassify_watch_events", "Watch events applied, by kind", labels=["kind"])
        for key, value in sorted(values.items()):
            if key.startswith("events_"):
                events.add_metric([key[len("events_") :]], value)
        yield events
        for key, help_text in (
            ("lists", "Initial lists of the cluster"),
            ("relists", "Kinds listed again after a watch expired (410 Gone)"),
            ("reconnects", "Watches reconnected after a broken connection"),
            ("bookmarks", "Watch bookmarks received"),
            ("rejected", "Objects rejected (their last good version stays)"),
            (
                "reloads",
                "Watch events applied by normalizing the whole project again (kinds not applied one object at a time)",
            ),
        ):
            family = CounterMetricFamily(f"pyclassify_watch_{key}", help_text)
            family.add_metric([], values.get(key, 0))
            yield family
        reported = CounterMetricFamily(
            "pyclassify_rejection_events",
            "Warning Events about rejected objects, by outcome: created, patched (a repeat "
            "counted on the Event already posted), failed (logged), dropped (queue full), "
            "limited (the object's rate spent)",
            labels=["outcome"],
        )
        for outcome in ("created", "patched", "failed", "dropped", "limited"):
            reported.add_metric([outcome], values.get(f"rejection_events_{outcome}", 0))
        yield reported


class BudgetCollector(Collector):
    """The policy set's estimated memory once built (``pyclassify.sharing``), the budget it is
    held to (``pyclassify.budget``), and the updates rejected for passing it."""

    def __init__(self, source: Callable[[], Any]) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        source = self.source()
        footprint = getattr(source, "footprint", None)
        if not callable(footprint):
            return
        family = GaugeMetricFamily(
            "pyclassify_policy_memory_estimate_bytes", "Estimated memory of the policy set in force, once built"
        )
        family.add_metric([], footprint())
        yield family
        budget = getattr(source, "budget", None)
        if budget is not None:
            family = GaugeMetricFamily(
                "pyclassify_policy_memory_budget_bytes", "Memory a policy set may take once built (--memory-budget)"
            )
            family.add_metric([], budget)
            yield family
        over_budget = CounterMetricFamily(
            "pyclassify_policy_over_budget",
            "Policy updates (or, from the cluster, objects) rejected because the policy "
            "set would pass the memory budget once built",
        )
        over_budget.add_metric([], getattr(source, "over_budget", 0))
        yield over_budget


class DnsCollector(Collector):
    """What the DNS loop learned for domain rules: answers read, facts taught, malformed
    answers by reason; the store's size and evictions (its cap holds under a flood)."""

    def __init__(self, dns: Callable[[], tuple[Any, Any]]) -> None:
        self.dns = dns

    def collect(self) -> Iterator[Any]:
        loop, facts = self.dns()
        if loop is None:
            return
        from pyclassify.domains import DNS_ERROR_NAMES

        s = loop.stats
        for name, key, help_text in (
            ("answers", "dns_answers", "DNS answers the DNS loop read"),
            ("facts_learned", "dns_learned", "New (name, address) facts DNS answers taught"),
        ):
            family = CounterMetricFamily(f"pyclassify_dns_{name}", help_text)
            family.add_metric([], s[key])
            yield family
        malformed = CounterMetricFamily(
            "pyclassify_dns_malformed", "Malformed DNS answers (taught nothing), by reason", labels=["reason"]
        )
        for name, n in zip(DNS_ERROR_NAMES, loop.dns_errors()):
            malformed.add_metric([name], n)
        yield malformed
        size = GaugeMetricFamily("pyclassify_dns_facts", "(name, address) facts kept for domain rules")
        size.add_metric([], len(facts))
        yield size
        evicted = CounterMetricFamily("pyclassify_dns_facts_evicted", "Facts evicted at the store's cap")
        evicted.add_metric([], facts.stats()["evicted"])
        yield evicted


class HttpCollector(Collector):
    """http rules: connections admitted provisionally, requests judged, connections cut (resets
    sent; streams that could not be judged, by reason; a full table)."""

    def __init__(self, loops: Callable[[], tuple[list[Any], Any]]) -> None:
        self.loops = loops

    def collect(self) -> Iterator[Any]:
        mains, loop = self.loops()
        if loop is None:
            return
        from pyclassify.engine import HTTP_ERROR_NAMES

        s = loop.stats
        family = CounterMetricFamily(
            "pyclassify_http_provisional", "New TCP connections admitted up to their HTTP request"
        )
        family.add_metric([], sum(m.stats["http_provisional"] for m in mains))
        yield family
        requests = CounterMetricFamily(
            "pyclassify_http_requests", "HTTP requests judged, by verdict", labels=["verdict"]
        )
        requests.add_metric(["allow"], s["http_requests_allowed"])
        requests.add_metric(["deny"], s["http_requests_denied"])
        yield requests
        broken = CounterMetricFamily(
            "pyclassify_http_unjudgeable",
            "Connections cut because their request stream could not be judged, by reason",
            labels=["reason"],
        )
        for name, n in zip(HTTP_ERROR_NAMES, loop.http_errors()):
            broken.add_metric([name], n)
        broken.add_metric(["table_full"], s["http_table_full"])
        yield broken
        resets = CounterMetricFamily("pyclassify_http_resets", "TCP resets sent to cut denied connections")
        resets.add_metric([], s["http_resets"])
        yield resets


class _ListenerCollector(Collector):
    """The metrics listener's own bounds at work (``BoundedServer.stats``)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        server = self.metrics.server
        if server is None:
            return
        stats = server.stats
        cut = CounterMetricFamily(
            "pyclassify_metrics_connections_cut",
            "Connections to the metrics listener cut: refused at the cap, idle ones closed to make room, requests past "
            "their deadline",
            labels=["reason"],
        )
        for reason in ("refused", "evicted", "timeouts", "bad_requests"):
            cut.add_metric([reason], stats[reason])
        yield cut
        open_ = GaugeMetricFamily("pyclassify_metrics_connections_open", "Connections open to the metrics listener")
        open_.add_metric([], stats["open"])
        yield open_


class _LostLines(Collector):
    def __init__(self, lost: Callable[[], int]) -> None:
        self.lost = lost

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(
            "pyclassify_log_lines_lost", "Flow-log lines that could not be written (destination full, closed or gone)"
        )
        family.add_metric([], self.lost())
        yield family


class EngineCollector:
    """How the engine in force decides: its programs compiled, or walked rule by rule and why
    (``memory``: the compiled form would exceed its bound, so that identity's decisions walk)."""

    def __init__(self, engine: Callable[[], Any]) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Any]:
        engine = self.engine()
        stats = {} if engine is None else engine.compile_stats
        programs = GaugeMetricFamily(
            "pyclassify_engine_programs",
            "Programs of local identities (per direction, profile lists included), by state",
            labels=["state"],
        )
        walked = GaugeMetricFamily(
            "pyclassify_engine_walked_programs",
            "Programs decided by walking their rules instead of compiled, by reason",
            labels=["reason"],
        )
        for state in ("compiled", "not_compiled"):
            programs.add_metric([state], stats.get(state, 0))
        programs.add_metric(["walked"], sum(stats.get(f"walked_{r}", 0) for r in ("services", "domains", "memory")))
        for reason in ("services", "domains", "memory"):
            walked.add_metric([reason], stats.get(f"walked_{reason}", 0))
        yield programs
        yield walked
        yield GaugeMetricFamily(
            "pyclassify_engine_walked_identities",
            "Local identities with a side decided by walking its rules",
            value=stats.get("walked_identities", 0),
        )
        yield GaugeMetricFamily(
            "pyclassify_engine_compiled_bytes", "Bytes the compiled programs hold", value=stats.get("bytes", 0)
        )


class Metrics:
    """The daemon's registry (one per daemon, so tests can run several)."""

    def __init__(
        self,
        loops: Callable[[], list[Any]],
        fail_open: bool,
        source: Callable[[], Any] | None = None,
        lost_lines: Callable[[], int] | None = None,
        bridge: Callable[[], Any] | None = None,
        dns: Callable[[], tuple[Any, Any]] | None = None,
        http: Callable[[], tuple[list[Any], Any]] | None = None,
        engine: Callable[[], Any] | None = None,
        rule_labels: bool = True,
    ) -> None:
        self.registry = CollectorRegistry()
        self.rule_labels = rule_labels
        self.registry.register(LoopCollector(loops, fail_open))
        if engine is not None:
            self.registry.register(EngineCollector(engine))
        if dns is not None:
            self.registry.register(DnsCollector(dns))
        if http is not None:
            self.registry.register(HttpCollector(http))
        if bridge is not None:
            self.registry.register(BridgeCollector(bridge))
        if source is not None:
            self.registry.register(SourceCollector(source))
            self.registry.register(BudgetCollector(source))
        if lost_lines is not None:
            self.registry.register(_LostLines(lost_lines))
        self.registry.register(_ListenerCollector(self))
        self.verdicts = Counter(
            "pyclassify_verdicts",
            "Policy verdicts by direction, tier, policy, rule and action"
            if rule_labels
            else "Policy verdicts by direction and action (rule labels off)",
            ["direction", "tier", "policy", "rule", "action"] if rule_labels else ["direction", "action"],
            registry=self.registry,
        )
        self.staged_verdicts = Counter(
            "pyclassify_staged_verdicts",
            "New connections judged with the staged policies enforced, by whether "
            "that verdict differs from the real one",
            ["differs"],
            registry=self.registry,
        )
        self.reloads = Counter(
            "pyclassify_policy_reloads", "Policy reloads by result", ["result"], registry=self.registry
        )
        self.revalidations = Counter(
            "pyclassify_revalidations", "Revalidations of established connections", registry=self.registry
        )
        self.rules_repaired = Counter(
            "pyclassify_iptables_repairs",
            "Times our iptables rules were found changed by someone else and put back",
            registry=self.registry,
        )
        self.events_unnamed = Counter(
            "pyclassify_events_unnamed",
            "Verdict records whose deciding rule could not be named (judged by the engine "
            "a reload was replacing at that moment): left out of the verdict counters and the flow log",
            registry=self.registry,
        )
        self.revoked = Counter(
            "pyclassify_revoked_connections", "Connections revoked by a policy change", registry=self.registry
        )
        self.restored = Counter(
            "pyclassify_restored_connections",
            "Revoked connections a later policy change allows again",
            registry=self.registry,
        )
        self.ct_deleted = Counter(
            "pyclassify_conntrack_deletes", "Kernel conntrack deletions by result", ["result"], registry=self.registry
        )
        self.revalidation_seconds = Histogram(
            "pyclassify_revalidation_seconds",
            "Swap + revalidation + conntrack deletion time",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
            registry=self.registry,
        )
        self.apply_seconds = Histogram(
            "pyclassify_policy_apply_seconds",
            "A change seen (file event, watch event) to the new engine in force (load, delta, swap)",
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.apply_stage_seconds = Histogram(
            "pyclassify_policy_apply_stage_seconds",
            "The parts of pyclassify_policy_apply_seconds: wait (the change seen to the load started: "
            "the watcher's quiet period), parse (read, parse, validate), build (the engine's delta), "
            "keep (each object's last good version kept), swap (events drained, the new engine into every loop)",
            ["stage"],
            buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.server: Any = None

    def count_verdicts(
        self, direction: str, tier: str | None, policy: str | None, rule: Any, action: str, n: int
    ) -> None:
        """``n`` verdicts of one rule (by direction and action only when rule labels are off)."""
        if self.rule_labels:
            self.verdicts.labels(direction, tier or "", policy or "", "" if rule is None else str(rule), action).inc(n)
        else:
            self.verdicts.labels(direction, action).inc(n)

    def serve(
        self,
        addr: str,
        ready: Callable[[], str | None] = lambda: None,
        healthy: Callable[[], str | None] = lambda: None,
    ) -> tuple[str, int]:
        """Serve /metrics, /readyz and /healthz on ``host:port`` (``:port`` or ``port``: the
        loopback); returns the bound address. ``ready`` and ``healthy`` return None when all is
        well, else why not (the 503's body)."""
        host, _, port = addr.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"--metrics expects HOST:PORT, got {addr!r}")
        host = host.strip("[]") or DEFAULT_HOST

        def app(request: Request) -> Response:
            if request.path in ("/readyz", "/healthz"):
                problem = (ready if request.path == "/readyz" else healthy)()
                return Response(200, b"ok\n") if problem is None else Response(503, f"{problem}\n".encode())
            encoder, content_type = choose_encoder(request.headers.get("accept", ""))
            registry: Any = self.registry
            names = parse_qs(request.query).get("name[]")
            if names:
                registry = registry.restricted_registry(names)
            body = encoder(registry)
            headers = []
            if gzip_accepted(request.headers.get("accept-encoding", "")):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            return Response(200, body, content_type, headers)

        self.server = BoundedServer(
            (host, int(port)),
            app,
            workers=WORKERS,
            max_connections=MAX_CONNECTIONS,
            request_timeout=REQUEST_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
            max_body=0,
            name="pyclassify-metrics",
        )
        self.server.start()
        return self.server.server_address[0], self.server.server_address[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
