"""deploy/helm/pyclassify: ``helm`` (built from Go modules by scripts/helm-testenv.sh, as the API
server is) lints the chart and renders it with its defaults and with every value changed; the
renders pass a strict server-side dry run against the real API server, and ``helm install`` (the
command deploy/README.md gives) creates its objects there. The default render is the kustomize
base's DaemonSet pod, RBAC rules and binding, and with ``webhook.enabled`` the webhook's objects
are deploy/webhook/'s (with cert-manager, the base and its component), so they cannot drift."""

from __future__ import annotations

import base64
import copy
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
from tests.kube.test_webhook_deploy import CERT_MANAGER_KINDS, WEBHOOK, service_account_client, with_component

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

#: The webhook on, as deploy/webhook/ is.
WEBHOOK_ON: dict[str, Any] = {"webhook": {"enabled": True}}
#: The webhook on, its certificates from cert-manager, as deploy/webhook/ with its cert-manager component.
WEBHOOK_CERT_MANAGER: dict[str, Any] = {"webhook": {"enabled": True, "certificates": {"mode": "cert-manager"}}}
#: Every webhook value changed (and the image: one imported into a node, never pulled).
WEBHOOK_CHANGED: dict[str, Any] = {
    "image": {"repository": "pcnode.local/pyclassify", "tag": "0.1.0", "pullPolicy": "Never"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "webhook": {
        "enabled": True,
        "replicas": 1,
        "failurePolicy": "Ignore",
        "excludeNamespaces": ["kube-system"],
        "certificates": {"mode": "self-signed", "rotationPeriod": "24h"},
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
#: The labels helm's objects carry beside the kustomize base's.
HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
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


def webhook_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "pyclassify-webhook"]


def without_helm_labels(obj: Any) -> Any:
    """``obj`` without the labels helm adds, in its labels and in every selector: the objects'
    own labels only checked to hold the base's, then dropped."""
    if isinstance(obj, list):
        return [without_helm_labels(o) for o in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        if key in ("labels", "matchLabels", "selector") and all(isinstance(v, str) for v in value.values()):
            value = {k: v for k, v in value.items() if k not in HELM_LABELS}
        out[key] = without_helm_labels(value)
    return out


def test_the_chart_lints_and_refuses_a_bad_value(helm: str) -> None:
    out = run([helm, "lint", "--strict", str(CHART)]).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    bad = run([helm, "template", "pyclassify", str(CHART), "--set", "fail=sometimes"], check=False)
    assert bad.returncode != 0 and "fail" in bad.stderr, bad.stderr
    for mode in ("self-signed", "cert-manager"):
        webhook = ["--set", "webhook.enabled=true", "--set", f"webhook.certificates.mode={mode}"]
        out = run([helm, "lint", "--strict", str(CHART), *webhook]).stdout
        assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize(
    "value, field",
    [
        ("webhook.failurePolicy=Sometimes", "failurePolicy"),
        ("webhook.certificates.mode=acme", "mode"),
        ("webhook.certificates.rotationPeriod=0h", "rotationPeriod"),
        ("webhook.certificates.certManager.duration=90d", "duration"),
        ("webhook.certificates.certManager.issuerRef.kind=Issuer", "issuerRef"),
        ("webhook.replicas=0", "replicas"),
        ("webhook.excludeNamespaces={Kube_System}", "excludeNamespaces"),
        ("webhook.replica=2", "replica"),
        ("webhook.enabled=yes", "enabled"),
    ],
)
def test_lint_refuses_a_bad_webhook_value(helm: str, value: str, field: str) -> None:
    bad = run([helm, "lint", "--strict", str(CHART), "--set", "webhook.enabled=true", "--set", value], check=False)
    assert bad.returncode != 0, bad.stdout
    assert "values don't meet the specifications of the schema" in bad.stdout + bad.stderr
    assert field in bad.stdout + bad.stderr, bad.stdout + bad.stderr


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


@pytest.mark.parametrize("values", [WEBHOOK_ON, WEBHOOK_CERT_MANAGER], ids=["self-signed", "cert-manager"])
def test_the_webhook_render_is_the_kustomize_base(helm: str, tmp_path: Path, values: dict[str, Any]) -> None:
    chart = render(helm, values, tmp_path, ns="pyclassify-admission")
    base = manifests(WEBHOOK)
    if values["webhook"].get("certificates", {}).get("mode") == "cert-manager":
        base = with_component(base)
    # The enforcing DaemonSet and its RBAC beside them, as without the webhook.
    assert {(o["kind"], o["metadata"]["name"]) for o in chart if o not in webhook_objects(chart)} == {
        (o["kind"], o["metadata"]["name"]) for o in render(helm, None, tmp_path, ns="pyclassify-admission")
    }
    chart = webhook_objects(chart)
    base_by_name = {(o["kind"], o["metadata"]["name"]): o for o in base if o["kind"] != "Namespace"}
    assert sorted((o["kind"], o["metadata"]["name"]) for o in chart) == sorted(base_by_name)
    for obj in chart:
        expected = base_by_name[obj["kind"], obj["metadata"]["name"]]
        labels = obj["metadata"]["labels"]
        assert labels.items() >= expected["metadata"].get("labels", {}).items()
        assert labels["app.kubernetes.io/instance"] == "pyclassify"
        got = without_helm_labels(obj)
        got["metadata"].pop("labels")
        expected = without_helm_labels(expected)
        expected["metadata"].pop("labels", None)
        # The whole object: the pod (image, arguments, probes, hardening, mounts), the rules and
        # their resourceNames, the Service, the webhook configuration, the Certificate.
        assert got == expected, obj["kind"]


def test_every_webhook_value_reaches_its_objects(helm: str, tmp_path: Path) -> None:
    objs = webhook_objects(render(helm, WEBHOOK_CHANGED, tmp_path, release="edge", ns="net"))
    name = "edge-pyclassify-webhook"
    for obj in objs:
        assert obj["metadata"]["name"] in (name, f"{name}-tls")
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"):
            assert obj["metadata"]["namespace"] == "net"
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "pcnode.local/pyclassify:0.1.0" and container["imagePullPolicy"] == "Never"
    assert container["resources"] == WEBHOOK_CHANGED["webhook"]["resources"]
    assert pod["nodeSelector"] == WEBHOOK_CHANGED["webhook"]["nodeSelector"]
    assert pod["tolerations"] == WEBHOOK_CHANGED["webhook"]["tolerations"]
    assert pod["imagePullSecrets"] == WEBHOOK_CHANGED["imagePullSecrets"]
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"] == name
    # The names the webhook is given are the objects': the Service it certifies, the Secret it
    # keeps, the configuration it publishes to, in the release's namespace.
    args = [a.replace("$(POD_NAMESPACE)", "net") for a in container["args"]]
    assert args == [
        "admission-webhook",
        "--in-cluster",
        "--listen=:8443",
        "--tls-self-signed",
        f"--service=net/{name}",
        f"--tls-secret=net/{name}-tls",
        f"--webhook-configuration={name}",
        "--tls-rotation-period=24h",
        "--failure-policy=Ignore",
    ]
    vwc = one(objs, "ValidatingWebhookConfiguration")
    (hook,) = vwc["webhooks"]
    assert vwc["metadata"]["name"] == name and hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"] | {"path": "/validate", "port": 443} == hook["clientConfig"]["service"]
    assert (hook["clientConfig"]["service"]["name"], hook["clientConfig"]["service"]["namespace"]) == (name, "net")
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["net", "kube-system"]
    service = one(objs, "Service")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (vwc_rule,) = [r for r in one(objs, "ClusterRole")["rules"] if "validatingwebhookconfigurations" in r["resources"]]
    assert vwc_rule["resourceNames"] == [name]
    assert one(objs, "Role")["rules"][0]["resourceNames"] == [one(objs, "Secret")["metadata"]["name"]]
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert one(objs, binding)["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "net"}]
    # The rendered arguments are ones `pyclassify admission-webhook` takes (parsed and converted by it).
    from pyclassify.cli.admission import admission_webhook_command

    admission_webhook_command.make_context("admission-webhook", args[1:])


def test_the_webhook_with_an_issuer_of_ones_own(helm: str, tmp_path: Path) -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    values = copy.deepcopy(WEBHOOK_CERT_MANAGER)
    values["webhook"]["certificates"]["certManager"] = {"duration": "720h", "renewBefore": "240h", "issuerRef": issuer}
    objs = webhook_objects(render(helm, values, tmp_path, release="edge", ns="net"))
    kinds = [o["kind"] for o in objs]
    assert "Issuer" not in kinds and "Secret" not in kinds and "Role" not in kinds
    name = "edge-pyclassify-webhook"
    cert = one(objs, "Certificate")
    assert cert["spec"]["issuerRef"] == issuer
    assert (cert["spec"]["duration"], cert["spec"]["renewBefore"]) == ("720h", "240h")
    assert cert["spec"]["dnsNames"] == [f"{name}.net.svc", f"{name}.net.svc.cluster.local"]
    vwc = one(objs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"net/{name}"}
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (tls,) = [v for v in pod["volumes"] if "secret" in v]
    assert tls["secret"]["secretName"] == cert["spec"]["secretName"] == f"{name}-tls"


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


@pytest.mark.parametrize(
    "values",
    [None, CHANGED, WEBHOOK_ON, WEBHOOK_CERT_MANAGER, WEBHOOK_CHANGED],
    ids=["defaults", "changed", "webhook", "webhook-cert-manager", "webhook-changed"],
)
def test_renders_pass_a_strict_server_side_dry_run(
    helm: str, kube_cluster, helm_namespace: str, tmp_path: Path, values: dict[str, Any] | None
) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = render(helm, values, tmp_path, release="dry-run-pyclassify", ns=helm_namespace)
    if values is not None and "webhook" in values:
        assert webhook_objects(objs)
    for obj in objs:
        if obj["kind"] in CERT_MANAGER_KINDS:
            continue  # no cert-manager CRDs in the test API server: compared with the component instead
        answer = create(kc, obj, dry_run=True)
        assert answer["kind"] == obj["kind"] and answer["metadata"]["name"] == obj["metadata"]["name"]
    # Strict: a field the API does not know fails the dry run, naming it.
    broken = one(objs, "DaemonSet")
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicee"] = "Always"
    with pytest.raises(ApiException) as exc:
        create(kc, broken, dry_run=True)
    assert exc.value.status == 400 and "imagePullPolicee" in (exc.value.body or "")


def test_the_webhook_account_keeps_its_certificates_in_the_release_namespace(
    helm: str, kube_cluster, helm_namespace: str, tmp_path: Path
) -> None:
    """The chart's webhook RBAC, created for real in a namespace of the test's own and under
    another release name: the ServiceAccount's token can do what --tls-self-signed does with the
    names the Deployment passes it, and cannot touch another Secret."""
    from pyclassify.admission.certs import SelfSignedCertificates, service_names

    admin = load_client(str(kube_cluster.kubeconfig), "test")
    rendered = webhook_objects(render(helm, WEBHOOK_ON, tmp_path, release="rbac", ns=helm_namespace))
    (container,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    objs = [o for o in rendered if o["kind"] not in ("Deployment", "Service")]
    vwc = one(objs, "ValidatingWebhookConfiguration")
    # Created for real in a shared API server: it must judge no other test's Pod.
    vwc["webhooks"][0]["namespaceSelector"] = {"matchLabels": {"pyclassify-test": "never"}}
    given = dict(a.replace("$(POD_NAMESPACE)", helm_namespace).split("=", 1) for a in container["args"] if "=" in a)
    service_ns, service = given["--service"].split("/")
    secret_ns, secret = given["--tls-secret"].split("/")
    assert service_ns == secret_ns == helm_namespace
    for obj in objs:
        create(admin, obj, dry_run=False)
    try:
        sa = one(objs, "ServiceAccount")["metadata"]
        kc = service_account_client(admin, kube_cluster, tmp_path, sa)
        certs = SelfSignedCertificates(
            service_names(service_ns, service),
            rotation_period=3600,
            client=kc,
            secret=(secret_ns, secret),
            webhook_configuration=given["--webhook-configuration"],
        )
        assert certs.sync() is True
        assert certs.counters["rotations"] == 1 and certs.counters["bundle_updates"] == 1
        assert certs.counters["errors"] == 0
        got = admin.request("GET", path_of(vwc))["webhooks"][0]["clientConfig"]["caBundle"]
        assert base64.b64decode(got) == certs.certificates.bundle  # type: ignore[union-attr]
        for method, path in (
            ("GET", f"/api/v1/namespaces/{helm_namespace}/secrets"),
            ("GET", "/api/v1/namespaces/pyclassify-admission/secrets/pyclassify-webhook-tls"),
            ("GET", f"{path_of(vwc)}-other"),
        ):
            with pytest.raises(ApiException) as exc:
                kc.request(method, path)
            assert exc.value.status == 403, (method, path, exc.value.status)
    finally:
        for obj in reversed(objs):
            delete(admin, path_of(obj))


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
