"""deploy/ against the real API server: every manifest passes server-side validation (a dry-run
create with strict field validation, so an unknown or misplaced field fails), the ClusterRole
grants exactly get/list/watch on the kinds pyclassify follows and create/patch on Events, and the
ServiceAccount, bound to it, can list every one of them, post an Event, and do nothing else.
deploy/uninstall/ passes the same validation, and the command it runs on each node is one the
CLI takes and removes every rule a daemon left behind."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyclassify.kube import load_client
from pyclassify.kube.client import ApiException
from pyclassify.kube.events import EventRecorder
from pyclassify.kube.resources import RESOURCES
from tests.kube.objects import create, path_of
from tests.kube.test_listwatch import delete

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAMESPACE = "pyclassify-system"

#: The kinds the manifests hold.
KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}


def manifests(directory: Path = DEPLOY) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out = []
    for name in kustomization["resources"]:
        out += [d for d in yaml.safe_load_all((directory / name).read_text()) if d]
    return out


def of_kind(kind: str) -> dict[str, Any]:
    return next(m for m in manifests() if m["kind"] == kind)


@pytest.fixture(scope="module")
def namespace(kube_cluster):
    """deploy/'s Namespace, validated, then created for the module (the namespaced objects'
    dry runs need it; no namespace controller runs here to finalize a deletion, so it is
    created once and deleted at the end)."""
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    namespace = of_kind("Namespace")
    create(kc, namespace, dry_run=True)
    create(kc, namespace, dry_run=False)
    yield namespace
    delete(kc, path_of(namespace))


def test_every_manifest_passes_server_side_validation(kube_cluster, namespace) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    objs = manifests()
    assert {o["kind"] for o in objs} == KINDS
    for obj in objs:
        if obj["kind"] == "Namespace":
            continue  # validated by the fixture, and now it exists
        answer = create(kc, obj, dry_run=True)
        assert answer["kind"] == obj["kind"] and answer["metadata"]["name"] == obj["metadata"]["name"]
    # A broken manifest does fail: strict validation names the unknown field.
    broken = of_kind("DaemonSet")
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicee"] = "Always"
    with pytest.raises(ApiException) as exc:
        create(kc, broken, dry_run=True)
    assert exc.value.status == 400 and "imagePullPolicee" in (exc.value.body or "")


def test_the_daemonset_runs_enforce_as_the_node() -> None:
    ds = of_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["serviceAccountName"] == of_kind("ServiceAccount")["metadata"]["name"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "enforce" and "--in-cluster" in args
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    caps = container["securityContext"]["capabilities"]["add"]
    assert set(caps) == {"NET_ADMIN", "NET_RAW"} and container["securityContext"].get("privileged") is False
    metrics = next(a for a in args if a.startswith("--metrics="))
    host, _, port = metrics.partition("=")[2].rpartition(":")
    assert container["readinessProbe"]["httpGet"] == {"host": host, "path": "/readyz", "port": int(port)}
    assert container["livenessProbe"]["httpGet"] == {"host": host, "path": "/healthz", "port": int(port)}
    # Every option the manifest gives is one the command knows.
    from click.testing import CliRunner

    from pyclassify.cli import main

    help_text = CliRunner().invoke(main, ["enforce", "--help"]).output
    for arg in args[1:]:
        assert arg.split("=")[0] in help_text, arg


def test_the_cluster_role_grants_exactly_what_the_source_reads_and_reports() -> None:
    rules = of_kind("ClusterRole")["rules"]
    read, written = set(), set()
    for rule in rules:
        pairs = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
        if sorted(rule["verbs"]) == ["get", "list", "watch"]:
            read |= pairs
        else:
            assert sorted(rule["verbs"]) == ["create", "patch"], rule
            written |= pairs
    assert read == {(r.group, r.plural) for r in RESOURCES}
    assert written == {("", "events")}  # the Warning on a rejected object (pyclassify.kube.events)


def test_the_service_account_can_read_every_kind_and_nothing_more(kube_cluster, namespace, tmp_path: Path) -> None:
    admin = load_client(str(kube_cluster.kubeconfig), "test")
    rbac = [of_kind(k) for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    for obj in rbac:
        create(admin, obj, dry_run=False)
    try:
        sa = of_kind("ServiceAccount")["metadata"]
        token = admin.request(
            "POST",
            f"/api/v1/namespaces/{sa['namespace']}/serviceaccounts/{sa['name']}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
        )["status"]["token"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "sa",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": kube_cluster.url,
                        "certificate-authority-data": base64.b64encode(
                            (kube_cluster.dir / "ca.crt").read_bytes()
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "test", "user": "sa"}}],
        }
        (tmp_path / "sa.kubeconfig").write_text(yaml.safe_dump(config))
        kc = load_client(str(tmp_path / "sa.kubeconfig"), "sa")
        for res in RESOURCES:
            items, _ = kc.list(res.path)  # allowed (every CRD is installed in the test server)
            assert isinstance(items, list)
        # the Warning on a rejected object, as the daemon posts it
        recorder = EventRecorder(kc, host="node-1")
        recorder.warn(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
            "PolicyRejected",
            "spec: a test of the role",
        )
        recorder.flush()
        recorder.stop()
        assert recorder.counters["created"] == 1, recorder.counters
        for method, path in (
            ("GET", "/api/v1/secrets"),
            ("POST", "/api/v1/namespaces/default/pods"),
            ("GET", "/api/v1/namespaces/default/events"),
            ("DELETE", "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/x"),
        ):
            with pytest.raises(ApiException) as exc:
                kc.request(method, path, body={} if method == "POST" else None)
            assert exc.value.status == 403, (method, path, exc.value.status)
    finally:
        for obj in reversed(rbac):
            delete(admin, path_of(obj))


def test_the_daemonset_is_hardened() -> None:
    """Exactly the capabilities it needs, no way to gain more, the runtime's seccomp profile, a
    read-only root filesystem with its writable paths named, and its HTTP endpoints on the
    node's loopback only (with the host network, 0.0.0.0 is every address of the node, which
    every pod reaches)."""
    ds = of_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts) == {"/run/xtables.lock", "/tmp"}
    assert volumes[mounts["/run/xtables.lock"]]["hostPath"] == {"path": "/run/xtables.lock", "type": "FileOrCreate"}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    metrics = next(a for a in container["args"] if a.startswith("--metrics="))
    assert metrics.partition("=")[2].rpartition(":")[0] == "127.0.0.1"
    assert all(p.get("hostIP", "127.0.0.1") == "127.0.0.1" for p in container.get("ports", []))
    assert container["resources"]["limits"]["memory"]  # the memory budget is derived from it


UNINSTALL = DEPLOY / "uninstall"


def test_the_uninstall_manifests_pass_server_side_validation(kube_cluster, namespace) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    (ds,) = manifests(UNINSTALL)
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == namespace["metadata"]["name"]
    answer = create(kc, ds, dry_run=True)
    assert answer["metadata"]["name"] == "pyclassify-uninstall"


def test_the_uninstall_runs_on_each_node_as_the_daemon_does() -> None:
    """The same image, host network, capabilities and iptables lock as the enforcing pods: it
    reaches the rules they left, and no more; it needs no access to the API."""
    (ds,) = manifests(UNINSTALL)
    pod = ds["spec"]["template"]["spec"]
    enforcing = of_kind("DaemonSet")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (daemon,) = enforcing["containers"]
    assert pod["hostNetwork"] is True and pod["tolerations"] == enforcing["tolerations"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert init["image"] == daemon["image"] and init["securityContext"] == daemon["securityContext"]
    assert init["volumeMounts"] == [m for m in daemon["volumeMounts"] if m["mountPath"] == "/run/xtables.lock"]
    assert "command" not in init  # the image's entrypoint, pyclassify
    assert 'ENTRYPOINT ["pyclassify"]' in (DEPLOY / "Containerfile").read_text()
    assert init["args"] == ["enforce", "--uninstall"]
    (idle,) = pod["containers"]
    assert idle["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_uninstall_command_removes_every_rule_a_daemon_left(tmp_path: Path) -> None:
    """The init container's arguments, given to the CLI on a node of network namespaces where a
    daemon was killed and left its rules (the test daemon runs --no-ipv6: the uninstall goes
    through ip6tables too, as on a node, and finds nothing of ours there)."""
    import json
    import subprocess

    from tests.enforce import manifests as policies
    from tests.enforce.netns import PY, REPO, Daemon, Topology, iptables_rules, root_reason

    if root_reason() is not None:
        pytest.skip(root_reason() or "")
    (ds,) = manifests(UNINSTALL)
    (init,) = ds["spec"]["template"]["spec"]["initContainers"]
    policies.write(tmp_path)
    topo = Topology()
    try:
        topo.up()
        daemon = Daemon(topo, [str(tmp_path)], 0)
        daemon.wait_event("start")
        daemon.kill()
        assert "PYCLASSIFY-" in iptables_rules(topo.node)
        out = subprocess.run(
            ["ip", "netns", "exec", topo.node, PY, "-m", "pyclassify", *init["args"]],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        gone = json.loads(out.stdout.splitlines()[-1])
        assert gone["event"] == "uninstall" and gone["removed"] and not gone["daemon_running"], gone
        assert "PYCLASSIFY-" not in iptables_rules(topo.node)
        ip6 = subprocess.run(["ip", "netns", "exec", topo.node, "ip6tables-save"], capture_output=True, text=True)
        assert "PYCLASSIFY-" not in ip6.stdout
        assert topo.reach(2, 1)  # no rules left: nothing filters
    finally:
        topo.down()
