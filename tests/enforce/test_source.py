"""What ``enforce`` enforces, reloaded: a one-object change is a delta on the running engine
(counted, not timed), an invalid object is rejected alone and keeps its last good version, a
file that does not parse keeps its objects."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pyclassify.analysis import explain
from pyclassify.enforce.source import PolicySource, SourceError
from pyclassify.ir import PROTO_TCP

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    shutil.copytree(DEMO, tmp_path / "demo")
    return tmp_path / "demo"


def verdict(loaded, src: str, dst: str, port: int) -> str:
    return explain(loaded.project, src, dst, PROTO_TCP, port, engine="native").verdict.verdict


def test_one_pod_change_is_a_delta_not_a_rebuild(demo: Path) -> None:
    source = PolicySource([str(demo)])
    first = source.load()
    state = first.engine.state
    assert (state.full_builds, state.deltas) == (1, 1)
    assert verdict(first, "frontend/web", "backend/api", 8080) == "allow"
    # web loses the label the backend's NetworkPolicy admits it by
    pods = demo / "10-pods.yaml"
    pods.write_text(pods.read_text().replace("      app: web\n", "      app: webx\n", 1))
    second = source.load()
    assert second.engine.state is state
    assert (state.full_builds, state.deltas) == (1, 2), "a one-pod change rebuilt the engine"
    assert second.changed == 1
    assert verdict(second, "frontend/web", "backend/api", 8080) == "deny"
    # Unchanged files: no delta at all.
    third = source.load()
    assert third.changed == 0 and state.deltas == 2


def test_invalid_object_is_rejected_alone_and_keeps_its_last_good_version(demo: Path) -> None:
    source = PolicySource([str(demo)])
    first = source.load()
    assert verdict(first, "frontend/web", "backend/api", 8080) == "allow"
    pods = demo / "10-pods.yaml"
    text = pods.read_text()
    # web: an invalid label value (rejected); api: relabelled validly in the same change
    text = text.replace("      app: web\n", "      app: 'not a valid label value!'\n", 1)
    text = text.replace("      app: api\n", "      app: apix\n", 1)
    pods.write_text(text)
    loaded = source.load()
    assert list(loaded.rejected) == [("", "Pod", "frontend", "web")]
    assert "10-pods.yaml" in loaded.rejected[("", "Pod", "frontend", "web")]
    web = loaded.project.inventory.find("frontend/web")
    assert web is not None and web.labels["app"] == "web", "the last good version of web stays"
    assert loaded.project.inventory.find("backend/api").labels["app"] == "apix", "the valid change applies"
    assert loaded.changed >= 1  # api, and the Service whose endpoints it was


def test_a_file_that_does_not_parse_keeps_its_objects(demo: Path) -> None:
    source = PolicySource([str(demo)])
    first = source.load()
    pods = len(first.project.inventory.endpoints)
    (demo / "10-pods.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n")
    loaded = source.load()
    assert loaded.broken_files == [str(demo / "10-pods.yaml")]
    assert len(loaded.project.inventory.endpoints) == pods
    assert loaded.changed == 0


def test_removed_objects_leave_the_engine(demo: Path) -> None:
    source = PolicySource([str(demo)])
    source.load()
    (demo / "20-networkpolicies.yaml").unlink()
    loaded = source.load()
    assert not any(p.kind == "NetworkPolicy" for p in loaded.project.policy_set.policies)
    assert loaded.changed > 0 and loaded.engine.state.full_builds == 1


def test_first_load_with_errors_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: nope}\n")
    with pytest.raises(SourceError) as e:
        PolicySource([str(tmp_path)]).load()
    assert "invalid IP address" in str(e.value)
