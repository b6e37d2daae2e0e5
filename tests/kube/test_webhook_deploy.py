"""deploy/webhook/ against the real API server: every manifest (and the cert-manager component's
output) passes a strict server-side dry run; the ServiceAccount can do what ``admission-webhook
--tls-self-signed`` needs and nothing more; and the real kube-apiserver calls the webhook over
TLS with the certificate the webhook made, keeps calling it across rotations (the caBundle kept
current), admits and rejects Pods per a ContainerAdmissionPolicy created through the API, and
applies the configuration's failurePolicy while the webhook is down."""

from __future__ import annotations

import base64
import copy
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from pyclassify.admission.certs import SelfSignedCertificates, service_names
from pyclassify.kube import load_client
from pyclassify.kube.admission import CONTAINER_ADMISSION_POLICIES
from pyclassify.kube.client import ApiException, KubeClient, object_path
from tests.kube.apiserver import free_port
from tests.kube.objects import create, path_of, refusal
from tests.kube.test_deploy import manifests
from tests.kube.test_listwatch import delete, wait_until

WEBHOOK = Path(__file__).resolve().parents[2] / "deploy" / "webhook"
COMPONENT = WEBHOOK / "cert-manager"
NAMESPACE = "pyclassify-admission"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"

#: The kinds the manifests hold.
KINDS = {
    "Namespace",
    "ServiceAccount",
    "Secret",
    "Service",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Deployment",
    "ValidatingWebhookConfiguration",
}
#: cert-manager's kinds: its CRDs are not installed in the test API server, so these two are
#: checked here for what the rest relies on, not dry-run.
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


def of_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


def _json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902 add/replace/remove/test, as kustomize applies a component's patch files."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = obj
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        key: Any = last if isinstance(node, dict) else (len(node) if last == "-" else int(last))
        if op["op"] == "test":
            assert node[key] == op["value"], op
        elif op["op"] == "remove":
            del node[key]
        elif op["op"] == "add" and isinstance(node, list):
            node.insert(key, op["value"])
        else:
            node[key] = op["value"]


def with_component(objs: list[dict[str, Any]], component: Path = COMPONENT) -> list[dict[str, Any]]:
    """``objs`` as the component makes them: its resources added, its patches applied (each a
    JSON patch of its target, or a ``$patch: delete``)."""
    spec = yaml.safe_load((component / "kustomization.yaml").read_text())
    assert spec["kind"] == "Component"
    out = copy.deepcopy(objs)
    for name in spec.get("resources", []):
        out += [d for d in yaml.safe_load_all((component / name).read_text()) if d]
    for patch in spec["patches"]:
        body = yaml.safe_load((component / patch["path"]).read_text())
        if isinstance(body, dict) and body.get("$patch") == "delete":
            gone = (body["kind"], body["metadata"]["name"])
            assert gone in {(o["kind"], o["metadata"]["name"]) for o in out}, gone
            out = [o for o in out if (o["kind"], o["metadata"]["name"]) != gone]
            continue
        target = patch["target"]
        (obj,) = [o for o in out if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
        _json_patch(obj, body)
    return out


@pytest.fixture(scope="module")
def namespace(kube_cluster) -> Iterator[dict[str, Any]]:
    """The webhook's Namespace, validated, then created for the module (the namespaced objects'
    dry runs need it)."""
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    ns = of_kind(manifests(WEBHOOK), "Namespace")
    create(kc, ns, dry_run=True)
    create(kc, ns, dry_run=False)
    yield ns
    delete(kc, path_of(ns))


def test_every_manifest_passes_a_strict_server_side_dry_run(kube_cluster, namespace) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = manifests(WEBHOOK)
    assert {o["kind"] for o in objs} == KINDS
    for obj in objs:
        if obj["kind"] != "Namespace":
            answer = create(kc, obj, dry_run=True)
            assert answer["kind"] == obj["kind"] and answer["metadata"]["name"] == obj["metadata"]["name"]
    broken = of_kind(objs, "ValidatingWebhookConfiguration")
    broken["webhooks"][0]["failurePolicee"] = "Fail"
    with pytest.raises(ApiException) as exc:
        create(kc, broken, dry_run=True)
    assert exc.value.status == 400 and "failurePolicee" in (exc.value.body or "")


def test_the_cert_manager_component_passes_a_strict_server_side_dry_run(kube_cluster, namespace) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = with_component(manifests(WEBHOOK))
    for obj in objs:
        if obj["kind"] not in CERT_MANAGER_KINDS | {"Namespace"}:  # the Namespace exists: the fixture made it
            create(kc, obj, dry_run=True)
    kinds = [o["kind"] for o in objs]
    assert "Secret" not in kinds and "Role" not in kinds and "RoleBinding" not in kinds
    cert = of_kind(objs, "Certificate")
    vwc = of_kind(objs, "ValidatingWebhookConfiguration")
    service = vwc["webhooks"][0]["clientConfig"]["service"]
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{cert['metadata']['name']}"
    assert f"{service['name']}.{service['namespace']}.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == of_kind(objs, "Issuer")["metadata"]["name"]
    pod = of_kind(objs, "Deployment")["spec"]["template"]["spec"]
    (mounted,) = [v for v in pod["volumes"] if "secret" in v]
    assert mounted["secret"]["secretName"] == cert["spec"]["secretName"]
    args = pod["containers"][0]["args"]
    assert "--tls-cert=/tls/tls.crt" in args and not any(a.startswith("--tls-self-signed") for a in args)
    rules = of_kind(objs, "ClusterRole")["rules"]
    assert all("validatingwebhookconfigurations" not in r["resources"] for r in rules)


def test_the_deployment_is_hardened_and_its_arguments_are_the_commands() -> None:
    objs = manifests(WEBHOOK)
    pod = of_kind(objs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    vwc = of_kind(objs, "ValidatingWebhookConfiguration")
    (hook,) = vwc["webhooks"]
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] in ("Fail", "Ignore")
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE]}
    ]
    service = of_kind(objs, "Service")
    assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    args = container["args"]
    assert f"--webhook-configuration={vwc['metadata']['name']}" in args
    assert f"--service=$(POD_NAMESPACE)/{service['metadata']['name']}" in args
    assert f"--tls-secret=$(POD_NAMESPACE)/{of_kind(objs, 'Secret')['metadata']['name']}" in args
    from click.testing import CliRunner

    from pyclassify.cli import main

    help_text = CliRunner().invoke(main, ["admission-webhook", "--help"]).output
    for arg in args[1:]:
        assert arg.split("=")[0] in help_text, arg


def service_account_client(admin: KubeClient, kube_cluster: Any, tmp_path: Path, sa: dict[str, Any]) -> KubeClient:
    token = admin.request(
        "POST",
        f"/api/v1/namespaces/{sa['namespace']}/serviceaccounts/{sa['name']}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )["status"]["token"]
    ca = base64.b64encode((kube_cluster.dir / "ca.crt").read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [{"name": "test", "cluster": {"server": kube_cluster.url, "certificate-authority-data": ca}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": "sa"}}],
    }
    (tmp_path / "sa.kubeconfig").write_text(yaml.safe_dump(config))
    return load_client(str(tmp_path / "sa.kubeconfig"), "sa")


def test_the_service_account_can_keep_its_certificates_and_read_policies_and_nothing_more(
    kube_cluster, namespace, tmp_path: Path
) -> None:
    admin = load_client(str(kube_cluster.kubeconfig), "test")
    objs = [o for o in manifests(WEBHOOK) if o["kind"] not in ("Namespace", "Deployment", "Service")]
    vwc = of_kind(objs, "ValidatingWebhookConfiguration")
    # Created for real in a shared API server: it must judge no other test's Pod.
    vwc["webhooks"][0]["namespaceSelector"] = {"matchLabels": {"pyclassify-test": "never"}}
    for obj in objs:
        create(admin, obj, dry_run=False)
    try:
        sa = of_kind(objs, "ServiceAccount")["metadata"]
        kc = service_account_client(admin, kube_cluster, tmp_path, sa)
        secret = of_kind(objs, "Secret")["metadata"]["name"]
        certs = SelfSignedCertificates(
            service_names(NAMESPACE, "pyclassify-webhook"),
            rotation_period=3600,
            client=kc,
            secret=(NAMESPACE, secret),
            webhook_configuration=vwc["metadata"]["name"],
        )
        assert certs.sync() is True
        assert certs.counters["bundle_updates"] == 1
        got = admin.request("GET", path_of(vwc))["webhooks"][0]["clientConfig"]["caBundle"]
        assert base64.b64decode(got) == certs.certificates.bundle  # type: ignore[union-attr]
        # A second replica adopts what the Secret holds; after the first one rotates, the
        # certificate the second still serves is trusted by the bundle published, until it adopts.
        replica = SelfSignedCertificates(
            certs.names,
            rotation_period=3600,
            client=kc,
            secret=(NAMESPACE, secret),
            webhook_configuration=vwc["metadata"]["name"],
        )
        assert replica.sync() is True and replica.counters == {
            "rotations": 0,
            "adopted": 1,
            "bundle_updates": 0,
            "errors": 0,
        }
        assert replica.certificates.cert == certs.certificates.cert  # type: ignore[union-attr]
        assert certs.sync(force=True) is True  # a rotation: the Secret and the caBundle written again
        got = admin.request("GET", path_of(vwc))["webhooks"][0]["clientConfig"]["caBundle"]
        published = {c.subject: c for c in x509.load_pem_x509_certificates(base64.b64decode(got))}
        old = replica.certificates.cert  # type: ignore[union-attr]
        old.verify_directly_issued_by(published[old.issuer])
        new = certs.certificates.cert  # type: ignore[union-attr]
        new.verify_directly_issued_by(published[new.issuer])
        assert replica.sync() is True and replica.certificates.cert == new  # type: ignore[union-attr]
        assert replica.counters["adopted"] == 2 and replica.counters["rotations"] == 0
        items, _ = kc.list(CONTAINER_ADMISSION_POLICIES.path)
        assert isinstance(items, list)
        kc.list("/api/v1/namespaces")
        for method, path in (
            ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
            ("GET", "/api/v1/namespaces/default/secrets/other"),
            ("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets"),
            ("DELETE", path_of(of_kind(objs, "Secret"))),
            ("GET", f"{VWC}/another"),
            ("DELETE", path_of(vwc)),
            ("POST", "/api/v1/namespaces/default/pods"),
            ("DELETE", object_path(CONTAINER_ADMISSION_POLICIES.prefix, "containeradmissionpolicies", None, "x")),
        ):
            with pytest.raises(ApiException) as exc:
                kc.request(method, path, body={} if method == "POST" else None)
            assert exc.value.status == 403, (method, path, exc.value.status)
    finally:
        for obj in reversed(objs):
            delete(admin, path_of(obj))


def test_a_secret_of_garbage_is_replaced_and_a_configuration_applied_later_gets_the_bundle(
    kube_cluster, namespace
) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "garbage-tls", "namespace": NAMESPACE},
        "data": {"tls.crt": base64.b64encode(b"not a certificate").decode()},
    }
    vwc = vwc_body(free_port(), "Ignore")
    vwc["metadata"]["name"] = "pyclassify-webhook-late"
    vwc["webhooks"][0]["namespaceSelector"] = {"matchLabels": {"pyclassify-test": "never"}}
    create(kc, secret, dry_run=False)
    try:
        certs = SelfSignedCertificates(
            ["127.0.0.1"],
            rotation_period=3600,
            client=kc,
            secret=(NAMESPACE, "garbage-tls"),
            webhook_configuration="pyclassify-webhook-late",
        )
        assert certs.sync() is True  # the configuration does not exist yet: said, not an error
        assert certs.counters["rotations"] == 1 and certs.counters["bundle_updates"] == 0
        stored = kc.request("GET", path_of(secret))["data"]
        assert base64.b64decode(stored["ca.crt"]) == certs.certificates.bundle  # type: ignore[union-attr]
        create(kc, vwc, dry_run=False)
        assert certs.sync() is False and certs.counters["bundle_updates"] == 1
        got = kc.request("GET", path_of(vwc))["webhooks"][0]["clientConfig"]["caBundle"]
        assert base64.b64decode(got) == certs.certificates.bundle  # type: ignore[union-attr]
        # Re-applied with an empty caBundle: put back at the next check.
        kc.request(
            "PATCH",
            path_of(vwc),
            body=[{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}],
            content_type="application/json-patch+json",
        )
        assert certs.sync() is False and certs.counters["bundle_updates"] == 2
    finally:
        delete(kc, path_of(vwc))
        delete(kc, path_of(secret))


# --- the API server calls the webhook ---

E2E_NAMESPACE = "webhook-e2e"
E2E_LABEL = {"pyclassify-e2e": "webhook"}
E2E_VWC = "pyclassify-webhook-e2e"
TRUSTED = "registry.example/trusted/app:1"
UNTRUSTED = "docker.io/library/nginx:1"
POLICY = {
    "apiVersion": "containersecurity.tigera.io/v1beta1",
    "kind": "ContainerAdmissionPolicy",
    "metadata": {"name": "e2e-trusted-registry-only"},
    "spec": {
        "order": 1,
        "selector": "all()",
        "namespaceSelector": "pyclassify-e2e == 'webhook'",
        "rules": [
            {"action": "Reject", "imagePath": {"operator": "IsNoneOf", "values": ["^registry.example/trusted/.*"]}},
            {"action": "Allow"},
        ],
    },
}


def pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": E2E_NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


def create_pod(kc: KubeClient, name: str, image: str, dry_run: bool = False) -> str | None:
    """None when the API server created it (or would have), else the message it refused with."""
    return refusal(kc, pod(name, image), dry_run)


def served_certificate(port: int) -> x509.Certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s, context.wrap_socket(s) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def vwc_body(port: int, failure_policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": E2E_VWC},
        "webhooks": [
            {
                "name": "containeradmissionpolicies.admission.pyclassify.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": failure_policy,
                "timeoutSeconds": 5,
                # On this host the API server calls 127.0.0.1; in a cluster it is the Service.
                "clientConfig": {"url": f"https://127.0.0.1:{port}/validate"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                # Only this test's namespace: the API server is shared with the other tests.
                "namespaceSelector": {"matchLabels": E2E_LABEL},
            }
        ],
    }


def set_failure_policy(kc: KubeClient, policy: str) -> None:
    kc.request(
        "PATCH",
        f"{VWC}/{E2E_VWC}",
        body=[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}],
        content_type="application/json-patch+json",
    )


def test_the_api_server_calls_the_webhook_over_tls_across_rotations_and_applies_the_failure_policy(
    kube_cluster, tmp_path: Path
) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    port = free_port()
    policy_path = object_path(
        CONTAINER_ADMISSION_POLICIES.prefix, "containeradmissionpolicies", None, POLICY["metadata"]["name"]
    )
    secret_path = f"/api/v1/namespaces/{E2E_NAMESPACE}/secrets/webhook-tls"
    try:
        kc.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": E2E_NAMESPACE, "labels": E2E_LABEL}},
        )
    except ApiException as e:
        if e.status != 409:
            raise
    kc.request("POST", CONTAINER_ADMISSION_POLICIES.path, body=POLICY)
    kc.request("POST", VWC, body=vwc_body(port, "Fail"))
    log = open(tmp_path / "webhook.log", "wb")
    period = 4.0
    webhook = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyclassify",
            "admission-webhook",
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
            "--listen",
            f"127.0.0.1:{port}",
            "--tls-self-signed",
            "--tls-san",
            "127.0.0.1",
            "--tls-secret",
            f"{E2E_NAMESPACE}/webhook-tls",
            "--webhook-configuration",
            E2E_VWC,
            f"--tls-rotation-period={period}s",
            "--reload-interval=0.2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    created: list[str] = []

    def webhook_log() -> str:
        return (tmp_path / "webhook.log").read_text(errors="replace")[-3000:]

    try:
        # Up, with its authority in the caBundle; then the API server's view of the
        # configuration catches up (a dry run is judged like a create: sideEffects None).
        def bundle() -> bytes:
            got = kc.request("GET", f"{VWC}/{E2E_VWC}")["webhooks"][0]["clientConfig"].get("caBundle")
            return base64.b64decode(got) if got else b""

        wait_until(lambda: webhook.poll() is not None or bundle(), "the caBundle filled in", timeout=30)
        assert webhook.poll() is None, webhook_log()
        wait_until(
            lambda: "e2e-trusted-registry-only" in (create_pod(kc, "probe", UNTRUSTED, dry_run=True) or ""),
            "the API server calling the webhook",
            timeout=30,
        )

        # A Pod the policy allows is created; one it rejects is refused with the webhook's message.
        assert create_pod(kc, "trusted", TRUSTED) is None
        created.append("trusted")
        refusal = create_pod(kc, "untrusted", UNTRUSTED)
        assert refusal is not None, "the untrusted image was admitted"
        assert 'admission webhook "containeradmissionpolicies.admission.pyclassify.io" denied the request' in refusal
        assert "e2e-trusted-registry-only" in refusal and "docker.io/library/nginx" in refusal

        # Rotations while the API server keeps calling: every call is answered by the webhook
        # (never "failed calling webhook"), and the certificate served changes, from the
        # authority the caBundle already held.
        first = served_certificate(port)
        first_bundle = bundle()
        seen = {first.serial_number}
        deadline = time.monotonic() + 3 * period
        calls = 0
        while time.monotonic() < deadline or len(seen) < 3:
            assert time.monotonic() < deadline + 4 * period, f"no rotation seen: {seen}\n{webhook_log()}"
            refusal = create_pod(kc, f"rotating-{calls}", UNTRUSTED, dry_run=True) or ""
            assert "e2e-trusted-registry-only" in refusal, refusal
            assert create_pod(kc, f"rotating-{calls}", TRUSTED, dry_run=True) is None
            calls += 1
            served = served_certificate(port)
            seen.add(served.serial_number)
            issuers = {c.subject for c in x509.load_pem_x509_certificates(bundle())}
            assert served.issuer in issuers
            time.sleep(0.1)
        assert bundle() != first_bundle
        stored = kc.request("GET", secret_path)["data"]
        assert x509.load_pem_x509_certificate(base64.b64decode(stored["tls.crt"])) == served_certificate(port)
        assert create_pod(kc, "after-rotation", TRUSTED) is None
        created.append("after-rotation")

        # The webhook down: failurePolicy Fail refuses every Pod, Ignore admits it.
        os.killpg(webhook.pid, signal.SIGTERM)
        webhook.wait(timeout=15)
        refusal = create_pod(kc, "down-fail", TRUSTED)
        assert refusal is not None and "failed calling webhook" in refusal, refusal
        set_failure_policy(kc, "Ignore")
        wait_until(lambda: create_pod(kc, "down-ignore", UNTRUSTED, dry_run=True) is None, "Ignore in force")
        assert create_pod(kc, "down-ignore", UNTRUSTED) is None
        created.append("down-ignore")
    finally:
        if webhook.poll() is None:
            os.killpg(webhook.pid, signal.SIGKILL)
            webhook.wait()
        log.close()
        delete(kc, f"{VWC}/{E2E_VWC}")
        delete(kc, policy_path)
        delete(kc, secret_path)
        for name in created:
            delete(kc, f"/api/v1/namespaces/{E2E_NAMESPACE}/pods/{name}")
