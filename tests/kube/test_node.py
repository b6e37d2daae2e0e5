"""A real single-node cluster (scripts/kube-node-up.sh: etcd, kube-apiserver, containerd with runc,
kubelet, kube-scheduler, kube-controller-manager and kube-proxy in a network namespace of their
own, pods on Debian's CNI bridge) with the image of scripts/build-image.sh imported and the Helm
chart installed by deploy/README.md's command, the webhook on. The kubelet schedules the DaemonSet and makes it
Ready through its probes; the daemon reads the cluster through in-cluster configuration (the
``kubernetes`` Service, by kube-proxy); a NetworkPolicy created through the API blocks a real
connection between two pods while an allowed one keeps working, the kubelet's probes of the
denied pod still pass; and a rolling update of the DaemonSet, probed by a pod that opens a
connection every few milliseconds, lets no denied connection open and holds up no established
one. The chart's admission webhook, installed with it, is called by the API server through its
Service: a ContainerAdmissionPolicy created through the API admits and refuses real Pods, and
with every replica gone the configuration's failurePolicy applies (Fail, then Ignore)."""

from __future__ import annotations

import calendar
import json
import os
import select
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyclassify.kube import load_client
from pyclassify.kube.client import ApiException, KubeClient
from tests.enforce.netns import root_reason
from tests.kube.apiserver import REPO, followed_kind_crds, free_port, install_crds
from tests.kube.objects import refusal
from tests.kube.test_enforce_kube import RELAY
from tests.kube.test_helm import CHART
from tests.kube.test_listwatch import create_namespace, wait_until

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
REPOSITORY = "pcnode.local/pyclassify"
IMAGE = f"{REPOSITORY}:{VERSION}"
SYSTEM = "pyclassify-system"
WEBHOOK = "pyclassify-webhook"
#: An image the webhook test's ContainerAdmissionPolicy refuses.
UNTRUSTED = "docker.io/library/nginx:1"
#: The pods' interfaces of the CNI bridge network: the node's own traffic to its pods leaves by it.
BRIDGE = "cni0"
#: How often a check reading a pod's log (through the API server and the kubelet) is repeated:
#: the probers report once a second.
LOG_POLL = 0.5
#: How often the prober starts a connection (seconds), and how long each may take to open.
PROBE_EVERY, PROBE_TIMEOUT = 0.005, 0.5

#: A pod's prober: starts a non-blocking connection to HOST:PORT every PROBE_EVERY seconds and
#: prints, once a second, "START END TRIED OPENED FIRST_OPEN": the connections it started in that
#: second, those that opened in it (whenever started), and when the first of those was started.
PROBER = r"""
import selectors, socket, sys, time
host, port, every, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
start = time.time()
tried = opened = 0
first = None

def report(now):
    global start, tried, opened, first
    print("%.3f %.3f %d %d %s" % (start, now, tried, opened, "-" if first is None else "%.3f" % first), flush=True)
    start, tried, opened, first = now, 0, 0, None

def settle(key):
    global opened, first
    sel.unregister(key.fileobj)
    if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
        opened += 1
        first = key.data if first is None else min(first, key.data)
    key.fileobj.close()

next_at = time.time()
while True:
    now = time.time()
    if now >= next_at:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, port))
        sel.register(s, selectors.EVENT_WRITE, now)
        tried += 1
        next_at += every
    for key, _ in sel.select(timeout=max(0.0, next_at - time.time())):
        settle(key)
    now = time.time()
    for key in [k for k in sel.get_map().values() if now - k.data > limit]:
        sel.unregister(key.fileobj)
        key.fileobj.close()
    if now - start >= 1:
        report(now)
"""


#: The web pod: HTTP on 8080 (the probers', the kubelet's readiness probe) and an echo server on
#: 9000 (the keeper's held connection).
SERVER = r"""
import http.server, socket, socketserver, threading

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)

# A deep accept queue: hundreds of connections a second arrive, and a full queue drops SYNs.
socketserver.TCPServer.request_queue_size = 1024
socketserver.ThreadingTCPServer.allow_reuse_address = True
echo = socketserver.ThreadingTCPServer(("", 9000), Echo)
threading.Thread(target=echo.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
"""

#: A pod holding one connection to HOST:PORT open, a byte sent and its echo awaited every 10 ms:
#: prints "START END SENT ECHOED LONGEST" once a second (LONGEST: the longest wait for an echo
#: in it, seconds), and "broken REASON" if the connection fails.
KEEPER = r"""
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
while True:
    try:
        conn = socket.create_connection((host, port), timeout=2)
        break
    except OSError:
        time.sleep(0.1)
start, sent, echoed, longest = time.time(), 0, 0, 0.0
while True:
    try:
        asked = time.time()
        conn.sendall(b"x")
        sent += 1
        if conn.recv(1) != b"x":
            raise OSError("closed")
        echoed += 1
        longest = max(longest, time.time() - asked)
    except OSError as e:
        print("broken %r" % e, flush=True)
        break
    now = time.time()
    if now - start >= 1:
        print("%.3f %.3f %d %d %.4f" % (start, now, sent, echoed, longest), flush=True)
        start, sent, echoed, longest = now, 0, 0, 0.0
    time.sleep(0.01)
time.sleep(3600)
"""


def _missing() -> str | None:
    tools = [t for t in ("containerd", "ctr", "runc", "umoci", "debootstrap", "go") if shutil.which(t) is None]
    if not Path("/usr/lib/cni/bridge").exists():
        tools.append("containernetworking-plugins")
    if tools:
        return f"{', '.join(tools)} not installed (apt-get install containerd containernetworking-plugins ...)"
    return None


#: The host-wide kernel tunables kubelet sets when it finds them otherwise.
TUNABLES = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
]


def host_tunables() -> dict[str, str]:
    return {t: Path("/proc/sys", t).read_text().strip() for t in TUNABLES}


def _run(argv: list[str], timeout: float = 3600, **kw: Any) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=timeout, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-4000:]}")
    return r.stdout


@dataclass
class Node:
    """The running node: its state directory, network namespace, a kubeconfig reaching its API
    server from this namespace (through a relay), and helm's command line."""

    dir: Path
    netns: str
    kubeconfig: Path
    helm: list[str]

    def client(self) -> KubeClient:
        return load_client(str(self.kubeconfig))

    def log(self, ns: str, pod: str, container: str | None = None) -> str:
        query = [("container", container)] if container else None
        resp = self.client()._request("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log", query, None, 30, None)
        text = resp.read().decode(errors="replace")
        assert resp.status == 200, f"log of {ns}/{pod}: {resp.status} {text[:500]}"
        return text


def said_ready(relay: subprocess.Popen[str], timeout: float = 30) -> None:
    """The relay's first line is "ready", within ``timeout`` seconds (never a wait without end)."""
    assert relay.stdout is not None
    readable, _, _ = select.select([relay.stdout], [], [], timeout)
    assert readable, f"the relay said nothing in {timeout:.0f} s"
    assert relay.stdout.readline().strip() == "ready"


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    reason = _missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    image = Path(_run(["bash", "scripts/build-image.sh"]).strip())
    helm = _run(["bash", "scripts/helm-testenv.sh"]).strip()
    _run(["bash", "scripts/kube-node-build.sh"])
    crds = followed_kind_crds(Path(_run(["bash", "scripts/kube-testenv.sh"]).strip()) / "crds")
    state = Path(f"/tmp/pcnode-test-{uuid.uuid4().hex[:8]}")
    tunables = host_tunables()
    relays: list[subprocess.Popen[str]] = []
    try:
        try:
            netns = _run(["bash", "scripts/kube-node-up.sh", str(state)], timeout=600).strip()
        except AssertionError as e:  # the node's logs go with its state directory: their tails here
            tails = [
                f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:])
                for f in sorted((state / "logs").glob("*.log"))
            ]
            raise AssertionError("\n".join([str(e), *tails])) from None
        # The image into containerd's k8s.io namespace, under the name the chart is given.
        tar = state / "image.tar"
        _run(["tar", "-C", str(image), "-cf", str(tar), "."])
        sock = str(state / "containerd.sock")
        _run(["ctr", "-a", sock, "-n", "k8s.io", "images", "import", "--base-name", REPOSITORY, str(tar)])
        tar.unlink()
        # The API server listens in the node's namespace; a relay brings it to this one's
        # loopback (127.0.0.1 is in its certificate).
        relay_sock = str(state / "apiserver.sock")
        inside = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-c", RELAY, "unix-to-tcp", relay_sock, "6443"],
            stdout=subprocess.PIPE,
            text=True,
        )
        relays.append(inside)
        said_ready(inside)
        port = free_port()
        outside = subprocess.Popen(
            [sys.executable, "-c", RELAY, "tcp-to-unix", str(port), relay_sock], stdout=subprocess.PIPE, text=True
        )
        relays.append(outside)
        said_ready(outside)
        token = (state / "pki" / "tokens.csv").read_text().split(",")[0]
        kubeconfig = state / "host.kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: pcnode, cluster: {{server: 'https://127.0.0.1:{port}', "
            f"certificate-authority: '{state}/pki/ca.crt'}}}}]\n"
            f"users: [{{name: admin, user: {{token: '{token}'}}}}]\n"
            "contexts: [{name: pcnode, context: {cluster: pcnode, user: admin}}]\ncurrent-context: pcnode\n"
        )
        # The kinds pyclassify follows, as in a cluster running Calico and the network policy API.
        kc = load_client(str(kubeconfig))
        install_crds(lambda method, path, body=None: kc.request(method, path, body=body), crds, ApiException)
        helm_env = [f"HELM_{d}_HOME={state}/helm" for d in ("CACHE", "CONFIG", "DATA")]
        yield Node(state, netns, kubeconfig, ["env", *helm_env, helm, "--kubeconfig", str(kubeconfig)])
    finally:
        for p in relays:
            p.kill()
            p.wait()
        if (state / "netns").exists():
            down = subprocess.run(
                ["bash", "scripts/kube-node-down.sh", str(state)], cwd=REPO, capture_output=True, text=True, timeout=120
            )
            assert down.returncode == 0, f"kube-node-down.sh left the node behind:\n{down.stderr}"
        # kubelet's kernel tunables are host-wide: the node showed it its own (kube-node-up.sh).
        assert host_tunables() == tunables


def daemonset(kc: KubeClient) -> dict[str, Any]:
    return kc.request("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets/pyclassify")


def rolled_out(kc: KubeClient) -> bool:
    ds = daemonset(kc)
    status = ds["status"]
    return (
        status.get("observedGeneration") == ds["metadata"]["generation"]
        and status.get("desiredNumberScheduled") == status.get("updatedNumberScheduled") == 1
        and status.get("numberReady") == status.get("numberAvailable") == 1
    )


def daemon_pods(kc: KubeClient) -> list[dict[str, Any]]:
    query = [("labelSelector", "app.kubernetes.io/name=pyclassify")]
    return kc.request("GET", f"/api/v1/namespaces/{SYSTEM}/pods", query)["items"]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pod(kc: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return kc.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")


def run_pod(kc: KubeClient, ns: str, name: str, labels: dict[str, str], argv: list[str], **spec: Any) -> None:
    container: dict[str, Any] = {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": argv}
    container.update(spec)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 1, "dnsPolicy": "Default", "containers": [container]},
    }
    kc.request("POST", f"/api/v1/namespaces/{ns}/pods", body=body)


def namespace(kc: KubeClient, name: str, labels: dict[str, str]) -> None:
    """A namespace, once the controller-manager has made its default ServiceAccount (a Pod
    created before that is refused)."""
    create_namespace(kc, name, labels)
    wait_until(
        lambda: kc.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts")["items"],
        f"namespace {name}'s default ServiceAccount",
        timeout=60,
    )


@pytest.fixture(scope="module")
def installed(node: Node) -> Node:
    """deploy/README.md's `helm install` with the webhook on, the imported image and the
    bridge's interfaces; the DaemonSet and the webhook's Deployment Ready (with failurePolicy
    Fail, no Pod outside the release's namespace is admitted before the webhook answers)."""
    _run(
        [
            *node.helm,
            "install",
            "pyclassify",
            str(CHART),
            "--namespace",
            SYSTEM,
            "--create-namespace",
            "--set",
            f"image.repository={REPOSITORY}",
            "--set",
            "webhook.enabled=true",
            "--set",
            "image.pullPolicy=Never",
            "--set",
            f"workloadInterfacePrefix={BRIDGE}",
        ]
    )
    kc = node.client()
    wait_until(lambda: rolled_out(kc), "the DaemonSet scheduled and Ready", timeout=180)
    wait_until(lambda: webhook_ready(kc) == 2, "the webhook's two replicas Ready", timeout=180)
    return node


def webhook_ready(kc: KubeClient) -> int:
    status = kc.request("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{WEBHOOK}")["status"]
    return int(status.get("readyReplicas") or 0)


@dataclass
class Workloads:
    """A web server and two probers of it in one namespace: ``client`` (to be denied) and
    ``friend`` (to be allowed)."""

    ns: str
    web_ip: str


@pytest.fixture(scope="module")
def workloads(installed: Node) -> Workloads:
    kc = installed.client()
    ns = "shop"
    namespace(kc, ns, {})
    run_pod(
        kc,
        ns,
        "web",
        {"app": "web"},
        ["python3", "-c", SERVER],
        readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    wait_until(lambda: ready(pod(kc, ns, "web")), "pod web Ready", timeout=120)
    web_ip = pod(kc, ns, "web")["status"]["podIP"]
    for name, role in (("client", "client"), ("friend", "friend")):
        argv = ["python3", "-c", PROBER, web_ip, "8080", str(PROBE_EVERY), str(PROBE_TIMEOUT)]
        run_pod(kc, ns, name, {"role": role}, argv)
    run_pod(kc, ns, "keeper", {"role": "friend"}, ["python3", "-c", KEEPER, web_ip, "9000"])
    for name in ("client", "friend", "keeper"):
        wait_until(lambda: ready(pod(kc, ns, name)), f"pod {name} Ready", timeout=120)  # noqa: B023
    return Workloads(ns, web_ip)


@dataclass
class Probe:
    start: float
    end: float
    tried: int
    opened: int
    first_open: float | None


def probes(node: Node, ns: str, name: str) -> list[Probe]:
    out = []
    for line in node.log(ns, name).splitlines():
        start, end, tried, opened, first = line.split()
        out.append(Probe(float(start), float(end), int(tried), int(opened), None if first == "-" else float(first)))
    return out


@dataclass
class Held:
    start: float
    end: float
    sent: int
    echoed: int
    longest: float


def held(node: Node, ns: str) -> tuple[list[Held], list[str]]:
    """The keeper's seconds, and its "broken" lines."""
    seconds, broken = [], []
    for line in node.log(ns, "keeper").splitlines():
        if line.startswith("broken"):
            broken.append(line)
        else:
            start, end, sent, echoed, longest = line.split()
            seconds.append(Held(float(start), float(end), int(sent), int(echoed), float(longest)))
    return seconds, broken


def opened_since(node: Node, ns: str, name: str, since: float) -> tuple[int, int]:
    """(tried, opened) of the prober's seconds that began at or after ``since``."""
    seconds = [p for p in probes(node, ns, name) if p.start >= since]
    return sum(p.tried for p in seconds), sum(p.opened for p in seconds)


def restarts(kc: KubeClient, ns: str) -> dict[str, int]:
    items = kc.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    return {
        p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or ())
        for p in items
    }


def test_the_daemonset_is_ready_through_its_probes_and_reads_the_cluster_in_cluster(installed: Node) -> None:
    kc = installed.client()
    (daemon,) = daemon_pods(kc)
    spec = daemon["spec"]
    (container,) = spec["containers"]
    assert spec["nodeName"] == "pcnode" and ready(daemon)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--in-cluster" in container["args"]
    # In-cluster configuration: the kubelet gave the pod the `kubernetes` Service's address
    # (kube-proxy's rule to the API server), and the daemon listed the cluster through it (the
    # webhook's pods, at least, were there).
    log = installed.log(SYSTEM, daemon["metadata"]["name"])
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    (start,) = [e for e in events if e.get("event") == "start"]
    assert start["node"] == "pcnode" and start["fail"] == "closed" and start["endpoints"] >= 1, start


@dataclass
class Policy:
    """The NetworkPolicy admitting only ``role: friend`` to web, and when it began to block."""

    created: float
    blocked_at: float


@pytest.fixture(scope="module")
def policy(installed: Node, workloads: Workloads) -> Policy:
    kc = installed.client()
    ns = workloads.ns
    # Nothing in force yet: both probers reach web.
    t = time.time()
    wait_until(lambda: opened_since(installed, ns, "client", t)[1] > 0, "client -> web with no policy", 30, LOG_POLL)
    wait_until(lambda: opened_since(installed, ns, "friend", t)[1] > 0, "friend -> web with no policy", 30, LOG_POLL)
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "web-from-friends", "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"role": "friend"}}}],
                    "ports": [{"port": 8080}, {"port": 9000}],
                }
            ],
        },
    }
    created = time.time()
    kc.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", body=body)

    def client_blocked() -> float | None:
        seconds = [p for p in probes(installed, ns, "client") if p.start >= created]
        return seconds[-1].end if len(seconds) >= 2 and seconds[-1].opened == seconds[-2].opened == 0 else None

    return Policy(created, wait_until(client_blocked, "the policy to block client -> web", 30, LOG_POLL))


def test_a_network_policy_blocks_a_real_connection_and_an_allowed_one_keeps_working(
    installed: Node, workloads: Workloads, policy: Policy
) -> None:
    kc = installed.client()
    ns = workloads.ns
    # The allowed prober's seconds from then on (reported once a second).
    tried, opened = wait_until(
        lambda: (t := opened_since(installed, ns, "friend", policy.blocked_at))[0] > 100 and t,
        "the allowed prober's report after the block",
        10,
        LOG_POLL,
    )
    assert opened > 0.9 * tried, f"friend -> web: {opened} of {tried} opened under the policy"
    # The keeper's connection, opened before the policy and allowed by it, was not cut: every
    # byte echoed, none waited long.
    seconds, broken = held(installed, ns)
    since = [k for k in seconds if k.end > policy.created]
    assert not broken and since, (broken, seconds[-3:])
    assert all(k.echoed == k.sent and k.longest < 1 for k in since), since
    # The kubelet's readiness probe of web, from the node, is not judged (workloadInterfacePrefix):
    # web stayed Ready since before the policy.
    time.sleep(3)
    (condition,) = [c for c in pod(kc, ns, "web")["status"]["conditions"] if c["type"] == "Ready"]
    assert condition["status"] == "True", condition
    transition = condition["lastTransitionTime"]
    assert calendar.timegm(time.strptime(transition, "%Y-%m-%dT%H:%M:%SZ")) < policy.created, condition
    assert restarts(kc, ns) == {"web": 0, "client": 0, "friend": 0, "keeper": 0}


def test_a_rolling_update_of_the_daemonset_opens_no_denied_connection(
    installed: Node, workloads: Workloads, policy: Policy, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = installed.client()
    ns = workloads.ns
    (before,) = daemon_pods(kc)
    rolled = time.time()
    # What `kubectl rollout restart` writes.
    restarted = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rolled))
    patch = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": restarted}}}}}
    kc.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{SYSTEM}/daemonsets/pyclassify",
        body=patch,
        content_type="application/strategic-merge-patch+json",
    )

    def replaced() -> bool:
        pods = daemon_pods(kc)
        return (
            rolled_out(kc)
            and len(pods) == 1
            and pods[0]["metadata"]["uid"] != before["metadata"]["uid"]
            and not pods[0]["metadata"].get("deletionTimestamp")
            and ready(pods[0])
        )

    wait_until(replaced, "the DaemonSet rolled to a new pod, Ready", timeout=180)
    done = time.time()
    time.sleep(2.5)  # the prober's seconds that cover the end of the roll are reported
    seconds = [p for p in probes(installed, ns, "client") if p.end > rolled and p.start < done]
    tried = sum(p.tried for p in seconds)
    opened = [p for p in seconds if p.opened]
    window = (max(p.end for p in opened) - min(p.first_open or p.start for p in opened)) if opened else 0.0
    friend = [p for p in probes(installed, ns, "friend") if p.end > rolled and p.start < done]
    friend_tried, friend_opened = sum(p.tried for p in friend), sum(p.opened for p in friend)
    kept, broken = held(installed, ns)
    kept = [k for k in kept if k.end > rolled and k.start < done]
    with capsys.disabled():
        # Allowed connections started while no daemon reads the queue are dropped (fail closed):
        # their count times the probing interval is how long new allowed connections waited.
        print(
            f"\nrolling update: {done - rolled:.1f} s from the patch to the new pod Ready; the denied prober"
            f" started {tried} connections in it (one every {PROBE_EVERY * 1000:.0f} ms),"
            f" {sum(p.opened for p in opened)} opened (window {window:.3f} s); the allowed one opened"
            f" {friend_opened} of {friend_tried}"
            f" (about {(friend_tried - friend_opened) * PROBE_EVERY:.1f} s of new allowed connections dropped);"
            f" the held connection echoed {sum(k.echoed for k in kept)} of {sum(k.sent for k in kept)} bytes,"
            f" the longest wait {max((k.longest for k in kept), default=0) * 1000:.1f} ms"
        )
    assert tried >= 0.5 * (done - rolled) / PROBE_EVERY, f"the prober started only {tried} connections"
    assert not opened, f"denied connections opened during the rolling update: {opened}"
    # An established allowed connection is not held up by the roll: accepted ahead of the queue,
    # by the rules the stopping daemon keeps, every byte echoes at once through all of it.
    assert not broken and kept, (broken, kept)
    assert all(k.echoed == k.sent and k.longest < 1 for k in kept), kept
    # The new daemon enforces: the allowed prober gets through again, the denied one still not.
    after = time.time()
    wait_until(
        lambda: opened_since(installed, ns, "friend", after)[1] > 0, "friend -> web after the roll", 30, LOG_POLL
    )
    assert opened_since(installed, ns, "client", rolled)[1] == 0
    # No prober restarted (a restart would drop the log lines of the roll).
    assert restarts(kc, ns) == {"web": 0, "client": 0, "friend": 0, "keeper": 0}


def admit(kc: KubeClient, ns: str, name: str, image: str, dry_run: bool = False) -> str | None:
    """None if the API server created the Pod (or would have), else the message it refused it
    with."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
        },
    }
    return refusal(kc, body, dry_run)


def test_the_webhook_admits_and_rejects_pods_per_policy_and_applies_its_failure_policy(
    installed: Node, workloads: Workloads
) -> None:
    """Last: it scales the webhook down."""
    kc = installed.client()
    ns = "admitted"
    namespace(kc, ns, {"images": "local"})
    policy = {
        "apiVersion": "containersecurity.tigera.io/v1beta1",
        "kind": "ContainerAdmissionPolicy",
        "metadata": {"name": "local-images-only"},
        "spec": {
            "order": 1,
            "selector": "all()",
            "namespaceSelector": "images == 'local'",
            "rules": [
                {"action": "Reject", "imagePath": {"operator": "IsNoneOf", "values": ["^pcnode[.]local/.*"]}},
                {"action": "Allow"},
            ],
        },
    }
    kc.request("POST", "/apis/containersecurity.tigera.io/v1beta1/containeradmissionpolicies", body=policy)
    # The webhook follows the policies through the API: until it has this one, Pods are admitted
    # (asked as dry runs, so none is made).
    wait_until(
        lambda: admit(kc, ns, "probe", UNTRUSTED, dry_run=True),
        "the webhook to refuse an image from elsewhere",
        30,
        LOG_POLL,
    )
    refused = admit(kc, ns, "untrusted", UNTRUSTED)
    assert refused is not None, "the image from elsewhere was admitted"
    assert 'admission webhook "containeradmissionpolicies.admission.pyclassify.io" denied the request' in refused
    assert "local-images-only" in refused and UNTRUSTED.split(":")[0] in refused, refused
    # An image the policy allows is admitted, scheduled and runs.
    assert admit(kc, ns, "local", IMAGE) is None
    wait_until(
        lambda: (pod(kc, ns, "local").get("status") or {}).get("phase") == "Running", "pod local Running", 120, LOG_POLL
    )
    # A namespace the policy does not select: admitted whatever the image.
    assert admit(kc, workloads.ns, "elsewhere", UNTRUSTED, dry_run=True) is None
    # The webhook down (every replica gone): failurePolicy Fail refuses Pods the API server
    # cannot have judged; the chart's webhook.failurePolicy=Ignore admits them unjudged.
    scale_webhook_to_zero(kc)
    refused = admit(kc, ns, "while-down", IMAGE)
    assert refused is not None and "failed calling webhook" in refused, refused
    upgrade = ["upgrade", "pyclassify", str(CHART), "--namespace", SYSTEM, "--reuse-values"]
    _run([*installed.helm, *upgrade, "--set", "webhook.failurePolicy=Ignore"])
    configuration = kc.request(
        "GET", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK}"
    )
    assert configuration["webhooks"][0]["failurePolicy"] == "Ignore"
    scale_webhook_to_zero(kc)
    # Unjudged: an image the policy refuses is admitted too.
    assert admit(kc, ns, "ignored", UNTRUSTED, dry_run=True) is None


def scale_webhook_to_zero(kc: KubeClient) -> None:
    kc.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{WEBHOOK}",
        body={"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    selector = [("labelSelector", f"app.kubernetes.io/name={WEBHOOK}")]
    wait_until(
        lambda: not kc.request("GET", f"/api/v1/namespaces/{SYSTEM}/pods", selector)["items"],
        "the webhook's pods gone",
        timeout=60,
    )
