"""What ``enforce`` enforces, reloaded: a one-object change is a delta on the running engine
(counted, not timed), an invalid object is rejected alone and keeps its last good version, a
file that does not parse keeps its objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyclassify.enforce.file_source import PolicySource, SourceError
from tests.enforce.policy_files import copy_demo, verdict


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path, "demo")


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
    # A later change elsewhere: web is still invalid, still rejected, still at its last good version.
    pods.write_text(pods.read_text().replace("      app: apix\n", "      app: api\n", 1))
    again = source.load()
    assert list(again.rejected) == [("", "Pod", "frontend", "web")]
    assert again.project.inventory.find("frontend/web").labels["app"] == "web"
    assert again.project.inventory.find("backend/api").labels["app"] == "api"


def test_a_policy_with_a_misspelt_field_is_rejected_and_its_last_good_version_stays(demo: Path) -> None:
    """`spce:` (the API server refuses it, strict decoding) must not load as a policy without a
    spec, which would isolate the whole namespace: the policy keeps its last good version."""
    source = PolicySource([str(demo)])
    assert verdict(source.load(), "frontend/web", "backend/api", 8080) == "allow"
    policies = demo / "20-networkpolicies.yaml"
    text = policies.read_text()
    start = text.index("  name: allow-frontend-to-api")
    policies.write_text(text[:start] + text[start:].replace("spec:", "spce:", 1))
    loaded = source.load()
    key = ("networking.k8s.io", "NetworkPolicy", "backend", "allow-frontend-to-api")
    assert list(loaded.rejected) == [key]
    assert "spce: unknown field 'spce' (did you mean 'spec'?)" in loaded.rejected[key]
    assert verdict(loaded, "frontend/web", "backend/api", 8080) == "allow", "the last good version stays"


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


def _verdicts(loaded, pairs, ports=(80, 443, 5432, 8080)) -> dict:
    return {(s, d, p): verdict(loaded, s, d, p) for s, d in pairs for p in ports}


def test_changes_one_object_at_a_time_give_what_a_whole_load_gives(demo: Path) -> None:
    """Every load after the first takes its changes object by object (``LiveProject``), or
    the whole project for kinds that relink others; either way the verdicts are those of a
    fresh load of the same files, and only a relinking kind builds the project again."""
    import random

    source = PolicySource([str(demo)], settle=0)
    first = source.load()
    names = [f"{e.namespace}/{e.name}" for e in first.project.inventory.endpoints if e.namespace]
    pairs = [(a, b) for a in names for b in names if a != b]
    pods, netpols, calico = demo / "10-pods.yaml", demo / "20-networkpolicies.yaml", demo / "40-calico.yaml"
    namespaces = demo / "00-namespaces.yaml"
    rng = random.Random(11)
    edits = [
        (pods, "      app: web\n", "      app: webx\n"),
        (pods, "      app: webx\n", "      app: web\n"),
        (namespaces, "    team: web\n", "    team: webx\n"),
        (namespaces, "    team: webx\n", "    team: web\n"),
        (netpols, "port: 5432", "port: 5433"),
        (netpols, "port: 5433", "port: 5432"),
        (calico, "  order: 10\n", "  order: 1000\n"),  # a GlobalNetworkPolicy's order
        (calico, "  order: 1000\n", "  order: 10\n"),
        (calico, "order: 100", "order: 300"),  # the Tier's: relinks its policies, whole project
        (calico, "order: 300", "order: 100"),
    ]
    one_at_a_time = []
    apply_changes = source._apply_changes
    source._apply_changes = lambda *a: one_at_a_time.append(apply_changes(*a)) or one_at_a_time[-1]
    for step in range(16):
        path, old, new = edits[rng.randrange(len(edits))]
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new, 1))
        elif step % 4 == 3:
            (demo / "90-extra.yaml").write_text(
                "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: extra, namespace: backend}\n"
                "spec:\n  podSelector: {}\n  policyTypes: [Ingress]\n"
            )
        else:
            (demo / "90-extra.yaml").unlink(missing_ok=True)
        loaded = source.load()
        assert not loaded.rejected
        fresh = PolicySource([str(demo)]).load()
        assert _verdicts(loaded, pairs) == _verdicts(fresh, pairs), f"step {step}: {path.name} {old!r} -> {new!r}"
        assert loaded.engine.state.full_builds == 1
    taken = sum(r is not None for r in one_at_a_time)
    assert 0 < taken < len(one_at_a_time), "both ways were exercised"


def test_a_settled_file_is_not_read_again(tmp_path: Path, demo: Path) -> None:
    """``ParseCache``: an unchanged file that had settled is taken from the cache; one changed
    (in place or replaced), one too recent to trust its times, one with errors is read again."""
    import os
    import time

    from pyclassify.documents import Problems
    from pyclassify.loader import ParseCache, iter_paths

    cache = ParseCache(settle=0.5)
    old = time.time_ns() - 10**10
    for f in demo.iterdir():
        os.utime(f, ns=(old, old))

    def read() -> list[str]:
        cache.begin()
        docs = list(iter_paths([str(demo)], Problems(), cache))
        cache.end()
        assert docs
        return sorted(Path(n).name for n in cache.read)

    assert len(read()) == len(list(demo.iterdir()))
    assert read() == []
    pods = demo / "10-pods.yaml"
    pods.write_text(pods.read_text().replace("app: web", "app: wex", 1))  # in place, same size
    assert read() == ["10-pods.yaml"]  # changed times
    assert read() == ["10-pods.yaml"]  # still too recent to be kept
    os.utime(pods, ns=(old, old))
    assert read() == ["10-pods.yaml"]
    assert read() == []
    (demo / "20-networkpolicies.yaml").write_text("kind: [unclosed\n")
    os.utime(demo / "20-networkpolicies.yaml", ns=(old, old))
    assert read() == ["20-networkpolicies.yaml"]
    assert read() == ["20-networkpolicies.yaml"]  # a file with errors is never kept
