"""Captures judged on a Dask cluster (``replay --pcap ... --scheduler ADDR``, ``--workers N``),
with the answer one process gives.

Every packet of a connection must be judged in order by one tracker, and every packet should be
read once. So the run is a shuffle by connection (``pyclassify.capturepartition``): one task per
capture reads and decodes it once and splits each batch among ``P`` partitions by the hash of
each packet's connection key (vectorised, no Python step per packet), keeping the decoded
headers and the payload bytes the judging needs (DNS answers, TCP payloads for http rules); one
task per partition takes its share of every capture, in capture order, and judges it with its
own tracker. The packets of DNS connections go to every partition, so domain rules see the same
answers at the same packets as in one process. The partitions' summaries merge exactly
(``ReplaySummary.merge``: counts add, connections are counted in one partition each), in the
tree of merge tasks ``replay --traffic`` uses (``pyclassify.dask_replay``), with the same
engine plugin and the same refusals (scheduler unreachable, another version, ``-``). A worker
lost mid-run: Dask reads its captures again from their files and judges its partitions again
elsewhere; a partition's summary is taken whole from the task that finished it, so nothing is
lost or counted twice.

Why a shuffle and not file x time-window partitions with the open connections carried across:
measured (bench/README.md, "Captures on a Dask cluster"), reading and decoding is about a quarter
of a replay and judging established packets is cheap, so what must not be repeated is the read;
a shuffle reads once and needs no tracker state passed between tasks (a window chain would have
to carry every open connection's TCP, http and DNS state, and its windows run one after the
other). The earlier design, every partition reading every capture, cost each partition 71-121 %
of a whole replay. What a shuffle costs: a capture is read by one task, so a single capture is
read at one task's pace (rotated captures, several files, read in parallel); the decoded headers
(some 100 bytes a packet) cross between workers once.

With domain rules or staged policies each task builds its own engine (the domain facts a
capture teaches are the task's own; a staged engine is a delta on its engine's state), the
plugin's engine otherwise. Per-packet and per-flow lines (``--out``) and the ``--allowed`` /
``--denied`` captures are written in-process only.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyclassify import dask_replay
from pyclassify.replay import ReplaySummary
from pyclassify.tunnels import DEFAULT_TUNNELS, TunnelPorts

if TYPE_CHECKING:
    from distributed import Client

    from pyclassify.capturepartition import PartitionReplay
    from pyclassify.engine import NativeEngine


@dataclass
class CaptureOptions:
    """How every partition replays the captures (as ``Replay``'s options of the same names)."""

    conntrack: bool = True
    default: str | None = None
    tunnels: TunnelPorts = DEFAULT_TUNNELS
    dns_grace: int = 0


@dataclass
class PartitionResult:
    """What a partition (or a merge of them, in partition order) returns: its summary, what
    DNS taught (the same in every partition: the first's), its trackers' stats (summed)."""

    summary: ReplaySummary = field(default_factory=ReplaySummary)
    dns: dict[str, Any] | None = None
    conntrack: dict[str, int] | None = None
    engines_built: int = 0  # engines built by the tasks themselves (domain rules, staged policies)
    packets_by_partition: list[int] = field(default_factory=list)  # in partition order


def merge_results(*parts: PartitionResult) -> PartitionResult:
    merged = PartitionResult()
    for part in parts:
        merged.summary.merge(part.summary)
        if merged.dns is None:
            merged.dns = part.dns
        if part.conntrack is not None:
            merged.conntrack = {
                k: (merged.conntrack or {}).get(k, 0) + v
                for k, v in part.conntrack.items()
                if isinstance(v, (int, float))
            }
        merged.engines_built += part.engines_built
        merged.packets_by_partition += part.packets_by_partition
    return merged


def replay_for(engine: NativeEngine, options: CaptureOptions, part: int = 0, parts: int = 1) -> PartitionReplay:
    """The ``Replay`` of partition ``part`` of ``parts`` with ``engine`` (built over an
    inventory whose domain facts are its own, when the policies have domain rules)."""
    from pyclassify import domains, httprules
    from pyclassify.capturepartition import PartitionReplay

    dns = None
    if engine.inventory.domains is not None:
        dns = domains.DnsLearner(engine.inventory.domains)
    view = engine.policy_set.staged_view()
    staged = None if view is None else engine.update(view, engine.inventory)
    return PartitionReplay(
        engine,
        part,
        parts,
        conntrack=options.conntrack,
        default=options.default,
        staged=staged,
        dns=dns,
        http=httprules.has_http_rules(engine.policy_set),
        tunnels=options.tunnels,
    )


def read_capture(
    client_version: str, path: str, parts: int, options: CaptureOptions, dns: bool, http: bool, index: bool = False
) -> Any:
    """A task: the capture at ``path`` read once on this worker and split among ``parts``
    partitions by connection (``capturepartition.route``; ``index``: each packet's index kept,
    for the lines the partitions write)."""
    from pyclassify.capturepartition import route

    mine = dask_replay.version()
    if mine != client_version:
        raise dask_replay.ClusterError(
            f"a worker runs pyclassify {mine}, the client {client_version}: install the same version on both"
        )
    return route(path, parts, tunnels=options.tunnels, dns=dns, http=http, index=index)


def share_of(routed: Any, part: int) -> Any:
    """A task, run where the capture was read: partition ``part``'s share of it."""
    return routed.share(part)


def moved(share: Any) -> Any:
    """A task that holds ``share`` where it runs: run on a partition's worker, it brings a
    capture's share there as soon as it is read."""
    return share


def judge_partition(
    plugin_name: str,
    client_version: str,
    shares: list[Any],
    part: int,
    parts: int,
    options: CaptureOptions,
    out: str | None = None,
) -> PartitionResult:
    """A task: partition ``part`` of ``parts``, its share of every capture (``shares``, in the
    captures' order, as ``read_capture`` split them) judged on this worker; with ``out``, its
    packets' lines written there (put in place only when the partition was judged whole: a task
    run again after a lost worker replaces it, never adds to it)."""
    from pyclassify import domains
    from pyclassify.engine import NativeEngine

    _, plugin = dask_replay._plugin(plugin_name, client_version)
    engine = plugin.engine
    built = 0
    if domains.has_domain_rules(engine.policy_set) or engine.policy_set.staged_view() is not None:
        inventory = dataclasses.replace(engine.inventory)
        if domains.has_domain_rules(engine.policy_set):
            inventory.domains = domains.new_facts(options.dns_grace)
        engine, built = NativeEngine(engine.policy_set, inventory), 1
    replay = replay_for(engine, options, part, parts)
    if out is None:
        replay.judge_routed(shares)
    else:
        _judge_into(replay, shares, out)
    dask_replay.report_judged(plugin_name, replay.summary.packets)
    return PartitionResult(
        replay.summary,
        None if replay.dns is None else replay.dns.to_json(),
        None if replay.tracker is None else replay.tracker.stats(),
        built,
        [replay.summary.packets],
    )


def _judge_into(replay: PartitionReplay, shares: list[Any], out: str) -> None:
    """``replay`` judges ``shares`` with its lines written to ``out``, put in place only when
    every share was judged."""
    from distributed import get_worker

    from pyclassify.output import OutputFile
    from pyclassify.replay import ReplayError

    worker = get_worker().address
    try:
        lines = OutputFile("--out-dir", out, binary=False)
    except OSError as e:
        raise ReplayError(f"--out-dir {out}: cannot open for writing on worker {worker}: {e.strerror or e}") from None
    judged = False
    try:
        replay.out = lines.file
        replay.judge_routed(shares)
        judged = True
    finally:
        failure = lines.finish(judged)
    if failure is not None:
        raise ReplayError(f"{failure} (on worker {worker})")


def write_index(directory: str, result: PartitionResult) -> str:
    """``index.json`` of ``--out-dir``: per partition, its lines file (each line a packet the
    partition counted, in capture order, numbered as in one run over every capture) and its
    packets."""
    import json

    from pyclassify.output import OutputFile

    parts = [
        {"partition": k, "lines": dask_replay.part_name(k), "packets": n}
        for k, n in enumerate(result.packets_by_partition)
    ]
    path = os.path.join(directory, "index.json")
    index = OutputFile("--out-dir", path, binary=False)
    index.file.write(json.dumps({"packets": sum(result.packets_by_partition), "parts": parts}, indent=1) + "\n")
    index.commit()
    return path


def run(
    engine: NativeEngine,
    paths: list[str],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    options: CaptureOptions | None = None,
    parts: int | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    client: Client | None = None,
    out: str | None = None,
) -> tuple[dict[str, Any], PartitionResult, dict[str, Any]]:
    """Replays ``paths`` on the cluster in ``parts`` partitions (default: one a worker
    thread): one task reads each capture and splits it by connection, one task a partition
    judges its share of every capture; returns the summary as ``Replay.summary_json`` gives it
    in-process (its ``conntrack``: the partitions' trackers' stats summed, DNS connections
    counted in each), the merged result, and what the run used (as ``dask_replay.run``'s, with
    ``partitions``). ``out``: a directory the partitions write their packets' lines to
    (``part-NNNNN.jsonl``, by partition), with ``index.json`` written here at the end."""
    from pyclassify import domains, httprules

    opts = options or CaptureOptions()
    started = time.perf_counter()
    for p in paths:
        if p == "-":
            raise dask_replay.ClusterError(
                "-: standard input cannot be read by the workers: give files on storage they read"
            )
    absolute = [os.path.abspath(p) for p in paths]
    from pyclassify.replay import ReplayError

    target = dask_replay.out_directory(out, ReplayError)
    dns = domains.has_domain_rules(engine.policy_set)
    http = opts.conntrack and httprules.has_http_rules(engine.policy_set)
    chosen: list[int] = []
    reads: list[Any] = []
    read_count: list[int] = []
    run_token = f"{os.getpid()}-{time.monotonic_ns()}"

    slots: list[str] = []  # a worker's address once per thread, in a fixed order

    def partitions(client: Client) -> list[int]:
        threads = client.nthreads()
        slots.extend(w for w in sorted(threads) for _ in range(threads[w]))
        count = parts or max(1, len(slots))
        chosen.append(count)
        return list(range(count))

    def placed(index: int) -> dict[str, Any]:
        # Where a task should run (Dask moves it elsewhere if that worker is gone): the reads
        # spread evenly over the workers' threads, and partition k's shares sent to partition
        # k's worker as soon as each is read, not when the last capture is.
        return {"workers": [slots[index % len(slots)]], "allow_other_workers": True} if slots else {}

    def submit(client: Client, plugin: str, mine: str, i: int, part: int, key: str) -> Any:
        if i == 0:  # each capture read once, by one task
            for j, path in enumerate(absolute):
                key_j = f"pyclassify-read-{j}-{run_token}"
                reads.append(
                    client.submit(
                        read_capture, mine, path, chosen[0], opts, dns, http, target is not None, key=key_j, **placed(j)
                    )
                )
            read_count.append(len(reads))
        shares = []
        for j, r in enumerate(reads):
            # cut where the capture was read, then moved whole to the partition's worker
            share = client.submit(share_of, r, part, key=f"pyclassify-share-{j}-{part}-{run_token}", **placed(j))
            shares.append(client.submit(moved, share, key=f"pyclassify-moved-{j}-{part}-{run_token}", **placed(part)))
        lines = None if target is None else os.path.join(target, dask_replay.part_name(part))
        judge = client.submit(
            judge_partition, plugin, mine, shares, part, chosen[0], opts, lines, key=key, **placed(part)
        )
        if i == chosen[0] - 1:
            # every partition's tasks hold the reads now: held here, a capture's decoded packets
            # would stay on the cluster until the run ends, not until its last share is moved
            reads.clear()
        return judge

    # the facts an engine here learned are not sent: each task learns its own from the captures
    inventory = engine.inventory
    if inventory.domains is not None:
        inventory = dataclasses.replace(inventory, domains=None)
    result, info = dask_replay._on_cluster(
        (engine.policy_set, inventory),
        paths,
        submit,
        merge_results,
        PartitionResult,
        scheduler,
        workers,
        progress,
        client,
        items=partitions,
    )
    if info["interrupted"]:  # Ctrl-C: the partitions judged whole, a part of every capture
        result.summary.interrupted = True
    result.summary.seconds = time.perf_counter() - started
    info["partitions"] = chosen[0] if chosen else 0
    info["reads"] = read_count[0] if read_count else 0
    if target is not None and not result.summary.interrupted:
        info["index"] = write_index(target, result)
    return summary_json(engine, result, opts), result, info


def summary_json(engine: NativeEngine, result: PartitionResult, options: CaptureOptions) -> dict[str, Any]:
    """``result`` as ``Replay.summary_json`` writes a summary (rules named by ``engine``)."""
    replay = replay_for(engine, options)
    replay.summary = result.summary
    doc = replay.summary_json()
    doc["dns"] = result.dns
    doc["conntrack"] = result.conntrack
    return doc


__all__ = [
    "CaptureOptions",
    "PartitionResult",
    "judge_partition",
    "merge_results",
    "moved",
    "read_capture",
    "run",
    "share_of",
    "summary_json",
    "write_index",
]
