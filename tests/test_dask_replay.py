"""``replay --traffic``, ``usage`` and ``diff --traffic`` on a real Dask cluster (a ``dask
scheduler`` and ``dask worker`` processes started here): the answer is the in-process one on
random archives and on a Parquet file cut between row groups, the engine is built once per
worker, a worker killed mid-run loses nothing and counts nothing twice (summaries and
``--out-dir`` lines), Ctrl-C prints what was judged and leaves nothing behind, an unreachable
scheduler and workers of another version are refused with exit 8."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pyclassify.engine import NativeEngine
from pyclassify.project import load_project
from pyclassify.recordreplay import RecordReplay, summary_json
from tests import dask_cluster
from tests.dask_cluster import shared_client, shared_cluster  # noqa: F401  (fixtures `client`, `cluster`)
from tests.test_recordreplay import answer, archives, write_archive

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
TRAFFIC = ROOT / "examples" / "traffic"


@pytest.fixture(scope="module")
def engine():
    project = load_project([DEMO])
    return NativeEngine(project.policy_set, project.inventory)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyclassify", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_the_command_on_the_cluster_answers_as_in_process(cluster, tmp_path):
    paths = write_archive(
        tmp_path,
        [
            ("vpc", [("10.0.1.10", "10.0.2.20", 40000 + i, 8080, "TCP", "REJECT", i) for i in range(20)]),
            ("conntrack", [("10.0.2.20", "203.0.113.7", 41000, 53, "UDP", "ACCEPT", 0)]),
            ("hubble", ["junk", ("10.0.1.10", "10.0.2.30", 42000, 22, "TCP", "ACCEPT", 0)]),
        ],
    )
    paths = [str(TRAFFIC / "hubble.jsonl"), str(TRAFFIC / "vpc-flow-logs.txt"), *paths]
    here = _cli("replay", str(DEMO), *_traffic(paths), "--json")
    there = _cli("replay", str(DEMO), *_traffic(paths), "--json", "--scheduler", cluster.address)
    assert here.returncode == 0, here.stderr
    assert there.returncode == 0, there.stderr + cluster.logs()
    local, distributed = json.loads(here.stdout), json.loads(there.stdout)
    assert local["records"] > 0 and local["by_rule"] and local["problems"] > 0
    assert answer(distributed) == answer(local)
    assert distributed["cluster"]["workers"] == 2 and distributed["cluster"]["tasks"] == len(paths)
    # the address from the environment, as Dask's own clients take it
    env = _cli("replay", str(DEMO), *_traffic(paths), "--json", env={"DASK_SCHEDULER_ADDRESS": cluster.address})
    assert env.returncode == 0, env.stderr
    assert json.loads(env.stdout)["cluster"]["scheduler"] == cluster.address


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=archives)
def test_any_archive_judged_on_the_cluster_gives_the_in_process_answer(tmp_path_factory, client, engine, files):
    from pyclassify import dask_replay

    paths = write_archive(tmp_path_factory.mktemp("archive"), files)
    whole = RecordReplay(engine)
    whole.run(paths)
    summary, info = dask_replay.run(engine, paths, client=client)
    assert answer(summary_json(summary, False)) == answer(whole.summary_json())
    assert info["tasks"] == len(paths)


def test_the_engine_is_built_once_per_worker_for_every_task(client, engine, tmp_path):
    from pyclassify import dask_replay

    row = ("10.0.1.10", "10.0.2.20", 40000, 8080, "TCP", "ACCEPT", 0)
    paths = write_archive(tmp_path, [("vpc", [row] * 3)] * 12)
    summary, info = dask_replay.run(engine, paths, client=client)
    assert summary.totals[0] == 36
    assert set(info["engine_builds"].values()) == {1}  # each worker built it once...
    assert sum(info["tasks_by_worker"].values()) == 12  # ...and judged its files with it
    assert all(s > 0 for s in info["engine_seconds"].values())
    # the run's engine is not left on the workers
    assert not [
        n
        for plugins in client.run(lambda dask_worker: list(dask_worker.plugins)).values()
        for n in plugins
        if n.startswith("pyclassify-engine-")
    ]


def test_a_worker_killed_mid_run_loses_no_record_and_counts_none_twice(tmp_path, engine):
    """Twenty files on two workers; when the first file's summary is in, the worker holding it
    is killed (SIGKILL): its summaries are lost and judged again on the other worker."""
    from distributed import Client

    from pyclassify import dask_replay

    dask_cluster.dask_command()
    running = dask_cluster.start(tmp_path / "dask", workers=2)
    try:
        rows = [("10.0.1.10", "10.0.2.20", 30000 + i, 8080, "TCP", "ACCEPT", i % 60) for i in range(3000)]
        files = [("vpc", rows[: 1000 + 100 * i]) for i in range(20)]
        (tmp_path / "archive").mkdir()
        paths = write_archive(tmp_path / "archive", files)
        whole = RecordReplay(engine)
        whole.run(paths)
        killed: list[str] = []
        with Client(running.address, timeout=dask_cluster.STARTUP) as client:
            pids = client.run(os.getpid)

            def kill_a_holder(done: int, total: int, records: int) -> None:
                if killed:
                    return
                held = {
                    w for key, ws in client.who_has().items() if str(key).startswith("pyclassify-judge-") for w in ws
                }
                assert held, "a file's summary is done but no worker holds it"
                victim = sorted(held)[0]
                os.kill(pids[victim], signal.SIGKILL)
                killed.append(victim)

            summary, info = dask_replay.run(
                engine, paths, client=client, progress=kill_a_holder, out=str(tmp_path / "lines")
            )
            assert killed and info["workers"] == 1 and killed[0] not in info["engine_seconds"]
        assert answer(summary_json(summary, False)) == answer(whole.summary_json())
        assert summary.totals[0] == sum(len(r) for _, r in files)
        # each record's line once, as one process writes them, however often its file was judged
        assert out_dir_lines(tmp_path / "lines") == in_process_lines(engine, paths)
    finally:
        running.stop()


def in_process_lines(engine: NativeEngine, paths: list[str]) -> list[dict[str, Any]]:
    import io

    buf = io.BytesIO()
    RecordReplay(engine, out=buf).run(paths)
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def out_dir_lines(directory: Path) -> list[dict[str, Any]]:
    """The lines of ``--out-dir``'s parts in the index's order, numbered as one run numbers them."""
    index = json.loads((directory / "index.json").read_text())
    lines = []
    for part in index["parts"]:
        got = [json.loads(line) for line in (directory / part["lines"]).read_bytes().splitlines()]
        assert len(got) == part["records"]
        lines += [{**line, "index": line["index"] + part["first_index"]} for line in got]
    assert len(lines) == index["records"]
    return lines


def _traffic(paths: list[str]) -> list[str]:
    return [a for p in paths for a in ("--traffic", p)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_named_with_exit_8():
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    address = f"tcp://127.0.0.1:{_free_port()}"
    result = _cli(
        "replay",
        str(DEMO),
        "--traffic",
        str(TRAFFIC / "hubble.jsonl"),
        "--scheduler",
        address,
        env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
    )
    assert result.returncode == 8, result.stderr
    assert f"cannot reach the Dask scheduler at {address}" in result.stderr
    assert "Traceback" not in result.stderr


def test_workers_of_another_version_are_refused_with_exit_8(tmp_path):
    """A worker whose Python finds another pyclassify version first (its metadata ahead on the
    path, as an older install would be) is refused, named, before any file is judged."""
    dask_cluster.dask_command()
    other = tmp_path / "other"
    (other / "pyclassify-0.0.1.dist-info").mkdir(parents=True)
    (other / "pyclassify-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pyclassify\nVersion: 0.0.1\n"
    )
    running = dask_cluster.LocalDask(tmp_path)
    try:
        running.start_scheduler()
        running.start_worker()
        running.start_worker(env={"PYTHONPATH": str(other) + os.pathsep + os.environ.get("PYTHONPATH", "")})
        running.wait_for_workers(2)
        result = _cli("replay", str(DEMO), "--traffic", str(TRAFFIC / "hubble.jsonl"), "--scheduler", running.address)
    finally:
        running.stop()
    assert result.returncode == 8, result.stderr
    assert "another pyclassify version" in result.stderr and "runs 0.0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_scheduler_and_out_together_are_a_usage_error(tmp_path):
    result = _cli(
        "replay",
        str(DEMO),
        "--traffic",
        str(TRAFFIC / "hubble.jsonl"),
        "--scheduler",
        "tcp://127.0.0.1:1",
        "--out",
        str(tmp_path / "v.jsonl"),
    )
    assert result.returncode == 2 and "--out" in result.stderr


def test_usage_on_the_cluster_counts_as_in_process(cluster):
    paths = [str(TRAFFIC / "hubble.jsonl"), str(TRAFFIC / "vpc-flow-logs.txt")]
    here = _cli("usage", str(DEMO), *_traffic(paths), "--json", "--no-redundant")
    there = _cli("usage", str(DEMO), *_traffic(paths), "--json", "--no-redundant", "--scheduler", cluster.address)
    assert here.returncode == 0, here.stderr
    assert there.returncode == 0, there.stderr
    local = json.loads(here.stdout)
    assert local["traffic"]["records"] > 0 and any(r["flows"] for r in local["rules"])
    assert json.loads(there.stdout) == local


def test_a_scheduler_in_the_environment_leaves_captures_in_process():
    result = _cli(
        "replay",
        str(DEMO),
        "--pcap",
        str(ROOT / "pcaps" / "demo.pcap"),
        "--json",
        env={"DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:1"},
    )
    assert result.returncode == 0, result.stderr
    assert "cluster" not in json.loads(result.stdout)
    # asked on the command line, captures go to the cluster (tests/test_dask_capture.py)
    asked = _cli(
        "replay",
        str(DEMO),
        "--pcap",
        str(ROOT / "pcaps" / "demo.pcap"),
        "--scheduler",
        "tcp://127.0.0.1:1",
        env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"},
    )
    assert asked.returncode == 8 and "cannot reach the Dask scheduler" in asked.stderr


def test_out_dir_holds_the_in_process_lines_a_file_each(cluster, engine, tmp_path):
    paths = [
        str(TRAFFIC / "hubble.jsonl"),
        str(TRAFFIC / "vpc-flow-logs.txt"),
        *write_archive(tmp_path, [("conntrack", [("10.0.2.20", "203.0.113.7", 41000, 53, "UDP", "ACCEPT", 0)] * 3)]),
    ]
    result = _cli(
        "replay",
        str(DEMO),
        *_traffic(paths),
        "--json",
        "--scheduler",
        cluster.address,
        "--out-dir",
        str(tmp_path / "lines"),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cluster"]["index"] == str(tmp_path / "lines" / "index.json")
    assert sorted(p.name for p in (tmp_path / "lines").iterdir()) == [
        "index.json",
        "part-00000.jsonl",
        "part-00001.jsonl",
        "part-00002.jsonl",
    ]
    assert out_dir_lines(tmp_path / "lines") == in_process_lines(engine, paths)
    refused = _cli("replay", str(DEMO), *_traffic(paths), "--out-dir", str(tmp_path / "x"))
    assert refused.returncode == 2 and "--scheduler" in refused.stderr


def test_diff_on_the_cluster_finds_the_in_process_changes(cluster, tmp_path):
    from tests.test_trafficdiff import conntrack_line, diff_answer

    rows = [("10.0.2.20", "10.0.2.30", 40000 + i, 5432, 2) for i in range(4)] + [
        ("10.0.1.10", "10.0.2.20", 41000, 8080, 1)
    ]
    paths = [str(TRAFFIC / "hubble.jsonl")]
    for i in range(3):
        (tmp_path / f"ct-{i}.txt").write_text("".join(conntrack_line(*r) + "\n" for r in rows[i:]))
        paths.append(str(tmp_path / f"ct-{i}.txt"))
    change = str(ROOT / "examples" / "changes" / "db-behind-pgbouncer.yaml")
    here = _cli("diff", str(DEMO), "--apply", change, *_traffic(paths), "--json")
    there = _cli("diff", str(DEMO), "--apply", change, *_traffic(paths), "--json", "--scheduler", cluster.address)
    assert here.returncode == 5, here.stderr
    assert there.returncode == 5, there.stderr
    local = json.loads(here.stdout)
    assert local["changes"] and len(local["changes"][0]["examples"]) == 3
    assert diff_answer(json.loads(there.stdout)) == diff_answer(local)


def test_workers_start_a_local_cluster_for_the_run():
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    paths = [str(TRAFFIC / "hubble.jsonl"), str(TRAFFIC / "vpc-flow-logs.txt")]
    here = _cli("replay", str(DEMO), *_traffic(paths), "--json")
    there = _cli("replay", str(DEMO), *_traffic(paths), "--json", "--workers", "2")
    assert here.returncode == 0 and there.returncode == 0, there.stderr
    doc = json.loads(there.stdout)
    assert answer(doc) == answer(json.loads(here.stdout))
    assert doc["cluster"]["workers"] == 2 and doc["cluster"]["scheduler"].startswith("tcp://127.0.0.1:")


def test_a_parquet_file_is_cut_between_row_groups_and_answers_as_one(client, engine, tmp_path):
    from pyclassify import dask_replay
    from tests.test_recordreplay import write_parquet

    rows = [("10.0.1.10", "10.0.2.20", 40000 + i, 8080, "TCP", "REJECT" if i % 3 else "ACCEPT", i) for i in range(40)]
    rows[5:9] = ["junk"] * 4
    write_parquet(tmp_path / "flows.parquet", rows, 4)
    paths = [str(TRAFFIC / "hubble.jsonl"), str(tmp_path / "flows.parquet")]
    assert [part for _, part in dask_replay.partitions(paths, rows=10)] == [
        None,
        (0, 3, 0),
        (3, 6, 12),
        (6, 9, 24),
        (9, 10, 36),
    ]
    whole = RecordReplay(engine)
    whole.run(paths)
    summary, info = dask_replay.run(engine, paths, client=client, partition_rows=10)
    assert info["tasks"] == 5
    assert answer(summary_json(summary, False)) == answer(whole.summary_json())
    assert len(summary.files) == 2 and summary.files[1].problems


def test_ctrl_c_prints_the_files_judged_and_leaves_nothing_on_the_cluster(cluster, client, tmp_path):
    """SIGINT once the cluster holds a judged file: exit 130, the summary of the files judged
    whole (its records are theirs), the other tasks and the engine gone from the cluster."""
    import time

    ROWS = 40_000  # noqa: N806 - a constant of this test

    # files long enough that the run cannot end between the first judged one and the signal
    # (a worker keeping its judge judges a repeated file fast): one file, linked 400 times
    rows = [("10.0.1.10", "10.0.2.20", 20000 + i, 8080, "TCP", "ACCEPT", 0) for i in range(ROWS)]
    (first,) = write_archive(tmp_path, [("vpc", rows)])
    paths = [first]
    for i in range(1, 400):
        paths.append(str(tmp_path / f"link-{i:03d}.vpc"))
        os.link(first, paths[-1])
    proc = dask_cluster.interruptible(
        ["replay", str(DEMO), *_traffic(paths), "--json", "--scheduler", cluster.address], ROOT
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(str(k).startswith("pyclassify-judge-") for ks in client.has_what().values() for k in ks):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, errors = proc.communicate(timeout=120)
    assert proc.returncode == 130, errors
    doc = json.loads(out)
    assert doc["interrupted"] and 0 < len(doc["files"]) < len(paths)
    assert doc["records"] == ROWS * len(doc["files"]) == sum(f["records"] for f in doc["files"])
    dask_cluster.assert_nothing_left(client)


def test_the_report_on_the_cluster_is_the_in_process_page(cluster, tmp_path):
    paths = [str(TRAFFIC / "hubble.jsonl"), str(TRAFFIC / "vpc-flow-logs.txt")]
    change = str(ROOT / "examples" / "changes" / "db-behind-pgbouncer.yaml")
    for extra in ((), ("--apply", change)):
        here = _cli(
            "report",
            str(DEMO),
            *extra,
            *_traffic(paths),
            "--port",
            "any",
            "--no-redundant",
            "-o",
            str(tmp_path / "here.html"),
        )
        there = _cli(
            "report",
            str(DEMO),
            *extra,
            *_traffic(paths),
            "--port",
            "any",
            "--no-redundant",
            "-o",
            str(tmp_path / "there.html"),
            "--scheduler",
            cluster.address,
        )
        assert here.returncode == 0, here.stderr
        assert there.returncode == 0, there.stderr
        # the page carries the diff's summary: its time and decisions (work, not answers) aside
        work = re.compile(rb'"seconds":[0-9.e-]+,"decisions":[0-9]+')
        there_page, here_page = (work.sub(b"", (tmp_path / f).read_bytes()) for f in ("there.html", "here.html"))
        assert there_page == here_page


def test_two_runs_of_one_policy_set_at_once_keep_their_own_engines(client, engine, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from pyclassify import dask_replay

    row = ("10.0.1.10", "10.0.2.20", 40000, 8080, "TCP", "ACCEPT", 0)
    paths = write_archive(tmp_path, [("vpc", [row] * 50)] * 16)
    whole = RecordReplay(engine)
    whole.run(paths)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: dask_replay.run(engine, paths, client=client), range(2)))
    for summary, _ in runs:
        assert answer(summary_json(summary, False)) == answer(whole.summary_json())
