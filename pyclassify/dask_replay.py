"""Flow records judged on a Dask cluster (``replay --traffic --scheduler ADDR``, ``--workers N``),
with the answer one process gives.

Partitions are files, and runs of row groups of a large Parquet file (its footer tells the rows
of each, so each part's rows are numbered as in the whole file): a task judges one natively on a
worker (``RecordReplay`` there, as in-process: chunks read and judged in Rust, no record through
Python) and returns its
``RecordSummary``, a few kilobytes of sums whatever the file's size. The summaries merge exactly
(``RecordSummary.merge``: sums add, the first examples in file order are kept), in a tree of
merge tasks on the workers whose adjacent groups keep file order, so the client receives one
summary. A record belongs to one file and a file's summary is taken whole from the one task that
finished it: a worker lost mid-run has its tasks run again elsewhere, and nothing is counted
twice or lost.

The engine is built once per worker and policy set: the client registers a worker plugin
(``EnginePlugin``) carrying the policy set and inventory, pickled, under a name that holds their
content hash; every worker, and any that joins later, builds the engine from it when the plugin
is set up, and the tasks find it by name. Tasks carry a file's path and never the manifests.
The files must be readable at the same paths on the workers (shared storage, or the same mount).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pyclassify.recordreplay import RecordReplay, RecordSummary, merge_summaries
from pyclassify.records import RecordError

try:
    from distributed import WorkerPlugin
except ImportError:  # the dask extra is not installed: ``run`` says so
    WorkerPlugin = object  # type: ignore[misc,assignment]  # a plain base, so that the module imports without dask

if TYPE_CHECKING:
    from distributed import Client

    from pyclassify.engine import NativeEngine

#: The environment variables naming the scheduler when ``--scheduler`` is not given (Dask's own
#: is read too, as Dask's clients read it).
SCHEDULER_ENV = ("PYCLASSIFY_SCHEDULER", "DASK_SCHEDULER_ADDRESS")
MERGE_FANIN = 8  # summaries merged by one merge task
#: rows of a Parquet file judged by one task: a larger file is cut between its row groups
PARTITION_ROWS = 4_000_000
PARQUET_MAGIC = b"PAR1"


class ClusterError(RuntimeError):
    """The cluster cannot be used as asked: the scheduler unreachable, workers of another
    version, the extra not installed, an input the workers cannot read."""


@functools.cache
def version() -> str:
    """This install's pyclassify version and engine ABI: workers must have the same (read once
    per process: every task asks)."""
    import pyclassify
    from pyclassify import _engine

    return f"{pyclassify.__version__} (engine ABI {_engine.ENGINE_ABI_VERSION})"


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ClusterError("running on a Dask cluster needs the dask extra: pip install 'pyclassify[dask]'") from None
    return distributed


def policy_blob(*sets: Any) -> tuple[str, bytes]:
    """Policy sets and their inventory (``(policy_set, inventory)``: one engine;
    ``(old, new, inventory)``: a diff's two), pickled, and a content hash naming them (with
    this install's version: another version builds another engine)."""
    blob = pickle.dumps(sets, protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(version().encode() + b"\0" + blob).hexdigest()[:24]
    return digest, blob


class EnginePlugin(WorkerPlugin):
    """The engine of one policy set (or a diff's two engines), built once on each worker (and
    on any that joins later) when the plugin is set up there."""

    def __init__(self, digest: str, blob: bytes, client_version: str, run: str) -> None:
        # the set's hash, and the run's: two runs of one set at once each remove only their own
        self.name = f"pyclassify-engine-{digest}-{run}"
        self.blob = blob
        self.client_version = client_version
        self.engine: Any = None
        self.services: Any = None
        self.diff: Any = None  # a diff's engines (``trafficdiff.DiffEngines``)
        self.build_seconds = 0.0
        self.builds = 0  # engines built by this plugin on its worker
        # puts the worker's malloc thresholds back when the plugin is removed (None: untouched)
        self.restore_allocator: Callable[[], None] | None = None
        self.tasks = 0  # files judged with it
        # idle judges that keep the keys they decided, by (default, logs): a file's records
        # repeat the keys of the files before it, decided once per worker, not once per task
        self.judges: dict[tuple[str | None, bool], list[Any]] = {}

    def take_judge(self, default: str | None, logs: bool) -> Any:
        """A judge of this engine (a diff's two) keeping its keys, for one task at a time
        (each thread of the worker takes its own)."""
        from pyclassify.recordreplay import new_judge

        idle = self.judges.setdefault((default, logs), [])
        try:
            return idle.pop()
        except IndexError:
            engines = [self.engine] if self.diff is None else [self.diff.old, self.diff.new]
            return new_judge(engines, default, self.services, logs=logs, keep_keys=True)

    def give_back(self, default: str | None, logs: bool, judge: Any) -> None:
        """A judge a task is done with, for the next."""
        self.judges.setdefault((default, logs), []).append(judge)

    def setup(self, worker: Any) -> None:
        if version() != self.client_version:
            return  # the task names the mismatch: an engine is not built from another version's set
        from pyclassify.allocator import hold_freed_memory
        from pyclassify.engine import NativeEngine
        from pyclassify.services import ServiceMap

        self.restore_allocator = hold_freed_memory()
        started = time.perf_counter()
        sets = pickle.loads(self.blob)
        if len(sets) == 3:
            from pyclassify.trafficdiff import DiffEngines

            self.diff = DiffEngines(*sets)
            self.engine, self.services = self.diff.old, self.diff.services
        else:
            self.engine = NativeEngine(*sets)
            self.services = ServiceMap(sets[1])
        self.build_seconds = time.perf_counter() - started
        self.builds += 1
        self.blob = b""  # built: the pickled set is not kept beside the engine

    def teardown(self, worker: Any) -> None:
        if self.restore_allocator is not None:
            self.restore_allocator()
            self.restore_allocator = None


def partitions(paths: list[str], rows: int = PARTITION_ROWS) -> list[tuple[str, tuple[int, int, int] | None]]:
    """The tasks of ``paths``, in order: each file whole, except a Parquet file of more than
    ``rows`` rows, cut between row groups into parts of about ``rows`` (first row group, end
    row group, first row), read from its footer here."""
    out: list[tuple[str, tuple[int, int, int] | None]] = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                parquet = f.read(4) == PARQUET_MAGIC
        except OSError:
            parquet = False  # the worker names what cannot be read
        if not parquet:
            out.append((path, None))
            continue
        try:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
        except Exception:  # noqa: BLE001 - not readable as Parquet here: the worker says why
            out.append((path, None))
            continue
        if meta.num_rows <= rows or meta.num_row_groups < 2:
            out.append((path, None))
            continue
        start, first_row, n = 0, 0, 0
        for g in range(meta.num_row_groups):
            n += meta.row_group(g).num_rows
            if n >= rows or g == meta.num_row_groups - 1:
                out.append((path, (start, g + 1, first_row)))
                start, first_row, n = g + 1, first_row + n, 0
    return out


def out_directory(out: str | None, error: type[Exception]) -> str | None:
    """``--out-dir``'s directory, made if missing, as an absolute path (the workers write there);
    ``error`` (the command's own) when it cannot be made."""
    if out is None:
        return None
    target = os.path.abspath(out)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as e:
        raise error(f"--out-dir {out}: cannot be made a directory: {e.strerror or e}") from None
    return target


def part_name(index: int) -> str:
    """The lines file of input file ``index`` (flow records) or of partition ``index``
    (captures) in ``--out-dir``'s directory."""
    return f"part-{index:05d}.jsonl"


def _plugin(plugin_name: str, client_version: str) -> tuple[Any, EnginePlugin]:
    """This worker, and its plugin of that name, counted as used by one more task."""
    from distributed import get_worker

    worker = get_worker()
    mine = version()
    if mine != client_version:
        raise ClusterError(
            f"worker {worker.address} runs pyclassify {mine}, the client {client_version}: "
            "install the same version on both"
        )
    plugin = cast("EnginePlugin | None", worker.plugins.get(plugin_name))  # the plugin registered under that name
    if plugin is None or plugin.engine is None:
        raise ClusterError(f"worker {worker.address}: the engine of this policy set was not built")
    plugin.tasks += 1
    return worker, plugin


def report_judged(plugin_name: str, records: int) -> None:
    """Tells the client following the run (``_on_cluster``'s progress) that a task of it judged
    ``records`` records or packets: an event on the topic of the run's plugin."""
    from distributed import get_worker

    get_worker().log_event(plugin_name, records)


def diff_file(
    plugin_name: str,
    client_version: str,
    path: str,
    name: str,
    format: str | None,
    default: str | None,
    rule_usage: bool = False,
) -> Any:
    """A task: one file's observed changes (``trafficdiff.TrafficDiff``) under the diff's two
    engines its plugin built."""
    from pyclassify.trafficdiff import traffic_diff

    _, plugin = _plugin(plugin_name, client_version)
    d = plugin.diff
    judge = plugin.take_judge(default, rule_usage)
    changes = traffic_diff(
        d.old_ps, d.new_ps, d.inventory, [path], format, default, rule_usage, engines=d, names=[name], judge=judge
    )
    plugin.give_back(default, rule_usage, judge)  # only after a run that ended cleanly
    return changes


def judge_file(
    plugin_name: str,
    client_version: str,
    path: str,
    name: str,
    format: str | None,
    default: str | None,
    logs: bool,
    out: str | None = None,
    part: tuple[int, int, int] | None = None,
) -> RecordSummary:
    """A task: one file judged on this worker with the engine its plugin built; with ``out``,
    its records' lines written there (put in place only when the file was judged whole: a task
    run again after a lost worker replaces it, never adds to it)."""
    worker, plugin = _plugin(plugin_name, client_version)
    if out is None:
        judge = plugin.take_judge(default, logs)
        replay = RecordReplay(
            plugin.engine, default=default, format=format, logs=logs, services=plugin.services, judge=judge
        )
        summary = replay.run([path], names=[name], parts=[part])
        # only a judge whose run ended cleanly is used again (an error leaves it as it was)
        plugin.give_back(default, logs, judge)
        report_judged(plugin_name, summary.totals[0])
        return summary
    from pyclassify.output import OutputFile

    try:
        lines = OutputFile("--out", out, binary=True)
    except OSError as e:
        raise RecordError(
            f"--out {out}: cannot open for writing on worker {worker.address}: {e.strerror or e}"
        ) from None
    judged = False
    try:
        replay = RecordReplay(
            plugin.engine,
            default=default,
            format=format,
            logs=logs,
            services=plugin.services,
            out=lines.file,
            out_name=out,
        )
        summary = replay.run([path], names=[name])
        judged = True
    finally:
        failure = lines.finish(judged)
    if failure is not None:
        raise RecordError(f"{failure} (on worker {worker.address})")
    report_judged(plugin_name, summary.totals[0])
    return summary


def write_index(directory: str, summary: RecordSummary) -> str:
    """``index.json`` of ``--out``'s directory: per input file, in order, its lines file, its
    records and the index its first line has in one run over all files (each file's lines
    number its records from 0)."""
    import json

    parts, first = [], 0
    for i, report in enumerate(summary.files):
        parts.append({"file": report.name, "lines": part_name(i), "records": report.records, "first_index": first})
        first += report.records
    path = os.path.join(directory, "index.json")
    from pyclassify.output import OutputFile

    index = OutputFile("--out", path, binary=False)
    index.file.write(json.dumps({"records": first, "parts": parts}, indent=1) + "\n")
    index.commit()
    return path


def engine_use(client: Client, plugin_name: str) -> dict[str, tuple[float, int, int]]:
    """Per worker, for the engine of the plugin ``plugin_name``: the seconds it took to build,
    how many times it was built and how many files it judged."""

    def use(dask_worker: Any) -> tuple[float, int, int]:
        plugin = dask_worker.plugins.get(plugin_name)
        return (0.0, 0, 0) if plugin is None else (float(plugin.build_seconds), plugin.builds, plugin.tasks)

    return dict(client.run(use))


def connect(scheduler: str | None, workers: int | None) -> tuple[Client, Any]:
    """A client of the scheduler at ``scheduler``, or of a local cluster of ``workers``
    processes (one thread each) started here; and that cluster (None: not ours)."""
    distributed = _import_distributed()
    if scheduler is None:
        cluster = distributed.LocalCluster(
            n_workers=workers or 1, threads_per_worker=1, processes=True, dashboard_address=None
        )
        return distributed.Client(cluster), cluster
    import dask

    # Dask's own setting (DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT), 30 s unless set
    timeout = dask.config.get("distributed.comm.timeouts.connect")
    try:
        return distributed.Client(scheduler, timeout=timeout), None
    except (OSError, TimeoutError, ValueError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None


def check_versions(client: Client) -> None:
    """Refuses workers whose pyclassify differs from this one's, naming them."""
    mine = version()
    try:
        theirs = client.run(version)
    except Exception as e:  # noqa: BLE001 - a worker without pyclassify at all fails the import
        raise ClusterError(f"the workers cannot run pyclassify {mine}: {e}") from None
    other = {w: v for w, v in theirs.items() if v != mine}
    if other:
        named = ", ".join(f"{w} runs {v}" for w, v in sorted(other.items()))
        raise ClusterError(
            f"workers of another pyclassify version than this client's {mine}: {named}; "
            "install the same version on every worker"
        )
    if not theirs:
        raise ClusterError("the cluster has no worker")


def _merge_tree(client: Client, parts: list[Any], token: str, merge: Callable[..., Any] = merge_summaries) -> Any:
    """A future of the parts' merged summary: adjacent groups merged on the workers, level by
    level, so file order is kept and no summary funnels through the client."""
    level = 0
    while len(parts) > 1:
        parts = [
            client.submit(merge, *parts[i : i + MERGE_FANIN], key=f"pyclassify-merge-{level}-{i}-{token}")
            for i in range(0, len(parts), MERGE_FANIN)
        ]
        level += 1
    return parts[0]


def _on_cluster(
    sets: tuple,
    paths: list[str],
    submit: Callable[[Client, str, str, int, Any, str], Any],
    merge: Callable[..., Any],
    empty: Callable[[], Any],
    scheduler: str | None,
    workers: int | None,
    progress: Callable[[int, int, int], None] | None,
    client: Client | None,
    items: list[Any] | Callable[[Client], list[Any]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The scaffolding of a run on the cluster: connect (or start a local cluster), check the
    workers' versions, register the engine plugin of ``sets``, one task a path, or an item of
    ``items`` when given (a list, or made from the client: ``items(client)``;
    ``submit(client, plugin, version, index, item, key)``), their results
    merged in a tree,
    the plugin removed at the end. Returns the merged result and what the run used. Ctrl-C:
    the tasks not finished are cancelled and the finished ones merged (``"interrupted"``)."""
    distributed = _import_distributed()
    for p in paths:
        if p == "-":
            raise ClusterError("-: standard input cannot be read by the workers: give files on storage they read")
    owned = None
    if client is None:
        client, owned = connect(scheduler, workers)
    try:
        check_versions(client)
        if callable(items):
            items = items(client)
        digest, blob = policy_blob(*sets)
        token = f"{digest[:8]}-{os.getpid()}-{time.monotonic_ns()}"
        plugin = EnginePlugin(digest, blob, version(), token)
        client.register_plugin(plugin, name=plugin.name)
        records = [0]  # judged by the tasks finished (a task run again counts again)

        def count(event: tuple[float, Any]) -> None:
            records[0] += int(event[1])

        if progress is not None:
            client.subscribe_topic(plugin.name, count)
        try:
            futures: list[Any] = []
            merged = None
            interrupted = False
            try:
                for i, p in enumerate(paths if items is None else items):
                    futures.append(submit(client, plugin.name, version(), i, p, f"pyclassify-judge-{i}-{token}"))
                merged = _merge_tree(client, futures, token, merge) if futures else None
                if progress is not None:
                    for n, _ in enumerate(distributed.as_completed(futures), 1):
                        progress(n, len(futures), records[0])
                result = merged.result() if merged is not None else empty()
            except KeyboardInterrupt:
                # as in-process: what was judged is the answer, the rest is dropped on the cluster
                interrupted = True
                # the scheduler's word on which results are held (this client may not have
                # heard yet of a task that finished just before the interrupt)
                held = client.who_has(futures)
                done = [f for f in futures if f.status == "finished" or held.get(f.key)]
                kept = {f.key for f in done}
                dropped = [f for f in futures if f.key not in kept]
                client.cancel(dropped + ([merged] if merged is not None else []))
                parts = client.gather(done) if done else []
                result = merge(*parts) if parts else empty()
                if hasattr(result, "interrupted"):  # a summary (not a diff)
                    result.interrupted = True
            use = engine_use(client, plugin.name)
        finally:
            if progress is not None:
                client.unsubscribe_topic(plugin.name)
            client.unregister_worker_plugin(plugin.name)
        info = {
            "scheduler": client.scheduler.address,
            "workers": len(use),
            "tasks": len(paths if items is None else items),
            "engine_seconds": {w: u[0] for w, u in use.items()},
            "engine_builds": {w: u[1] for w, u in use.items()},
            "tasks_by_worker": {w: u[2] for w, u in use.items()},
            "interrupted": interrupted,
        }
    finally:
        if owned is not None:
            client.close()
            owned.close()
    return result, info


def run(
    engine: NativeEngine,
    paths: list[str],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    format: str | None = None,
    default: str | None = None,
    logs: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
    client: Client | None = None,
    out: str | None = None,
    partition_rows: int = PARTITION_ROWS,
) -> tuple[RecordSummary, dict[str, Any]]:
    """Judges ``paths`` on the cluster (one task a file, a Parquet file of more than
    ``partition_rows`` rows cut between row groups): the merged summary, and what the run
    used (``{"scheduler", "workers", "tasks"}``, and per worker ``engine_seconds``,
    ``engine_builds`` and ``tasks_by_worker``: the files it judged). ``progress(done, total,
    records)`` is called as tasks finish, with the records the finished tasks judged. ``out``:
    a directory the workers write each file's lines to (``part-NNNNN.jsonl``, numbered as
    ``paths``), with ``index.json`` written here at the end."""
    started = time.perf_counter()
    target = out_directory(out, RecordError)

    # with --out-dir, one lines file per input file: files are not cut
    tasks = [(p, None) for p in paths] if target is not None else partitions(paths, partition_rows)

    def submit(client: Client, plugin: str, mine: str, i: int, path: str, key: str) -> Any:
        return client.submit(
            judge_file,
            plugin,
            mine,
            os.path.abspath(path),
            path,
            format,
            default,
            logs,
            None if target is None else os.path.join(target, part_name(i)),
            tasks[i][1],
            key=key,
        )

    summary, info = _on_cluster(
        (engine.policy_set, engine.inventory),
        [p for p, _ in tasks],
        submit,
        merge_summaries,
        RecordSummary,
        scheduler,
        workers,
        progress,
        client,
    )
    if out is not None:
        info["index"] = write_index(out, summary)
    summary.seconds = time.perf_counter() - started
    return summary, info


def run_diff(
    old_ps: Any,
    new_ps: Any,
    inventory: Any,
    paths: list[str],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    format: str | None = None,
    default: str | None = None,
    client: Client | None = None,
    rule_usage: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """``diff --traffic`` on the cluster: each file's observed changes found on a worker with
    the two engines built there once, merged exactly (``TrafficDiff.merge``); with
    ``rule_usage``, what each rule of the old set decided too."""
    from pyclassify.trafficdiff import merge_diffs

    started = time.perf_counter()

    def submit(client: Client, plugin: str, mine: str, i: int, path: str, key: str) -> Any:
        return client.submit(diff_file, plugin, mine, os.path.abspath(path), path, format, default, rule_usage, key=key)

    def empty() -> Any:
        from pyclassify.trafficdiff import traffic_diff

        return traffic_diff(old_ps, new_ps, inventory, [], rule_usage=rule_usage)

    result, info = _on_cluster(
        (old_ps, new_ps, inventory), paths, submit, merge_diffs, empty, scheduler, workers, None, client
    )
    result.seconds = time.perf_counter() - started
    return result, info


__all__ = [
    "SCHEDULER_ENV",
    "ClusterError",
    "check_versions",
    "connect",
    "diff_file",
    "judge_file",
    "run",
    "run_diff",
    "version",
]
