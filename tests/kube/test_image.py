"""The image scripts/build-image.sh builds from Debian's packages and this checkout's sdist
(deploy/image/), run by runc as the DaemonSet runs it: in a network namespace of the test's own,
with NET_ADMIN and NET_RAW and no other capability, no privilege escalation, a read-only root
filesystem with a tmpfs /tmp and an xtables lock mounted. `pyclassify --help` runs there;
`pyclassify enforce --kubeconfig` follows the real API server (reached through a relay on the
namespace's loopback, as in test_enforce_kube.py), installs its rules in that namespace,
becomes ready, runs as root with exactly those two capabilities, and on SIGTERM stops keeping
its rules. The unpacked image stays under the bound deploy/README.md states, and
deploy/Containerfile runs the same install script on the same Debian release, with the same
configuration as the umoci build."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyclassify.kube import load_client
from tests.enforce.netns import GET, PY, Namespaces, iptables_rules, root_reason, sh
from tests.kube.apiserver import REPO
from tests.kube.test_enforce_kube import RELAY
from tests.kube.test_listwatch import create_namespace, create_pod

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
#: deploy/README.md states this bound on the unpacked root filesystem.
MAX_ROOTFS_BYTES = 400 * 1024 * 1024
CAPS = ["CAP_NET_ADMIN", "CAP_NET_RAW"]
CAP_NET_ADMIN, CAP_NET_RAW = 12, 13


def run(argv: list[str], timeout: float = 600) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-4000:]}")
    return r.stdout


@pytest.fixture(scope="module")
def image() -> Path:
    """The OCI layout (tag: the package's version), built or taken from the cache."""
    missing = [tool for tool in ("debootstrap", "umoci", "runc") if shutil.which(tool) is None]
    if missing:
        message = f"{', '.join(missing)} not installed (apt-get install debootstrap umoci runc)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return Path(run(["bash", "scripts/build-image.sh"], timeout=3600).strip())


@pytest.fixture(scope="module")
def bundle(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image unpacked: rootfs/ and the runtime configuration umoci derives from the image's."""
    d = tmp_path_factory.mktemp("image") / "bundle"
    run(["umoci", "unpack", "--image", f"{image}:{VERSION}", str(d)])
    return d


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"pci-{uuid.uuid4().hex[:6]}"
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    try:
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)


class Container:
    """One runc container of the image, as the DaemonSet's securityContext and mounts make it."""

    def __init__(self, bundle: Path, workdir: Path, netns: str, args: list[str], env: dict[str, str] | None = None):
        self.id = f"pyclassify-test-{uuid.uuid4().hex[:8]}"
        self.root = workdir / "runc"  # runc's state of this test's containers only
        self.dir = workdir / self.id
        self.dir.mkdir(parents=True)
        config = json.loads((bundle / "config.json").read_text())
        process = config["process"]
        process["args"] = args
        process["terminal"] = False
        process["env"] += [f"{k}={v}" for k, v in (env or {}).items()]
        process["capabilities"] = {
            "bounding": CAPS,
            "effective": CAPS,
            "permitted": CAPS,
            "inheritable": [],
            "ambient": [],
        }
        process["noNewPrivileges"] = True
        config["root"] = {"path": str(bundle / "rootfs"), "readonly": True}
        namespaces = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
        config["linux"]["namespaces"] = [*namespaces, {"type": "network", "path": f"/var/run/netns/{netns}"}]
        lock = workdir / "xtables.lock"
        lock.touch()
        config["mounts"] += [
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=16m"]},
            {"destination": "/run/xtables.lock", "type": "bind", "source": str(lock), "options": ["rbind", "rw"]},
        ]
        self.config = config
        self.proc: subprocess.Popen[str] | None = None

    def mount(self, source: Path, destination: str) -> None:
        self.config["mounts"].append(
            {"destination": destination, "type": "bind", "source": str(source), "options": ["rbind", "ro"]}
        )

    def start(self) -> subprocess.Popen[str]:
        (self.dir / "config.json").write_text(json.dumps(self.config))
        argv = ["runc", "--root", str(self.root), "run", "--bundle", str(self.dir), self.id]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return self.proc

    def state(self) -> dict[str, Any]:
        return json.loads(run(["runc", "--root", str(self.root), "state", self.id]))

    def kill(self, signal: str) -> None:
        run(["runc", "--root", str(self.root), "kill", self.id, signal])

    def delete(self) -> None:
        subprocess.run(["runc", "--root", str(self.root), "delete", "--force", self.id], capture_output=True)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_help_runs_in_the_image(bundle: Path, tmp_path: Path, netns: str) -> None:
    c = Container(bundle, tmp_path, netns, ["pyclassify", "--help"])
    try:
        out, err = c.start().communicate(timeout=120)
        assert c.proc is not None and c.proc.returncode == 0, err
        assert "Usage: pyclassify" in out and "enforce" in out
    finally:
        c.delete()


def test_enforce_follows_the_api_server_in_the_image(kube_cluster, bundle: Path, tmp_path: Path, netns: str) -> None:
    kc = load_client(str(kube_cluster.kubeconfig), "test")
    ns = f"img-{netns[-6:]}"
    create_namespace(kc, ns, {})
    create_pod(kc, ns, "p1", {"app": "a"}, "10.244.1.2", node="node-image")
    procs = Namespaces()
    sock = str(tmp_path / "apiserver.sock")
    outside = subprocess.Popen(
        [PY, "-c", RELAY, "unix-to-tcp", sock, str(kube_cluster.port)], stdout=subprocess.PIPE, text=True
    )
    procs.procs.append(outside)
    assert outside.stdout is not None and outside.stdout.readline().strip() == "ready"
    inside = procs.spawn(netns, [PY, "-c", RELAY, "tcp-to-unix", str(kube_cluster.port), sock])
    assert inside.stdout is not None and inside.stdout.readline().strip() == "ready"

    args = ["pyclassify", "enforce", "--kubeconfig", "/etc/pyclassify/kubeconfig", "--context", "test"]
    args += ["--queue=0", "--fail=closed", "--metrics=127.0.0.1:9464"]  # as the DaemonSet gives them
    c = Container(bundle, tmp_path, netns, args, env={"NODE_NAME": "node-image"})
    c.mount(kube_cluster.kubeconfig, "/etc/pyclassify/kubeconfig")
    lines: queue.Queue[dict[str, Any]] = queue.Queue()

    def read(stream: Any) -> None:
        for line in stream:
            try:
                lines.put(json.loads(line))
            except ValueError:
                pass

    def wait_event(name: str, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = lines.get(timeout=0.5)
            except queue.Empty:
                if c.proc is not None and c.proc.poll() is not None and lines.empty():
                    break
                continue
            if event.get("event") == name:
                return event
        stderr = c.proc.stderr.read() if c.proc is not None and c.proc.poll() is not None and c.proc.stderr else ""
        raise AssertionError(
            f"no {name!r} event from the container (exit {c.proc and c.proc.poll()}): {stderr[-3000:]}"
        )

    try:
        proc = c.start()
        threading.Thread(target=read, args=(proc.stdout,), daemon=True).start()
        start = wait_event("start")
        assert start["node"] == "node-image" and start["endpoints"] >= 1, start
        status, _, body = sh(
            "ip", "netns", "exec", netns, PY, "-c", GET, "http://127.0.0.1:9464/readyz"
        ).stdout.partition("\n")
        assert (status, body) == ("200", "ok\n")
        rules = iptables_rules(netns)
        assert "-N PYCLASSIFY-FORWARD" in rules and re.search(r"-j NFQUEUE --queue-num 0\b", rules), rules

        # The documented user: root in the container, with NET_ADMIN and NET_RAW and nothing else.
        status_of = proc_status(c.state()["pid"])
        assert status_of["Uid"].split() == ["0"] * 4 and status_of["Gid"].split() == ["0"] * 4
        wanted = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW)
        for field in ("CapEff", "CapPrm", "CapBnd"):
            assert int(status_of[field], 16) == wanted, (field, status_of[field])
        assert int(status_of["CapInh"], 16) == 0 and int(status_of["CapAmb"], 16) == 0
        assert status_of["NoNewPrivs"] == "1"

        c.kill("TERM")
        wait_event("stop")
        assert proc.wait(timeout=60) == 0
        assert "-N PYCLASSIFY-FORWARD" in iptables_rules(netns)  # kept for the next daemon to adopt
    finally:
        c.delete()
        procs.stop_processes()


def test_the_image_size_is_bounded(image: Path, bundle: Path) -> None:
    rootfs = int(sh("du", "-sb", str(bundle / "rootfs")).stdout.split()[0])
    layers = int(sh("du", "-sb", str(image / "blobs")).stdout.split()[0])
    assert rootfs < MAX_ROOTFS_BYTES, f"unpacked {rootfs / 2**20:.0f} MiB, compressed {layers / 2**20:.0f} MiB"


def oci_config(image: Path) -> dict[str, Any]:
    def blob(digest: str) -> Any:
        return json.loads((image / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_text())

    index = json.loads((image / "index.json").read_text())
    (manifest,) = [m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == VERSION]
    return blob(blob(manifest["digest"])["config"]["digest"])["config"]


def test_the_containerfile_makes_the_same_image(image: Path) -> None:
    text = (REPO / "deploy" / "Containerfile").read_text()
    instructions = [line.split(maxsplit=1) for line in text.splitlines() if line and not line.startswith("#")]
    steps = {k: v for k, v in instructions if k in ("FROM", "USER", "ENTRYPOINT", "CMD")}
    release = sh("sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME").stdout.strip()
    assert steps["FROM"].endswith(f"debian:{release}-slim"), "the same Debian release as the debootstrap base"
    # deploy/image/ copied in and its install.sh run: the steps scripts/build-image.sh runs in its chroot
    assert ["COPY", "deploy/image/ /tmp/image/"] in instructions
    assert any(k == "RUN" and v.startswith("sh /tmp/image/install.sh ") for k, v in instructions)
    config = oci_config(image)
    assert config["User"] == steps["USER"]
    assert config["Entrypoint"] == json.loads(steps["ENTRYPOINT"])
    assert config["Cmd"] == json.loads(steps["CMD"])
    env = [v for k, v in instructions if k == "ENV"]
    assert set(env) <= set(config["Env"]) and env
