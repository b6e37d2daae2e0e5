"""A real Dask cluster on localhost for the tests: a ``dask scheduler`` process and ``dask
worker`` processes (no nanny: killing a worker's process is losing that worker), each one
thread, found through a scheduler file; stopped and reaped when the test is done."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

STARTUP = 60.0  # seconds for the scheduler and workers to come up on a loaded machine


def dask_command() -> list[str]:
    """The ``dask`` command of this interpreter's environment (skips when the extra is absent)."""
    pytest.importorskip("distributed", reason="the dask extra is not installed (pip install -e '.[test]' installs it)")
    exe = Path(sys.executable).parent / "dask"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("dask")
    if found is None:
        pytest.skip("distributed is importable but its `dask` command is not on PATH")
    return [found]


class LocalDask:
    """A scheduler and workers started as processes, as an operator starts them."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.scheduler_file = directory / "scheduler.json"
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address = ""

    def _spawn(self, args: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.directory / log, "wb") as out:  # the process holds its own copy
            return subprocess.Popen(
                [*dask_command(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=self.directory,
                start_new_session=True,
            )

    def start_scheduler(self) -> str:
        self.scheduler = self._spawn(
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(self.scheduler_file),
            ],
            "scheduler.log",
        )
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"dask scheduler exited: {(self.directory / 'scheduler.log').read_text()}")
            if self.scheduler_file.exists():
                try:
                    self.address = json.loads(self.scheduler_file.read_text())["address"]
                    return self.address
                except (ValueError, KeyError):
                    pass  # written as we read it
            time.sleep(0.1)
        raise RuntimeError("dask scheduler did not write its scheduler file")

    def start_worker(self, env: dict[str, str] | None = None) -> subprocess.Popen:
        n = len(self.workers)
        worker = self._spawn(
            [
                "worker",
                self.address,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--name",
                f"w{n}",
                "--local-directory",
                str(self.directory / f"w{n}"),
            ],
            f"worker{n}.log",
            env,
        )
        self.workers.append(worker)
        return worker

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=STARTUP) as client:
            client.wait_for_workers(n, timeout=STARTUP)

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in [*self.workers, self.scheduler]:
            if p is None:
                continue
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def logs(self) -> str:
        return "\n".join(f"== {f.name}\n{f.read_text(errors='replace')}" for f in sorted(self.directory.glob("*.log")))


def start(directory: Path, workers: int) -> LocalDask:
    cluster = LocalDask(directory)
    try:
        cluster.start_scheduler()
        for _ in range(workers):
            cluster.start_worker()
        cluster.wait_for_workers(workers)
    except BaseException:
        cluster.stop()
        raise
    return cluster


# A module imports these to have them as its ``cluster`` and ``client`` fixtures.
@pytest.fixture(scope="module", name="cluster")
def shared_cluster(tmp_path_factory):
    """A scheduler and two workers, shared by a module's tests that do not harm them."""
    dask_command()
    running = start(tmp_path_factory.mktemp("dask"), workers=2)
    yield running
    running.stop()


@pytest.fixture(scope="module", name="client")
def shared_client(cluster):
    """A client of the module's shared cluster."""
    from distributed import Client

    with Client(cluster.address, timeout=STARTUP) as c:
        yield c


def interruptible(args: list[str], cwd: Path) -> subprocess.Popen:
    """``python -m pyclassify ARGS`` started to be interrupted: its output piped as text. A
    Python started with SIGINT ignored (a test run launched in the background by a shell) keeps
    it ignored, so the child installs the default handler itself, then runs the CLI."""
    child = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('pyclassify', run_name='__main__', alter_sys=True)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", child, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )


def our_tasks(client: Any) -> list[str]:
    """The scheduler's tasks of pyclassify's runs."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if str(k).startswith("pyclassify-")]
    )


def assert_nothing_left(client: Any, wait: float = 30.0) -> None:
    """Within ``wait`` seconds the scheduler holds no task of a run and no worker its engine."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and (left := our_tasks(client)):
        time.sleep(0.2)
    assert not left
    assert not [
        n
        for ps in client.run(lambda dask_worker: list(dask_worker.plugins)).values()
        for n in ps
        if n.startswith("pyclassify-engine-")
    ]
