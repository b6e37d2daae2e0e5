"""deploy/helm/pyclassify: ``helm`` (built from Go modules by scripts/helm-testenv.sh, as the API
server is) lints the chart and renders it with its defaults and with every value changed; both
renders pass a strict server-side dry run against the real API server, and ``helm install`` (the
command deploy/README.md gives) creates its objects there. The default render is the kustomize
base's DaemonSet pod, RBAC rules and binding, so the two cannot drift."""

from __future__ import annotations

import os
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyclassify.kube import load_client
from pyclassify.kube.client import ApiException
from tests.kube.apiserver import REPO
from tests.kube.objects import create, path_of
from tests.kube.test_deploy import manifests
from tests.kube.test_listwatch import create_namespace, delete

CHART = REPO / "deploy" / "helm" / "pyclassify"

#: Every value of values.yaml changed.
CHANGED: dict[str, Any] = {
    "image": {"repository": "registry.example/pyclassify", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "fail": "open",
    "queue": 7,
    "metrics": {"host": "0.0.0.0", "port": 9999, "ruleLabels": False},
    "onStop": "remove",
    "workloadInterfacePrefix": "cni0",
    "extraArgs": ["--memory-budget=512Mi"],
    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "",
    "terminationGracePeriodSeconds": 10,
    "serviceAccount": {"name": "pyclassify-enforcer"},
}


@pytest.fixture(scope="module")
def helm() -> str:
    r = subprocess.run(["bash", str(REPO / "scripts" / "helm-testenv.sh"), "--check"], capture_output=True, text=True)
    if r.returncode != 0:
        message = "helm is not built: run `bash scripts/helm-testenv.sh` (a few minutes the first time; cached)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return r.stdout.strip()


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr}")
    return r


def render(
    helm: str, values: dict[str, Any] | None, tmp_path: Path, release: str = "pyclassify", ns: str = "pyclassify-system"
) -> list[dict[str, Any]]:
    argv = [helm, "template", release, str(CHART), "--namespace", ns]
    if values is not None:
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        argv += ["--values", str(tmp_path / "values.yaml")]
    return [d for d in yaml.safe_load_all(run(argv).stdout) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def test_the_chart_lints_and_refuses_a_bad_value(helm: str) -> None:
    out = run([helm, "lint", "--strict", str(CHART)]).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    bad = run([helm, "template", "pyclassify", str(CHART), "--set", "fail=sometimes"], check=False)
    assert bad.returncode != 0 and "fail" in bad.stderr, bad.stderr
    bad = run([helm, "template", "pyclassify", str(CHART), "--set", "webhook.enabled=true"], check=False)
    assert bad.returncode != 0 and "webhook" in bad.stderr, bad.stderr  # no such value (yet)


def test_the_chart_and_the_image_have_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    image = one(manifests(), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{version}")


def test_the_default_render_is_the_kustomize_base(helm: str, tmp_path: Path) -> None:
    chart = render(helm, None, tmp_path)
    base = manifests()
    # Helm charts leave the namespace to `helm install --namespace N --create-namespace`.
    assert sorted(o["kind"] for o in chart) == sorted(o["kind"] for o in base if o["kind"] != "Namespace")
    for obj in chart:
        assert obj["metadata"]["name"] == "pyclassify"
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "pyclassify"
    # The pod as a whole: image, args, environment, probes, capabilities, mounts, resources.
    assert one(chart, "DaemonSet")["spec"]["template"]["spec"] == one(base, "DaemonSet")["spec"]["template"]["spec"]
    assert one(chart, "DaemonSet")["spec"]["updateStrategy"] == one(base, "DaemonSet")["spec"]["updateStrategy"]
    assert one(chart, "ClusterRole")["rules"] == one(base, "ClusterRole")["rules"]
    for key in ("roleRef", "subjects"):
        assert one(chart, "ClusterRoleBinding")[key] == one(base, "ClusterRoleBinding")[key]


def test_every_value_reaches_the_daemonset(helm: str, tmp_path: Path) -> None:
    objs = render(helm, CHANGED, tmp_path, release="edge", ns="net")
    ds = one(objs, "DaemonSet")
    assert ds["metadata"]["name"] == "edge-pyclassify" and ds["metadata"]["namespace"] == "net"
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/pyclassify:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == [
        "enforce",
        "--in-cluster",
        "--queue=7",
        "--fail=open",
        "--metrics=0.0.0.0:9999",
        "--no-metrics-rule-labels",
        "--on-stop=remove",
        "--workload-interface-prefix=cni0",
        "--memory-budget=512Mi",
    ]
    # Metrics on every address: the probes ask the node's loopback.
    assert container["readinessProbe"]["httpGet"] == {"host": "127.0.0.1", "path": "/readyz", "port": 9999}
    assert container["livenessProbe"]["httpGet"] == {"host": "127.0.0.1", "path": "/healthz", "port": 9999}
    assert container["resources"] == CHANGED["resources"]
    assert pod["nodeSelector"] == CHANGED["nodeSelector"]
    assert pod["tolerations"] == CHANGED["tolerations"]
    assert pod["imagePullSecrets"] == CHANGED["imagePullSecrets"]
    assert "priorityClassName" not in pod and pod["terminationGracePeriodSeconds"] == 10
    assert pod["serviceAccountName"] == "pyclassify-enforcer"
    sa = one(objs, "ServiceAccount")["metadata"]
    assert (sa["name"], sa["namespace"]) == ("pyclassify-enforcer", "net")
    binding = one(objs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pyclassify-enforcer", "namespace": "net"}]
    assert binding["roleRef"]["name"] == one(objs, "ClusterRole")["metadata"]["name"] == "edge-pyclassify"
    # The rendered arguments are ones `pyclassify enforce` takes (parsed and converted by it).
    from pyclassify.cli.enforce import enforce_command

    enforce_command.make_context("enforce", list(container["args"][1:]))


@pytest.fixture(scope="module")
def helm_namespace(kube_cluster):
    """A namespace of its own (no namespace controller runs here to finalize a deletion, so
    deploy/'s is not reused)."""
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    name = f"pyclassify-helm-{uuid.uuid4().hex[:6]}"
    create_namespace(kc, name, {})
    yield name
    delete(kc, f"/api/v1/namespaces/{name}")


@pytest.mark.parametrize("values", [None, CHANGED], ids=["defaults", "changed"])
def test_renders_pass_a_strict_server_side_dry_run(
    helm: str, kube_cluster, helm_namespace: str, tmp_path: Path, values: dict[str, Any] | None
) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = render(helm, values, tmp_path, release="dry-run-pyclassify", ns=helm_namespace)
    for obj in objs:
        answer = create(kc, obj, dry_run=True)
        assert answer["kind"] == obj["kind"] and answer["metadata"]["name"] == obj["metadata"]["name"]
    # Strict: a field the API does not know fails the dry run, naming it.
    broken = one(objs, "DaemonSet")
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicee"] = "Always"
    with pytest.raises(ApiException) as exc:
        create(kc, broken, dry_run=True)
    assert exc.value.status == 400 and "imagePullPolicee" in (exc.value.body or "")


def test_helm_install_creates_the_objects(helm: str, kube_cluster, helm_namespace: str) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    kube = ["--kubeconfig", str(kube_cluster.kubeconfig), "--kube-context", "test"]
    # deploy/README.md's command, in a namespace of the test's own
    image = ["--set", "image.repository=registry.example/pyclassify"]
    run([helm, "install", "pyclassify", str(CHART), "--namespace", helm_namespace, "--create-namespace", *image, *kube])
    try:
        installed = render(helm, None, Path(kube_cluster.dir), ns=helm_namespace)
        for obj in installed:
            got = kc.request("GET", path_of(obj))
            assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        listed = run([helm, "list", "--namespace", helm_namespace, "--output", "yaml", *kube]).stdout
        (release,) = yaml.safe_load(listed)
        assert release["name"] == "pyclassify" and release["status"] == "deployed"
    finally:
        run([helm, "uninstall", "pyclassify", "--namespace", helm_namespace, *kube])
    for obj in installed:
        with pytest.raises(ApiException) as exc:
            kc.request("GET", path_of(obj))
        assert exc.value.status == 404
