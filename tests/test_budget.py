"""pyclassify.budget: the budget a policy set is held to (given, or derived from the cgroup's
memory limit as the kernel shows it, v1 or v2), and a set that would pass it rejected whole
before the engine builds it, by every path a set is built: a whole build, the daemon's file
source (a reload, or one object at a time) and a live project's one-object change."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from pyclassify import budget
from pyclassify.analysis import explain
from pyclassify.budget import OverBudget, cgroup_memory_limit, default_budget, parse_size
from pyclassify.documents import Document, Problems
from pyclassify.enforce.file_source import PolicySource, SourceError
from pyclassify.ir import PROTO_TCP
from pyclassify.live import LiveProject
from pyclassify.project import build_project, load_project
from tests.test_sharing import NETS, gnp

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"


def test_sizes() -> None:
    assert parse_size("512Mi") == parse_size("512M") == 512 << 20
    assert parse_size("1G") == 1 << 30 and parse_size("1.5Gi") == 3 << 29
    assert parse_size("300000") == 300000 and parse_size(" 2k ") == 2048
    assert parse_size("none") is None
    for bad in ("", "12 parsecs", "-1M", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)


def fake_proc(tmp_path: Path, cgroup: str, mounts: list[tuple[str, str, str, str]], files: dict[str, str]) -> str:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    lines = [
        f"{30 + i} 23 0:{28 + i} {root} {tmp_path / point} rw,relatime - {fstype} {fstype} {options}"
        for i, (fstype, root, point, options) in enumerate(mounts)
    ]
    (proc / "mountinfo").write_text("\n".join(lines) + "\n")
    for path, text in files.items():
        f = tmp_path / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return str(proc)


def test_the_limit_of_a_v2_cgroup_is_the_smallest_on_its_path(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        [("cgroup2", "/", "cg", "rw")],
        {
            "cg/kubepods/pod1/ctr/memory.max": "max\n",
            "cg/kubepods/pod1/memory.max": "1073741824\n",
            "cg/kubepods/memory.max": "8589934592\n",
        },
    )
    assert cgroup_memory_limit(proc) == 1 << 30


def test_a_container_sees_its_own_cgroup_as_the_root(tmp_path: Path) -> None:
    # cgroup namespace: the container's cgroup is "/", its memory.max at the mount point
    proc = fake_proc(tmp_path, "0::/\n", [("cgroup2", "/", "cg", "rw")], {"cg/memory.max": "536870912\n"})
    assert cgroup_memory_limit(proc) == 512 << 20


def test_the_limit_of_a_v1_memory_cgroup(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        "9:pids:/a\n4:memory:/a/b\n1:cpu,cpuacct:/a\n",
        [("cgroup", "/", "pids", "rw,pids"), ("cgroup", "/", "memory", "rw,memory")],
        {
            "memory/a/b/memory.limit_in_bytes": "268435456\n",
            "memory/a/memory.limit_in_bytes": "9223372036854771712\n",  # no limit
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    assert cgroup_memory_limit(proc) == 256 << 20


def test_no_limit_and_the_default_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = fake_proc(tmp_path, "0::/\n", [("cgroup2", "/", "cg", "rw")], {"cg/memory.max": "max\n"})
    assert cgroup_memory_limit(proc) is None
    monkeypatch.setattr(budget, "cgroup_memory_limit", lambda: 1 << 30)
    assert default_budget() == ((1 << 30) - budget.RESERVE) // 2
    monkeypatch.setattr(budget, "cgroup_memory_limit", lambda: None)
    monkeypatch.setattr(budget, "physical_memory", lambda: 16 << 30)
    assert default_budget() == ((16 << 30) - budget.RESERVE) // 2


def docs(objects: list[dict[str, Any]]) -> list[Document]:
    return [Document(copy.deepcopy(o), "set.yaml", i + 1) for i, o in enumerate(objects)]


def test_a_whole_build_over_the_budget_stops_and_names_the_costliest() -> None:
    objects = [gnp(f"wide-{i}", [f"10.{i}.{j}.0/24" for j in range(100)]) for i in range(40)]
    whole = build_project(docs(objects), Problems())
    limit = whole.shared.footprint // 2
    with pytest.raises(OverBudget) as e:
        build_project(docs(objects), Problems(), budget=limit)
    assert e.value.budget == limit and limit < e.value.estimate <= whole.shared.footprint
    text = str(e.value)
    assert "over the memory budget" in text and "GlobalNetworkPolicy/wide-" in text
    assert len(e.value.costliest) == 5
    # copies of one policy fit where the distinct ones do not
    copies = build_project(
        docs([gnp(f"copy-{i}", [f"10.0.{j}.0/24" for j in range(100)]) for i in range(40)]), Problems(), budget=limit
    )
    assert copies.shared.footprint < limit


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    shutil.copytree(DEMO, tmp_path / "demo")
    return tmp_path / "demo"


def verdict(loaded: Any, src: str, dst: str, port: int) -> str:
    return explain(loaded.project, src, dst, PROTO_TCP, port, engine="native").verdict.verdict


def write_set(path: Path, objects: list[dict[str, Any]]) -> None:
    import yaml

    path.write_text(yaml.safe_dump_all(objects))


def wide_set(n: int, prefix: str = "wide") -> list[dict[str, Any]]:
    return [
        gnp(f"{prefix}-{i}", [f"10.{i % 250}.{j}.0/24" for j in range(200)], selector="app == 'nothing'")
        for i in range(n)
    ]


def test_the_file_source_rejects_an_update_over_the_budget_whole(demo: Path) -> None:
    demo_bytes = load_project([str(demo)]).shared.footprint
    source = PolicySource([str(demo)], settle=0, budget=demo_bytes + 3 * 1024 * 1024)
    first = source.load()
    assert verdict(first, "frontend/web", "backend/api", 8080) == "allow"
    in_force = source.engine
    # a change in an existing file and a new file of many wide policies: too much together
    pods = demo / "10-pods.yaml"
    pods.write_text(pods.read_text().replace("      app: web\n", "      app: webx\n", 1))
    write_set(demo / "90-wide.yaml", wide_set(60))
    with pytest.raises(OverBudget) as e:
        source.load()
    assert "GlobalNetworkPolicy/wide-" in str(e.value)
    assert source.over_budget == 1
    assert source.engine is in_force
    assert verdict(first, "frontend/web", "backend/api", 8080) == "allow"  # the pod change waits too
    # within the budget again: the update applies (and the pod change with it)
    write_set(demo / "90-wide.yaml", wide_set(2))
    after = source.load()
    assert verdict(after, "frontend/web", "backend/api", 8080) == "deny"
    assert demo_bytes < source.footprint() <= demo_bytes + 3 * 1024 * 1024


def test_a_first_load_over_the_budget_refuses_to_start(demo: Path) -> None:
    write_set(demo / "90-wide.yaml", wide_set(60))
    with pytest.raises(SourceError) as e:
        PolicySource([str(demo)], budget=2 * 1024 * 1024).load()
    assert "over the memory budget" in str(e.value)


def test_one_object_at_a_time_a_change_over_the_budget_changes_nothing() -> None:
    project = build_project(docs([gnp("small", NETS)]), Problems())
    live = LiveProject(project, budget=project.shared.footprint + 256 * 1024)
    before = (live.shared.footprint, dict(live.shared.units), live.state.deltas)
    wide = gnp("wide", [f"10.1.{j}.0/24" for j in range(250)] + [f"10.2.{j}.0/24" for j in range(250)])
    with pytest.raises(OverBudget) as e:
        live.apply(None, wide)
    assert "GlobalNetworkPolicy 'wide'" in str(e.value)
    assert (live.shared.footprint, dict(live.shared.units), live.state.deltas) == before
    assert [p.name for p in live.policy_set().policies] == ["small"]
    # a copy of what is in force costs little: it fits
    live.apply(None, gnp("small-copy", NETS))
    assert sorted(p.name for p in live.policy_set().policies) == ["small", "small-copy"]
    # removing is always possible
    live.apply(gnp("small", NETS), None)
    assert [p.name for p in live.policy_set().policies] == ["small-copy"]


def test_a_one_shot_command_refuses_a_set_over_its_budget(demo: Path) -> None:
    from click.testing import CliRunner

    from pyclassify.cli import main

    runner = CliRunner()
    refused = runner.invoke(main, ["--memory-budget", "16k", "check", str(demo)])
    assert refused.exit_code == 1, refused.output
    assert "over the memory budget of 0.0 MiB (--memory-budget): not built" in refused.output
    assert runner.invoke(main, ["--memory-budget", "64Mi", "check", str(demo)]).exit_code == 0
    assert runner.invoke(main, ["--memory-budget", "12 parsecs", "check", str(demo)]).exit_code == 2
