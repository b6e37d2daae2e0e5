"""``replay --traffic`` on Dask against in-process, in one run: the same archive judged in-process
(the baseline), on a cluster of one worker process and of two; the engine's build time on a
worker, the cost of a task that judges nothing, and a summary's merge; and the model those
measured costs give for 1 billion records on 10, 100 and 1,000 workers.

    .venv/bin/python -m bench.dask_scaling [--records 10000000] [--files 40] [--pods 10000]
    .venv/bin/python -m bench.dask_scaling --captures [--packets 10000000] [--capture-files 10] [--flows 40000]

``--captures``: ``replay --pcap`` instead (``pyclassify.dask_capture``): rotated captures of
the generated cluster's connections (``bench.cluster.write_capture``, as
``bench/test_bench_scale.py`` makes it; one file of ``--packets / --capture-files`` packets
linked ``--capture-files`` times) read and decoded alone, judged in-process, read and split by
connection (the reading tasks' work), one partition's share judged, and on a cluster of one
worker and of two; each Dask answer checked against in-process.

The archive is VPC Flow Logs text of the generated cluster's traffic (``bench.flowrecords``):
one file written and linked ``--files`` times (each path one partition), so the disk holds one.
Worker processes are started by ``distributed.LocalCluster`` (one thread each) before the
clock starts; each run is timed from the call to the merged summary in the client's hands.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.cluster import generate, write_json_compact
from bench.flowrecords import write
from pyclassify import dask_replay
from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay, merge_summaries

BILLION = 1_000_000_000


def _archive(directory: Path, pods: int, records: int, files: int) -> tuple[Path, list[str]]:
    cluster = generate(pods, seed=1)
    cluster_json = write_json_compact(cluster, directory / "cluster.json")
    one = write(cluster, directory / "part-000.vpc", "vpc", records // files)
    paths = [str(one)]
    for i in range(1, files):
        linked = directory / f"part-{i:03d}.vpc"
        os.link(one, linked)
        paths.append(str(linked))
    return cluster_json, paths


def _in_process(engine: NativeEngine, paths: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    summary = RecordReplay(engine).run(paths)
    return time.perf_counter() - started, summary.totals[0]


def _on_dask(engine: NativeEngine, paths: list[str], workers: int, repeat: int) -> tuple[list[float], dict, int]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        times, info, total = [], {}, 0
        for _ in range(repeat):
            started = time.perf_counter()
            summary, info = dask_replay.run(engine, paths, client=client)
            times.append(time.perf_counter() - started)
            total = summary.totals[0]
        return times, info, total


def _empty_tasks(engine: NativeEngine, directory: Path, tasks: int, workers: int) -> tuple[float, float]:
    """A run's fixed cost (versions checked, the engine's plugin registered and removed) and
    the wall time of each further task, from runs of 1 and of ``tasks`` files with no record
    on ``workers`` workers: what a partition costs beyond its records (scheduling, the task's
    round trips, its summary's transfer and merge)."""
    from distributed import Client, LocalCluster

    empty = directory / "empty.vpc"
    empty.write_bytes(b"")
    paths = []
    for i in range(tasks):
        p = directory / f"empty-{i:04d}.vpc"
        if not p.exists():
            os.link(empty, p)
        paths.append(str(p))
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        dask_replay.run(engine, paths[:workers], client=client, format="vpc")  # warm: imports, connections
        ones, manys = [], []
        for _ in range(3):
            started = time.perf_counter()
            dask_replay.run(engine, paths[:1], client=client, format="vpc")
            ones.append(time.perf_counter() - started)
            started = time.perf_counter()
            dask_replay.run(engine, paths, client=client, format="vpc")
            manys.append(time.perf_counter() - started)
    one, many = statistics.median(ones), statistics.median(manys)
    return one, (many - one) / (tasks - 1)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scheduler_cpu_per_task(engine: NativeEngine, directory: Path, tasks: int, workers: int = 2) -> float:
    """The scheduler's own CPU time per task: a real ``dask scheduler`` process and ``workers``
    ``dask worker`` processes (``tests.dask_cluster``), the scheduler's CPU time read from
    ``/proc`` around runs of 1 and of ``tasks`` files with no record, the difference per
    further task. What the scheduler spends on a task one after the other, whatever else
    shares its core on this machine (its wall time per task, above, does not separate them)."""
    from distributed import Client

    from tests import dask_cluster

    paths = [str(directory / f"empty-{i:04d}.vpc") for i in range(tasks)]  # made by _empty_tasks
    running = dask_cluster.start(directory / "scheduler-cpu", workers)
    try:
        assert running.scheduler is not None
        pid = running.scheduler.pid
        with Client(running.address, timeout=dask_cluster.STARTUP) as client:
            dask_replay.run(engine, paths[:workers], client=client, format="vpc")  # warm
            ones, manys = [], []
            for _ in range(3):
                before = _cpu_seconds(pid)
                dask_replay.run(engine, paths[:1], client=client, format="vpc")
                ones.append(_cpu_seconds(pid) - before)
                before = _cpu_seconds(pid)
                dask_replay.run(engine, paths, client=client, format="vpc")
                manys.append(_cpu_seconds(pid) - before)
    finally:
        running.stop()
    return max(statistics.median(manys) - statistics.median(ones), 0.0) / (tasks - 1)


def _merge_seconds(engine: NativeEngine, path: str, n: int = 200) -> float:
    part = RecordReplay(engine).run([path])
    started = time.perf_counter()
    merge_summaries(*([part] * n))
    return (time.perf_counter() - started) / n


def model(
    rate: float,
    per_task: float,
    scheduler_per_task: float,
    merge: float,
    fixed: float,
    partition: int,
    workers: int,
    ideal_rate: float | None = None,
) -> tuple[float, float, str]:
    """Seconds for 1e9 records on ``workers`` workers, the efficiency (ideal: each worker
    judging its share at ``rate`` and nothing else), and what limits it. Tasks: 1e9 /
    ``partition``, each costing a worker ``per_task`` beyond its records; the scheduler spends
    ``scheduler_per_task`` on each, one after the other; summaries merge on the workers in a
    tree of fan-in 8 whose levels follow one another; the run's ``fixed`` cost once (measured
    as a run of one empty file: the versions checked, the engine's plugin registered, the
    engine built on each worker at once, removed). The ideal is at ``ideal_rate`` (one process
    judging; ``rate`` unless given), so a worker's slower judging counts against the
    efficiency."""
    tasks = -(-BILLION // partition)
    work = -(-tasks // workers) * (partition / rate + per_task)  # the busiest worker's tasks
    scheduling = tasks * scheduler_per_task
    levels, width = 0, tasks
    while width > 1:
        width = -(-width // 8)
        levels += 1
    tail = levels * 8 * merge
    total = max(work, scheduling) + tail + fixed
    ideal = BILLION / (ideal_rate or rate) / workers
    if scheduling > work:
        limit = "the scheduler"
    elif tasks < workers or -(-tasks // workers) * partition > 1.1 * BILLION / workers:
        limit = "too few tasks for the workers"
    elif tail > 0.1 * total:
        limit = "the merge"
    else:
        limit = "the workers"
    return total, ideal / total, limit


def capture_model(
    read: float, judge: float, fixed: float, scheduler_per_task: float, file_packets: int, workers: int, ideal: float
) -> tuple[float, float, str, int]:
    """Seconds for 1e9 packets in captures of ``file_packets`` each on ``workers`` workers of
    one thread, the efficiency against one process judging at ``ideal`` seconds a packet spread
    evenly, what limits it, and the tasks. Each capture is one read task (``read`` seconds a
    packet: read, decode, split); one partition a worker judges its 1e9 / ``workers`` packets
    (``judge`` a packet) once every read is done; each capture's share for each partition is
    two tasks (cut, moved), so the scheduler handles 2 x files x workers of them, at
    ``scheduler_per_task`` each, one after the other; the run's ``fixed`` cost once. The
    shares' transfer is not in it (on one machine it is inside the measured costs)."""
    files = -(-BILLION // file_packets)
    tasks = files + 2 * files * workers + workers + -(-workers // 7)
    work = -(-files // workers) * file_packets * read + BILLION / workers * judge
    scheduling = tasks * scheduler_per_task
    total = max(work, scheduling) + fixed
    if scheduling > work:
        limit = "the scheduler"
    elif files < workers:
        limit = "too few captures to read in parallel"
    else:
        limit = "the workers"
    return total, BILLION * ideal / workers / total, limit, tasks


def _timed(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The least of ``repeat`` runs' wall seconds and of their CPU seconds (this process's): the
    cost with the least interference from what else runs on the machine."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def captures_main(args: argparse.Namespace) -> None:
    """``--captures``: the module documentation's second mode. Wall time and CPU time both: CPU
    time (``time.process_time``, of this process or of each worker's) is what a part costs
    whatever else runs on the machine; wall time is what one waits here."""
    from distributed import Client, LocalCluster

    from bench.cluster import write_capture
    from pyclassify import dask_capture
    from pyclassify.capture import open_capture
    from pyclassify.capturepartition import route
    from pyclassify.replay import Replay

    with tempfile.TemporaryDirectory(prefix="dask-scaling-") as tmp:
        directory = Path(tmp)
        cluster = generate(args.pods, seed=1)
        cluster_json = write_json_compact(cluster, directory / "cluster.json")
        first = directory / "cluster-000.pcap"
        write_capture(cluster, first, args.packets // args.files, args.flows, seed=1)
        paths = [str(first)]
        for i in range(1, args.files):  # rotated captures: one file linked, the disk holds one
            paths.append(str(directory / f"cluster-{i:03d}.pcap"))
            os.link(first, paths[-1])
        project = load_project([str(cluster_json)])
        engine = NativeEngine(project.policy_set, project.inventory)

        def read() -> int:
            n = 0
            for path in paths:
                with open_capture(path, stream=True) as cap:  # as Replay reads it
                    for batch in cap:
                        n += len(batch)
            return n

        packets = read()
        print(
            f"capture: {packets:,} packets in {args.files} files of {args.flows:,} connections each "
            f"({os.path.getsize(first) / 1e6 * args.files:,.0f} MB), {args.pods:,} pods; in one process the "
            f"least of {args.repeat} runs, wall / CPU; on Dask medians"
        )
        floor = _timed(read, args.repeat)
        print(f"read + decode alone: {floor[0]:.2f} s / {floor[1]:.2f} s")
        whole = Replay(engine)
        whole.run(paths)
        expected = whole.summary_json()
        base = _timed(lambda: Replay(engine).run(paths), args.repeat)
        print(
            f"in-process: {base[0]:.2f} s / {base[1]:.2f} s, {packets / base[1] / 1e6:.2f} M packets per CPU second; "
            f"read + decode {100 * floor[1] / base[1]:.0f} % of its CPU time"
        )
        options = dask_capture.CaptureOptions()
        split = _timed(lambda: [route(p, 2) for p in paths], args.repeat)
        print(
            f"read + split in 2 (the reading tasks' work): {split[0]:.2f} s / {split[1]:.2f} s, "
            f"{100 * split[1] / base[1]:.0f} % of the whole's CPU time"
        )
        judge4 = 0.0
        for parts in (1, 2, 4):
            shares = [route(p, parts).share(0) for p in paths]
            judge = _timed(lambda s=shares, n=parts: dask_capture.replay_for(engine, options, 0, n).judge_routed(s), 1)
            judge4 = judge[1]
            print(
                f"judging one partition of {parts} from its shares: {judge[0]:.2f} s / {judge[1]:.2f} s, "
                f"{100 * judge[1] / base[1]:.0f} % of the whole's CPU time"
            )
            del shares
        work = ("seconds", "packets_per_second", "conntrack", "cluster")
        walls_by: dict[int, float] = {}
        for workers in (1, 2):
            with (
                LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
                Client(lc) as client,
            ):
                walls, busiest = [], []
                for _ in range(args.repeat):
                    before = client.run(time.process_time)
                    started = time.perf_counter()
                    doc, _, info = dask_capture.run(engine, paths, client=client)
                    walls.append(time.perf_counter() - started)
                    after = client.run(time.process_time)
                    busiest.append(max(after[w] - before[w] for w in after))
                    got = {k: v for k, v in doc.items() if k not in work}
                    assert got == {k: v for k, v in expected.items() if k not in work}, "not the in-process answer"
            walls_by[workers] = statistics.median(walls)
            print(
                f"dask, {workers} worker{'s' if workers > 1 else ''} ({info['partitions']} partition"
                f"{'s' if workers > 1 else ''}, {info['reads']} reading tasks): {walls_by[workers]:.2f} s wall "
                f"({', '.join(f'{t:.2f}' for t in walls)}), {packets / walls_by[workers] / 1e6:.2f} M packets/s; "
                f"the busiest worker's CPU {statistics.median(busiest):.2f} s; the answer is the in-process one"
            )
        print(
            f"dask 1 worker / in-process, wall: {walls_by[1] / base[0]:.2f}x; "
            f"2 workers vs 1: {walls_by[1] / walls_by[2]:.2f}x faster (ideal 2x)"
        )
        # the model's costs: a read task's CPU a packet (split in 2), a partition's judging a
        # packet (one of 4), the run's fixed cost (a run of a one-packet capture on 2 workers)
        tiny = directory / "one.pcap"
        write_capture(cluster, tiny, 3, 1, seed=1)  # one connection's handshake
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
            Client(lc) as client,
        ):
            fixed_runs = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                dask_capture.run(engine, [str(tiny)], client=client)
                fixed_runs.append(time.perf_counter() - started)
        fixed = statistics.median(fixed_runs)
        read_cost, judge_cost, ideal = split[1] / packets, judge4 * 4 / packets, base[1] / packets
        print(
            f"model inputs: a read task {read_cost * 1e9:.0f} ns a packet, judging {judge_cost * 1e9:.0f} ns a "
            f"packet (one partition of 4), the run's fixed cost {fixed:.2f} s, the scheduler "
            f"{args.scheduler_ms:.2f} ms a task (--scheduler-ms, from the flow-record runs); one process "
            f"{ideal * 1e9:.0f} ns a packet"
        )
        for file_packets in (1_000_000, 10_000_000):
            for workers in (10, 100, 1000):
                total, efficiency, limit, tasks = capture_model(
                    read_cost, judge_cost, fixed, args.scheduler_ms / 1000, file_packets, workers, ideal
                )
                print(
                    f"  1e9 packets in captures of {file_packets:,}, {workers:>4} workers: {total:8.1f} s, "
                    f"{100 * efficiency:5.1f} % efficient, {tasks:,} tasks; limit: {limit}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--empty-tasks", type=int, default=200)
    ap.add_argument("--captures", action="store_true", help="replay --pcap instead of --traffic")
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument("--flows", type=int, default=40_000)
    ap.add_argument("--capture-files", dest="files_of_packets", type=int, default=10)
    ap.add_argument("--scheduler-ms", type=float, default=1.5, help="the scheduler's CPU per task, for the model")
    args = ap.parse_args()
    if args.captures:
        args.files = args.files_of_packets
        captures_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="dask-scaling-") as tmp:
        directory = Path(tmp)
        cluster_json, paths = _archive(directory, args.pods, args.records, args.files)
        project = load_project([str(cluster_json)])
        started = time.perf_counter()
        engine = NativeEngine(project.policy_set, project.inventory)
        build_here = time.perf_counter() - started
        here = [_in_process(engine, paths) for _ in range(args.repeat)]
        base = statistics.median(t for t, _ in here)
        records = here[0][1]
        print(
            f"archive: {records:,} records in {len(paths)} files of {records // len(paths):,} "
            f"({os.path.getsize(paths[0]) * len(paths) / 1e6:,.0f} MB), {args.pods:,} pods"
        )
        print(
            f"in-process: {base:.2f} s, {records / base / 1e6:.2f} M records/s (median of {args.repeat}); "
            f"engine built in {build_here:.3f} s"
        )
        runs = {}
        for workers in (1, 2):
            times, info, total = _on_dask(engine, paths, workers, args.repeat)
            assert total == records, (total, records)
            runs[workers] = statistics.median(times)
            builds = info["engine_seconds"].values()
            print(
                f"dask, {workers} worker{'s' if workers > 1 else ''}: {runs[workers]:.2f} s "
                f"({', '.join(f'{t:.2f}' for t in times)}), {records / runs[workers] / 1e6:.2f} M records/s; "
                f"engine on a worker {max(builds):.3f} s"
            )
        print(
            f"dask 1 worker / in-process: {runs[1] / base:.3f}x the time (overhead {100 * (runs[1] / base - 1):+.1f} %)"
        )
        # A Dask run builds the engine on its worker inside the clock; the in-process command
        # builds it too: the same comparison with the build counted on both sides.
        whole = base + build_here
        print(
            f"dask 1 worker / in-process with its engine build ({whole:.2f} s): {runs[1] / whole:.3f}x the time "
            f"(overhead {100 * (runs[1] / whole - 1):+.1f} %)"
        )
        print(f"dask 2 workers vs 1: {runs[1] / runs[2]:.2f}x (scaling efficiency {100 * runs[1] / runs[2] / 2:.0f} %)")
        fixed, per_task = _empty_tasks(engine, directory, args.empty_tasks, 1)
        fixed2, scheduler_per_task = _empty_tasks(engine, directory, args.empty_tasks, 2)
        print(f"a run's fixed cost (versions, the engine's plugin): {fixed:.3f} s on 1 worker, {fixed2:.3f} s on 2")
        print(
            f"a task of no record: {per_task * 1e3:.2f} ms of wall time each on 1 worker (what a partition costs "
            f"beyond its records), {scheduler_per_task * 1e3:.2f} ms each on 2 workers "
            f"({1 / scheduler_per_task:,.0f} tasks/s through the scheduler: a lower bound of what it hands out)"
        )
        scheduler_cpu = _scheduler_cpu_per_task(engine, directory, args.empty_tasks)
        print(
            f"the scheduler's own CPU time per task (a `dask scheduler` process, 2 `dask worker`s): "
            f"{scheduler_cpu * 1e3:.2f} ms ({1 / max(scheduler_cpu, 1e-6):,.0f} tasks/s of one core)"
        )
        merge = _merge_seconds(engine, paths[0])
        print(f"merging two summaries of this archive: {merge * 1e6:.0f} µs")
        rate = records / base  # one process judging
        # a worker's own judging rate: the one-worker run without its fixed cost and tasks' overhead
        worker_rate = records / max(runs[1] - fixed - len(paths) * per_task, 1e-9)
        print(
            f"a worker judges {worker_rate / 1e6:.2f} M records/s of its tasks' records (in-process {rate / 1e6:.2f})"
        )
        build = max(info["engine_seconds"].values())
        # the scheduler's cost per task: its wall time per task here (a bound: the scheduler
        # shares two cores with the client and the workers), and its own CPU time
        for what, scheduler in (("wall time", scheduler_per_task), ("own CPU time", scheduler_cpu)):
            print(
                f"model: 1e9 records, {worker_rate / 1e6:.2f} M records/s per worker (ideal: {rate / 1e6:.2f}), "
                f"{per_task * 1e3:.2f} ms per task on a "
                f"worker, {scheduler * 1e3:.2f} ms per task on the scheduler (its {what}), the run's fixed cost "
                f"{max(fixed, fixed2):.2f} s (the engine's build on the workers, {build:.2f} s, in it):"
            )
            for part in (records // len(paths), 1_000_000, 2_000_000, 4_000_000, 16_000_000):
                for workers in (10, 100, 1000):
                    total, eff, limit = model(
                        worker_rate, per_task, scheduler, merge, max(fixed, fixed2), part, workers, rate
                    )
                    print(
                        f"  {part:>11,} records a task, {workers:>5} workers: {total:8.1f} s, "
                        f"efficiency {100 * eff:5.1f} %, limited by {limit}"
                    )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
