"""``explain`` and ``matrix`` (``pyclassify.analysis``) on what a real cluster holds beside running
single-stack pods: dual-stack pods, judged in each family they have, and pods that hold no address
(finished, or not given one yet), which are no endpoint."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyclassify.analysis import explain, matrix
from pyclassify.diff import diff
from pyclassify.project import load_project

# client and db are dual-stack, web IPv4 only, v6only IPv6 only. The NetworkPolicy lets client
# reach db on TCP 80 in both families; a Calico policy before it denies the same traffic over
# IPv6 (ipVersion: 6): IPv4 allowed, IPv6 denied.
PODS = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: client, namespace: app, labels: {app: client}}
  status: {phase: Running, podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}, {ip: "fd00::1"}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: db, namespace: app, labels: {app: db}}
  status: {phase: Running, podIP: 10.1.0.2, podIPs: [{ip: 10.1.0.2}, {ip: "fd00::2"}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: web, namespace: app, labels: {app: web}}
  status: {phase: Running, podIP: 10.1.0.3, podIPs: [{ip: 10.1.0.3}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: v6only, namespace: app, labels: {app: v6only}}
  status: {phase: Running, podIP: "fd00::4", podIPs: [{ip: "fd00::4"}]}
"""
NETPOL = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-ingress, namespace: app}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{port: 80}]
"""
NO_V6 = """\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: db-no-ipv6}
spec:
  order: 10
  selector: app == 'db'
  types: [Ingress]
  ingress:
  - action: Deny
    ipVersion: 6
    protocol: TCP
    destination: {ports: [80]}
"""


@pytest.fixture()
def dual(tmp_path: Path) -> Path:
    (tmp_path / "pods.yaml").write_text(PODS)
    (tmp_path / "netpol.yaml").write_text(NETPOL)
    (tmp_path / "calico.yaml").write_text(NO_V6)
    return tmp_path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyclassify", *args], capture_output=True, text=True, timeout=120)


# --- dual stack: matrix ----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_matrix_judges_dual_stack_pods_in_each_family(dual: Path, engine: str) -> None:
    result = matrix(load_project([str(dual)]), 6, 80, engine=engine)
    refs = [p.ref for p in result.pods]
    c, d, w = refs.index("app/client"), refs.index("app/db"), refs.index("app/web")
    rows = np.array(result.rows())
    assert not rows[c, d], "IPv6 is denied: the pair is not allowed in every family"
    v4, j4 = result.by_family[4]
    v6, j6 = result.by_family[6]
    assert j4[c, d] and v4[c, d] and j6[c, d] and not v6[c, d]
    assert result.differs[c, d] and not result.differs[d, c]
    assert not j6[w, d], "web has no IPv6 address: no IPv6 flow from it"


def test_matrix_native_and_reference_agree_per_family(dual: Path) -> None:
    project = load_project([str(dual)])
    native, oracle = matrix(project, 6, 80), matrix(project, 6, 80, engine="reference")
    assert native.rows() == oracle.rows()
    assert native.to_json()["by_family"] == oracle.to_json()["by_family"]


def test_matrix_cli_shows_the_family_that_differs(dual: Path) -> None:
    r = cli("matrix", str(dual), "--port", "80", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    c, d, v6 = (doc["pods"].index(p) for p in ("app/client", "app/db", "app/v6only"))
    assert doc["matrix"][c][d] is False
    assert doc["by_family"]["4"][c][d] is True and doc["by_family"]["6"][c][d] is False
    assert doc["by_family"]["4"][v6][d] is None  # no IPv4 address: no IPv4 flow
    r = cli("matrix", str(dual), "--port", "80")
    assert r.returncode == 0, r.stderr
    assert "1 pair differs by address family" in r.stdout and "4 = allowed over IPv4 only" in r.stdout


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_matrix_has_no_flow_between_pods_that_share_no_family(dual: Path, engine: str) -> None:
    """An IPv6-only pod and an IPv4-only pod have no flow between them: no verdict either way."""
    result = matrix(load_project([str(dual)]), 6, 80, engine=engine)
    refs = [p.ref for p in result.pods]
    v6, w, c = refs.index("app/v6only"), refs.index("app/web"), refs.index("app/client")
    doc = result.to_json()
    assert doc["matrix"][v6][w] is None and doc["matrix"][w][v6] is None
    assert doc["matrix"][v6][c] is True  # client is dual-stack: IPv6 between them
    assert not result.rows()[v6][w], "a pair without a flow is not counted as allowed"


def test_matrix_cli_marks_pods_that_share_no_family(dual: Path) -> None:
    r = cli("matrix", str(dual), "--port", "80")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "app/v6only" in line)
    assert re.split("[│|]", row)[-2].strip() in ("·", "."), row  # the last column: app/web
    assert "share no address family" in r.stdout


def test_matrix_by_identity_names_the_family_of_each_group(dual: Path) -> None:
    result = matrix(load_project([str(dual)]), 6, 80, by="identity")
    texts = result.group_text or []
    assert any(t.endswith("IPv6") for t in texts) and any(t.endswith("IPv4") for t in texts)
    doc = result.to_json()
    # an IPv4 group to an IPv6 group: no flow, null
    assert any(cell is None for row in doc["matrix"] for cell in row)


# --- dual stack: explain -------------------------------------------------------------------------


def test_explain_from_an_ipv6_address_takes_the_pods_ipv6_address(dual: Path) -> None:
    project = load_project([str(dual)])
    for engine in ("native", "reference"):
        result = explain(project, "fd00::1", "app/db", 6, 80, engine=engine)
        assert str(result.flow.dst.address) == "fd00::2" and result.family == 6
        assert result.verdict.verdict == "deny"
        result = explain(project, "app/db", "10.1.0.1", 6, 80, engine=engine)
        assert str(result.flow.src.address) == "10.1.0.2"


def test_explain_between_dual_stack_pods_judges_both_families(dual: Path) -> None:
    r = cli("explain", str(dual), "--from", "app/client", "--to", "app/db", "--port", "80", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(f["family"], f["verdict"]) for f in doc["families"]] == [(4, "allow"), (6, "deny")]
    assert doc["verdict"] == "deny" and doc["flow"]["dst"]["ip"] == "fd00::2"
    assert doc["families"][1]["ingress"]["policy"] == "GlobalNetworkPolicy/db-no-ipv6"
    r = cli("explain", str(dual), "--from", "app/client", "--to", "app/db", "--port", "80")
    assert r.returncode == 0, r.stderr
    assert "IPv4" in r.stdout and "IPv6" in r.stdout and "fd00::2" in r.stdout and "10.1.0.2" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("verdict: DENY")


def test_explain_refuses_a_family_the_named_pod_lacks(dual: Path) -> None:
    r = cli("explain", str(dual), "--from", "fd00::1", "--to", "app/web", "--port", "80")
    assert r.returncode == 2
    assert "'app/web' has no IPv6 address" in r.stderr


def test_explain_refuses_ends_that_share_no_family(dual: Path) -> None:
    r = cli("explain", str(dual), "--from", "app/v6only", "--to", "app/web", "--port", "80")
    assert r.returncode == 2, r.stdout
    assert "share no address family" in r.stderr and "fd00::4" in r.stderr and "10.1.0.3" in r.stderr
    r = cli("explain", str(dual), "--from", "10.1.0.1", "--to", "fd00::2", "--port", "80")
    assert r.returncode == 2, r.stdout
    assert "'10.1.0.1' is IPv4 and 'fd00::2' is IPv6" in r.stderr


def test_diff_says_which_family_a_change_closes(dual: Path, tmp_path: Path) -> None:
    before = load_project([str(dual / "pods.yaml"), str(dual / "netpol.yaml")])
    after = load_project([str(dual)])
    result = diff(before.policy_set, after.policy_set, before.inventory)
    texts = [result.change_text(c) for c in result.changes]
    assert len(texts) == 1, texts
    assert "IPv6" in texts[0] and "allowed → denied" in texts[0]


# --- pods that hold no address -----------------------------------------------------------------------

LIFECYCLE = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: running, namespace: app, labels: {app: x}}
  status: {phase: Running, podIP: 10.2.0.5}
- apiVersion: v1
  kind: Pod
  metadata: {name: a-job, namespace: app, labels: {app: x}}
  status: {phase: Succeeded, podIP: 10.2.0.5}
- apiVersion: v1
  kind: Pod
  metadata: {name: crashed, namespace: app, labels: {app: x}}
  status: {phase: Failed, podIP: 10.2.0.7}
- apiVersion: v1
  kind: Pod
  metadata: {name: waiting, namespace: app, labels: {app: x}}
  status: {phase: Pending}
- apiVersion: v1
  kind: Pod
  metadata: {name: starting, namespace: app, labels: {app: x}}
  status: {phase: Pending, podIP: 10.2.0.9}
- apiVersion: v1
  kind: Pod
  metadata: {name: planned, namespace: app, labels: {app: x}}
"""


def test_only_pods_that_hold_their_address_are_endpoints(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(LIFECYCLE)
    project = load_project([str(tmp_path)])
    refs = sorted(p.ref for p in matrix(project, 6, 80).pods)
    # finished pods released their address; a pending pod without one has none; a pod manifest
    # without a status is judged by name (before it is applied)
    assert refs == ["app/planned", "app/running", "app/starting"]
    assert project.inventory.owner_of(__import__("ipaddress").ip_address("10.2.0.5")).ref == "app/running"
    r = cli("check", str(tmp_path))
    assert r.returncode == 0 and "Pod holding no address" in r.stdout and "x3" in r.stdout
    r = cli("explain", str(tmp_path), "--from", "app/a-job", "--to", "app/running", "--port", "80")
    assert r.returncode == 2 and "holds no address (phase Succeeded" in r.stderr


def test_a_pod_that_finishes_leaves_the_live_engine(tmp_path: Path) -> None:
    from pyclassify.live import LiveProject

    (tmp_path / "pods.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata: {name: job, namespace: app, labels: {app: x}}
        status: {phase: Running, podIP: 10.2.0.8}
        """)
    )
    project = load_project([str(tmp_path)])
    live = LiveProject(project)
    running = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job", "namespace": "app", "labels": {"app": "x"}},
        "status": {"phase": "Running", "podIP": "10.2.0.8"},
    }
    done = {**running, "status": {"phase": "Succeeded", "podIP": "10.2.0.8"}}
    assert live.snapshot()._engine.owner_of("10.2.0.8") is not None
    live.apply(running, done)
    assert live.snapshot()._engine.owner_of("10.2.0.8") is None
    assert not [e for e in live.snapshot().inventory.endpoints if e.name == "job"]
