"""The admission webhook, driven with real HTTPS requests on 127.0.0.1 (a certificate made here):
decisions for the seed's examples, malformed JSON, wrong apiVersion, an oversized body, the
failure policy, health, metrics and hot reload."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify.admission.webhook import AdmissionWebhook, parse_listen
from pyclassify.cli.admission import admission_webhook_command
from pyclassify.documents import InvalidInput, Problems
from pyclassify.loader import load_paths
from tests.admission.certs import self_signed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "admission"
NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return self_signed(tmp_path_factory.mktemp("tls"), "pyclassify-admission.test")


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    shutil.copytree(EXAMPLES / "policies", d)
    return d


@pytest.fixture
def webhook(tls: tuple[str, str], policies: Path) -> Iterator[AdmissionWebhook]:
    hook = AdmissionWebhook(
        [str(policies)],
        tls_cert=tls[0],
        tls_key=tls[1],
        listen=("127.0.0.1", 0),
        scan_paths=[str(EXAMPLES / "scans.yaml")],
        reload_interval=0.05,
        clock=lambda: NOW,
    )
    with hook:
        yield hook


def client(hook: AdmissionWebhook, cert: str) -> http.client.HTTPSConnection:
    ctx = ssl.create_default_context(cafile=cert)
    host, port = hook.address
    return http.client.HTTPSConnection(host, port, context=ctx, timeout=30)


def post(
    hook: AdmissionWebhook, cert: str, body: bytes | str, path: str = "/validate", headers: dict | None = None
) -> tuple[int, Any]:
    conn = client(hook, cert)
    try:
        data = body.encode() if isinstance(body, str) else body
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if resp.getheader("Content-Type", "").startswith(
            "application/json"
        ) else raw
    finally:
        conn.close()


def get(hook: AdmissionWebhook, cert: str, path: str) -> tuple[int, str]:
    conn = client(hook, cert)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def review_of(obj: dict, uid: str = "uid-1", operation: str = "CREATE", **request: Any) -> dict:
    req = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": obj.get("kind")},
        "operation": operation,
        "namespace": obj.get("metadata", {}).get("namespace"),
        "object": obj,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def resource(name: str) -> dict:
    (doc,) = load_paths([str(EXAMPLES / "resources" / name)], Problems())
    return doc.obj


def metric(hook: AdmissionWebhook, cert: str, line_start: str) -> float:
    status, text = get(hook, cert, "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize(
    "name, allowed, fragment",
    [
        ("pod-pass.yaml", True, "admitted by ContainerAdmissionPolicy/reject-failed-and-non-gcr"),
        ("pod-failed-scan.yaml", False, "rejected by ContainerAdmissionPolicy/reject-failed-and-non-gcr rule 2"),
        ("pod-non-gcr.yaml", False, "rejected by ContainerAdmissionPolicy/reject-failed-and-non-gcr rule 0"),
        (
            "deployment-init-fails.yaml",
            False,
            "initContainer 'wait-for-db' image 'busybox:1.36': rejected by "
            "ContainerAdmissionPolicy/reject-failed-and-non-gcr rule 0",
        ),
        ("cronjob-sandbox.yaml", True, "admitted by ContainerAdmissionPolicy/sandbox-exempt"),
        ("pod-unscanned.yaml", False, "rule 2"),
    ],
)
def test_seed_examples_over_https(
    webhook: AdmissionWebhook, tls: tuple[str, str], name: str, allowed: bool, fragment: str
) -> None:
    status, answer = post(webhook, tls[0], json.dumps(review_of(resource(name), uid=f"u-{name}")))
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    r = answer["response"]
    assert r["uid"] == f"u-{name}" and r["allowed"] is allowed
    assert fragment in r["status"]["message"]
    assert r["status"]["code"] == (200 if allowed else 403)


def test_malformed_json(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    status, answer = post(webhook, tls[0], '{"apiVersion": "admission.k8s.io/v1", "kind": ')
    assert status == 400
    assert answer["response"]["allowed"] is False and "invalid JSON" in answer["response"]["status"]["message"]
    status, answer = post(webhook, tls[0], b"\xff\xfe\x00garbage")
    assert status == 400 and answer["response"]["allowed"] is False
    status, answer = post(webhook, tls[0], "[1, 2]")
    assert status == 400 and "must be a JSON object" in answer["response"]["status"]["message"]
    # and the server still answers
    assert get(webhook, tls[0], "/healthz") == (200, "ok\n")


def test_wrong_api_version_and_shape(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    review = review_of(resource("pod-pass.yaml"), uid="old")
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    status, answer = post(webhook, tls[0], json.dumps(review))
    assert status == 400
    r = answer["response"]
    assert (
        r["uid"] == "old"
        and r["allowed"] is False
        and "unsupported AdmissionReview apiVersion" in r["status"]["message"]
    )
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    status, answer = post(webhook, tls[0], json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}))
    assert status == 400 and "request is missing" in answer["response"]["status"]["message"]
    status, answer = post(
        webhook,
        tls[0],
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"object": {}}}),
    )
    assert status == 400 and "request.uid is required" in answer["response"]["status"]["message"]


def test_body_far_over_the_limit(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    big = json.dumps(review_of(resource("pod-pass.yaml"))).encode()
    big = big[:-1] + b', "padding": "' + b"x" * (12 * 1024 * 1024) + b'"}'
    status, answer = post(webhook, tls[0], big)
    assert status == 413
    assert (
        answer["response"]["allowed"] is False
        and "over the limit of 3145728 bytes" in answer["response"]["status"]["message"]
    )
    assert get(webhook, tls[0], "/healthz") == (200, "ok\n")
    status, answer = post(webhook, tls[0], json.dumps(review_of(resource("pod-pass.yaml"))))
    assert status == 200 and answer["response"]["allowed"] is True


def test_missing_content_length(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    conn = client(webhook, tls[0])
    conn.putrequest("POST", "/validate")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"5\r\nhello\r\n0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == 411 and json.loads(resp.read())["response"]["allowed"] is False
    conn.close()


def test_not_judged_requests_are_allowed(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}}
    _, answer = post(webhook, tls[0], json.dumps(review_of(cm)))
    assert (
        answer["response"]["allowed"] is True
        and "not a pod-creating resource" in answer["response"]["status"]["message"]
    )
    review = review_of(resource("pod-non-gcr.yaml"), operation="DELETE")
    review["request"]["object"] = None
    _, answer = post(webhook, tls[0], json.dumps(review))
    assert answer["response"]["allowed"] is True
    _, answer = post(webhook, tls[0], json.dumps(review_of(resource("pod-non-gcr.yaml"), subResource="status")))
    assert answer["response"]["allowed"] is True
    _, answer = post(
        webhook, tls[0], json.dumps(review_of(resource("pod-non-gcr.yaml"), subResource="ephemeralcontainers"))
    )
    assert answer["response"]["allowed"] is False
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}
    _, answer = post(webhook, tls[0], json.dumps(review_of(bad)))
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 400


def test_namespace_comes_from_the_request(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    obj = resource("cronjob-sandbox.yaml")
    del obj["metadata"]["namespace"]  # as the API server sends objects created with -n
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj, namespace="sandbox")))
    assert answer["response"]["allowed"] is True
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj, namespace="production")))
    assert answer["response"]["allowed"] is False


@pytest.mark.parametrize("failure_policy, allowed", [("Fail", False), ("Ignore", True)])
def test_failure_policy_on_internal_error(
    tls: tuple[str, str], policies: Path, failure_policy: str, allowed: bool
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("engine exploded")

    with AdmissionWebhook(
        [str(policies)], tls_cert=tls[0], tls_key=tls[1], listen=("127.0.0.1", 0), failure_policy=failure_policy
    ) as hook:
        hook.evaluator = broken
        status, answer = post(hook, tls[0], json.dumps(review_of(resource("pod-pass.yaml"), uid="x")))
        assert status == 200
        r = answer["response"]
        assert r["uid"] == "x" and r["allowed"] is allowed and r["status"]["code"] == 500
        assert (
            "engine exploded" in r["status"]["message"] and f"failure policy {failure_policy}" in r["status"]["message"]
        )
        assert metric(hook, tls[0], 'pyclassify_admission_requests_total{result="error"}') == 1.0


def test_health_metrics_and_404(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    assert get(webhook, tls[0], "/healthz") == (200, "ok\n")
    assert get(webhook, tls[0], "/nope")[0] == 404
    post(webhook, tls[0], json.dumps(review_of(resource("pod-pass.yaml"))))
    post(webhook, tls[0], json.dumps(review_of(resource("deployment-init-fails.yaml"))))
    assert metric(webhook, tls[0], 'pyclassify_admission_requests_total{result="allowed"}') == 1.0
    assert metric(webhook, tls[0], 'pyclassify_admission_requests_total{result="denied"}') == 1.0
    assert metric(webhook, tls[0], 'pyclassify_admission_images_total{decision="admit"}') == 2.0
    assert metric(webhook, tls[0], 'pyclassify_admission_images_total{decision="reject"}') == 1.0
    assert metric(webhook, tls[0], "pyclassify_admission_policies") == 2.0
    assert metric(webhook, tls[0], "pyclassify_admission_request_duration_seconds_count") == 2.0


def test_plain_http_and_garbage_do_not_kill_the_server(webhook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    host, port = webhook.address
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"POST /validate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        try:
            s.recv(100)  # the TLS layer rejects it (an alert or a reset); the server must live on
        except OSError:
            pass
    assert get(webhook, tls[0], "/healthz") == (200, "ok\n")
    assert metric(webhook, tls[0], "pyclassify_admission_tls_handshake_errors_total") >= 1.0


def wait_for(predicate, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def write_atomically(path: Path, text: str) -> None:
    """As a ConfigMap update or an editor's save does: the watcher never sees a half-written
    (or, after truncation, empty and valid) file, which would be a reload of its own."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_hot_reload_and_bad_reload_keeps_last_good(
    webhook: AdmissionWebhook, tls: tuple[str, str], policies: Path
) -> None:
    obj = resource("pod-non-gcr.yaml")
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj)))
    assert answer["response"]["allowed"] is False
    # An allow-everything policy ordered first: the webhook picks it up without a restart.
    write_atomically(
        policies / "01-allow-all.yaml",
        "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
        "metadata: {name: allow-all}\nspec:\n  order: 1\n  rules: [{action: Allow}]\n",
    )
    wait_for(lambda: webhook.snapshot.generation == 2, "reload")
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj)))
    assert answer["response"]["allowed"] is True and "allow-all" in answer["response"]["status"]["message"]
    # A broken edit is refused; the last good policy stays in force.
    write_atomically(
        policies / "01-allow-all.yaml",
        "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
        "metadata: {name: allow-all}\nspec:\n  order: 1\n  rules: [{action: Maybe}]\n",
    )
    wait_for(
        lambda: metric(webhook, tls[0], 'pyclassify_admission_policy_reloads_total{result="failure"}') == 1.0,
        "failed reload",
    )
    assert webhook.snapshot.generation == 2
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj)))
    assert answer["response"]["allowed"] is True
    os.remove(policies / "01-allow-all.yaml")
    wait_for(lambda: webhook.snapshot.generation == 3, "reload after removal")
    _, answer = post(webhook, tls[0], json.dumps(review_of(obj)))
    assert answer["response"]["allowed"] is False


def test_invalid_policies_refuse_to_start(tls: tuple[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
        "metadata: {name: b}\nspec:\n  rules: [{action: Allow, imagePath: {operator: IsOneOf, values: ['(']}}]\n"
    )
    with pytest.raises(InvalidInput) as e:
        AdmissionWebhook([str(bad)], tls_cert=tls[0], tls_key=tls[1], listen=("127.0.0.1", 0))
    assert f"{bad}:5: spec.rules[0].imagePath.values[0]" in str(e.value)
    result = CliRunner().invoke(
        admission_webhook_command, [str(bad), "--listen", "127.0.0.1:0", "--tls-cert", tls[0], "--tls-key", tls[1]]
    )
    assert result.exit_code == 1 and "spec.rules[0].imagePath.values[0]" in result.output
    result = CliRunner().invoke(
        admission_webhook_command, [str(bad), "--tls-cert", tls[0], "--tls-key", tls[1], "--failure-policy", "Maybe"]
    )
    assert result.exit_code == 2


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:8443") == ("127.0.0.1", 8443)
    assert parse_listen(":9443") == ("0.0.0.0", 9443)
    assert parse_listen("[::1]:8443") == ("::1", 8443)
    for bad in ("8443", "host:port", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda kids: (
                st.lists(kids, max_size=3)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "apiVersion",
                            "kind",
                            "request",
                            "uid",
                            "object",
                            "operation",
                            "spec",
                            "containers",
                            "metadata",
                            "namespace",
                            "image",
                            "name",
                            "subResource",
                        ]
                    ),
                    kids,
                    max_size=5,
                )
            ),
            max_leaves=30,
        ).map(
            lambda o: json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": o}
            ).encode()
        ),
    )
)
def test_review_fuzz_never_raises(fuzz_hook: AdmissionWebhook, body: bytes) -> None:
    status, answer = fuzz_hook.review(body)
    assert status in (200, 400)
    assert answer["kind"] == "AdmissionReview" and isinstance(answer["response"]["allowed"], bool)
    assert status == 200 or answer["response"]["allowed"] is False
    assert fuzz_hook.metrics.requests.labels("error")._value.get() == 0  # no internal error on any input


@pytest.fixture(scope="module")
def fuzz_hook(tls: tuple[str, str]) -> Iterator[AdmissionWebhook]:
    hook = AdmissionWebhook([str(EXAMPLES / "policies")], tls_cert=tls[0], tls_key=tls[1], listen=("127.0.0.1", 0))
    yield hook
    hook.server.stop()
