"""``pyclassify admission-webhook --kubeconfig``: the ContainerAdmissionPolicies and Namespaces of
a real API server decide AdmissionReviews as the same objects in files do; a change through the
API is in force within a few polls; an invalid policy is refused and the last good one stays;
an unreachable API server keeps it too."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyclassify.admission.webhook import AdmissionWebhook
from pyclassify.kube import load_client
from pyclassify.kube.admission import CONTAINER_ADMISSION_POLICIES, ClusterAdmissionInput
from pyclassify.kube.client import object_path
from tests.admission.test_admission_webhook import EXAMPLES, NOW, post, resource, review_of, tls  # noqa: F401
from tests.kube.test_listwatch import delete, wait_until

POLICIES = CONTAINER_ADMISSION_POLICIES.path


def example_objects() -> list[dict[str, Any]]:
    out = []
    for f in sorted((EXAMPLES / "policies").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return out


def decide(hook: AdmissionWebhook, cert: str, name: str) -> bool:
    status, answer = post(hook, cert, json.dumps(review_of(resource(name))))
    assert status == 200, answer
    return answer["response"]["allowed"]


def test_the_webhook_decides_with_the_clusters_policies(kube_cluster, tls) -> None:  # noqa: F811
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = example_objects()
    created: list[str] = []
    for obj in objs:
        if obj["kind"] == "Namespace":
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": obj["metadata"]}
            try:
                kc.request("POST", "/api/v1/namespaces", body=body)
            except Exception:  # noqa: BLE001 - another test made it
                kc.request(
                    "PATCH",
                    f"/api/v1/namespaces/{obj['metadata']['name']}",
                    body={"metadata": obj["metadata"]},
                    content_type="application/merge-patch+json",
                )
        else:
            kc.request("POST", POLICIES, body=obj)
            created.append(
                object_path(
                    CONTAINER_ADMISSION_POLICIES.prefix, "containeradmissionpolicies", None, obj["metadata"]["name"]
                )
            )
    files = AdmissionWebhook(
        [str(EXAMPLES / "policies")],
        tls_cert=tls[0],
        tls_key=tls[1],
        listen=("127.0.0.1", 0),
        scan_paths=[str(EXAMPLES / "scans.yaml")],
        clock=lambda: NOW,
    )
    live = AdmissionWebhook(
        [],
        tls_cert=tls[0],
        tls_key=tls[1],
        listen=("127.0.0.1", 0),
        scan_paths=[str(EXAMPLES / "scans.yaml")],
        clock=lambda: NOW,
        reload_interval=0.1,
        cluster=ClusterAdmissionInput(kc),
    )
    try:
        with files, live:
            assert len(live.snapshot.admission.policies) == len(files.snapshot.admission.policies) > 0
            names = sorted(p.name for p in (EXAMPLES / "resources").glob("*.yaml"))
            decisions = {n: decide(files, tls[0], n) for n in names}
            assert {n: decide(live, tls[0], n) for n in names} == decisions
            assert set(decisions.values()) == {True, False}

            # A change through the API: the reject-everything-else rule of the main policy goes;
            # the non-gcr pod is still rejected by rule 0, an unscanned one now falls through.
            main = next(o for o in objs if o["kind"] == "ContainerAdmissionPolicy" and o["spec"].get("order") == 10)
            path = object_path(
                CONTAINER_ADMISSION_POLICIES.prefix, "containeradmissionpolicies", None, main["metadata"]["name"]
            )
            generation = live.snapshot.generation
            changed = copy.deepcopy(main["spec"])
            changed["rules"] = changed["rules"][:-1] + [{"action": "Allow"}]
            kc.request("PATCH", path, body={"spec": changed}, content_type="application/merge-patch+json")
            wait_until(lambda: live.snapshot.generation > generation, "the change in force", timeout=15)
            assert not decide(live, tls[0], "pod-non-gcr.yaml")
            assert decisions["pod-unscanned.yaml"] is False and decide(live, tls[0], "pod-unscanned.yaml") is True

            # An invalid policy: refused, the last good snapshot stays.
            generation = live.snapshot.generation
            failures = live.metrics.reloads.labels("failure")._value.get()
            kc.request(
                "POST",
                POLICIES,
                body={
                    "apiVersion": "containersecurity.tigera.io/v1beta1",
                    "kind": "ContainerAdmissionPolicy",
                    "metadata": {"name": "k-broken"},
                    "spec": {"selector": "app ==", "rules": [{"action": "Allow"}]},
                },
            )
            created.append(f"{POLICIES}/k-broken")
            wait_until(lambda: live.metrics.reloads.labels("failure")._value.get() > failures, "the refusal")
            assert live.snapshot.generation == generation
            assert not decide(live, tls[0], "pod-non-gcr.yaml")
            # Deleted again: the cluster is as the policy in force says; nothing to reload.
            delete(kc, f"{POLICIES}/k-broken")
            wait_until(lambda: live.reload_if_changed() is None, "the cluster back to the policy in force")
            assert live.snapshot.generation == generation
    finally:
        for path in created:
            delete(kc, path)


def test_an_unreachable_cluster_keeps_the_last_good_policy(kube_cluster, tls, tmp_path: Path) -> None:  # noqa: F811
    """The webhook reaches the API server through a relay (two processes: a TCP port, a Unix
    socket); the relay stopped, the API server is away for real."""
    from tests.kube.apiserver import free_port
    from tests.kube.test_enforce_kube import RELAY

    admin = load_client(str(kube_cluster.kubeconfig), "test")
    main = copy.deepcopy(
        next(o for o in example_objects() if o["kind"] == "ContainerAdmissionPolicy" and o["spec"].get("order") == 10)
    )
    main["metadata"] = {"name": "k-away"}
    admin.request("POST", POLICIES, body=main)
    sock, port = str(tmp_path / "api.sock"), free_port()
    relays = [
        subprocess.Popen(
            [sys.executable, "-c", RELAY, "unix-to-tcp", sock, str(kube_cluster.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
    ]
    relays.append(
        subprocess.Popen(
            [sys.executable, "-c", RELAY, "tcp-to-unix", str(port), sock], stdout=subprocess.PIPE, text=True
        )
    )
    try:
        for relay in relays:
            assert relay.stdout is not None and relay.stdout.readline().strip() == "ready"
        config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
        hook = AdmissionWebhook(
            [],
            tls_cert=tls[0],
            tls_key=tls[1],
            listen=("127.0.0.1", 0),
            scan_paths=[str(EXAMPLES / "scans.yaml")],
            clock=lambda: NOW,
            cluster=ClusterAdmissionInput(load_client(str(tmp_path / "kubeconfig"), "test")),
        )
        with hook:
            generation = hook.snapshot.generation
            assert [p.name for p in hook.snapshot.admission.policies] == ["k-away"]
            assert decide(hook, tls[0], "pod-non-gcr.yaml") is False
            for relay in relays:
                relay.kill()
                relay.wait()
            failures = hook.metrics.reloads.labels("failure")._value.get()
            assert hook.reload_if_changed() is False
            assert hook.metrics.reloads.labels("failure")._value.get() == failures + 1
            assert hook.snapshot.generation == generation
            assert decide(hook, tls[0], "pod-non-gcr.yaml") is False
    finally:
        for relay in relays:
            if relay.poll() is None:
                relay.kill()
                relay.wait()
        delete(admin, f"{POLICIES}/k-away")


def test_the_command_needs_a_path_or_a_cluster(tls) -> None:  # noqa: F811
    from click.testing import CliRunner

    from pyclassify.cli.admission import admission_webhook_command

    r = CliRunner().invoke(admission_webhook_command, ["--tls-cert", tls[0], "--tls-key", tls[1]])
    assert r.exit_code == 2 and "--kubeconfig" in r.output


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
