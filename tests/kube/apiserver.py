"""A real etcd and kube-apiserver on loopback, for tests (built by scripts/kube-testenv.sh).

``KubeCluster(workdir, bindir, crd_dir).start()`` generates a CA and serving certificate, the
service-account signing keys and a static token file, starts etcd and kube-apiserver on free
loopback ports, waits for /readyz, writes a kubeconfig (``cluster.kubeconfig``) and installs the
CRDs pyclassify follows. ``restart_apiserver()`` stops and starts kube-apiserver on the same
port and etcd; ``stop()`` ends both.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

REPO = Path(__file__).resolve().parents[2]
TOKEN = "pyclassify-test-admin-token"

#: Kinds whose CRD the upstream modules of scripts/kube-testenv.sh do not ship: minimal
#: structural CRDs, the spec kept as given.
MINIMAL_CRDS = [
    ("crd.projectcalico.org", "v1", "Profile", "profiles", "Cluster"),
    ("crd.projectcalico.org", "v1", "StagedGlobalNetworkPolicy", "stagedglobalnetworkpolicies", "Cluster"),
    ("crd.projectcalico.org", "v1", "StagedNetworkPolicy", "stagednetworkpolicies", "Namespaced"),
    ("crd.projectcalico.org", "v1", "StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies", "Namespaced"),
    ("policy.networking.k8s.io", "v1alpha2", "ClusterNetworkPolicy", "clusternetworkpolicies", "Cluster"),
    ("containersecurity.tigera.io", "v1beta1", "ContainerAdmissionPolicy", "containeradmissionpolicies", "Cluster"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def followed_kind_crds(crd_dir: Path | None) -> list[dict[str, Any]]:
    """The CRDs of the kinds pyclassify follows: the upstream definitions in ``crd_dir``
    (scripts/kube-testenv.sh fetches them), a minimal one for each kind it has none of."""
    out = []
    if crd_dir is not None:
        for f in sorted(crd_dir.glob("*.yaml")):
            out += [d for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
    have = {c["metadata"]["name"] for c in out}
    out += [c for c in (minimal_crd(*m) for m in MINIMAL_CRDS) if c["metadata"]["name"] not in have]
    return out


def install_crds(
    request: Callable[..., Any], crds: list[dict[str, Any]], not_found: type[Exception], timeout: float = 60
) -> None:
    """Create ``crds`` with ``request(method, path, body)`` and wait until each is Established
    and its group answers a list (``not_found``: what ``request`` raises until then)."""
    for crd in crds:
        request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            got = request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or ()}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not established: {conditions}")
            time.sleep(0.2)
    # Discovery of the new groups: wait until each answers a list.
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served"))
        path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        while True:
            try:
                request("GET", path)
                break
            except not_found:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def minimal_crd(group: str, version: str, kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            # *.k8s.io groups are protected: the upstream CRDs carry the same annotation.
            "annotations": {
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/network-policy-api/pull/30"
            },
        },
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki(d: Path) -> None:
    """ca.crt, server.crt/server.key (127.0.0.1, localhost), sa.key/sa.pub, tokens.csv."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyclassify-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (d / "ca.crt").write_bytes(_pem_cert(ca))
    (d / "server.crt").write_bytes(_pem_cert(cert))
    (d / "server.key").write_bytes(_pem_key(key))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (d / "sa.key").write_bytes(_pem_key(sa))
    (d / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (d / "tokens.csv").write_text(f"{TOKEN},admin,admin-uid,system:masters\n")


class KubeCluster:
    def __init__(self, workdir: Path, bindir: Path, crd_dir: Path | None) -> None:
        self.dir = workdir
        self.bindir = bindir
        self.crd_dir = crd_dir
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.port = free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None
        self.kubeconfig = workdir / "kubeconfig"
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._ssl = None

    # --- processes ---

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.dir / f"{name}.log", "ab")
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def start(self) -> KubeCluster:
        make_pki(self.dir)
        self.etcd = self._spawn(
            "etcd",
            [
                str(self.bindir / "etcd"),
                "--name",
                "default",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{self.peer_port}",
                "--log-level",
                "warn",
                "--quota-backend-bytes",
                str(1 << 30),
            ],
        )
        self._wait(lambda: self._etcd_healthy(), "etcd", self.etcd)
        self.start_apiserver()
        self._write_kubeconfig()
        self._install_crds()
        return self

    def start_apiserver(self) -> None:
        d = self.dir
        self.apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.bindir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--cert-dir={d / 'certs'}",
                f"--tls-cert-file={d / 'server.crt'}",
                f"--tls-private-key-file={d / 'server.key'}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--authorization-mode=RBAC",
                f"--token-auth-file={d / 'tokens.csv'}",
                # No controller manager creates the "default" service account pods would need.
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
            ],
        )
        self._wait(self._apiserver_ready, "kube-apiserver", self.apiserver, timeout=120)

    def restart_apiserver(self) -> None:
        """Killed (SIGKILL, as a crash or an OOM kill would) and started again."""
        self._terminate(self.apiserver, signal.SIGKILL)
        self.start_apiserver()

    def stop(self) -> None:
        self._terminate(self.apiserver)
        self._terminate(self.etcd)

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _wait(self, check: Any, what: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.dir / f"{what}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log}")
            if check():
                return
            time.sleep(0.3)
        log = (self.dir / f"{what}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{what} not ready after {timeout:.0f} s:\n{log}")

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    # --- HTTP, for readiness and CRDs (the code under test uses its own client) ---

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        return self._ssl

    def http(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._context()) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            exc.msg = f"{exc.msg}: {method} {path}: {exc.read().decode(errors='replace')[:2000]}"
            raise
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode()

    def _apiserver_ready(self) -> bool:
        try:
            return self.http("GET", "/readyz") == "ok"
        except (OSError, urllib.error.HTTPError):
            return False

    def _write_kubeconfig(self) -> None:
        ca = base64.b64encode((self.dir / "ca.crt").read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def crds(self) -> list[dict[str, Any]]:
        return followed_kind_crds(self.crd_dir)

    def _install_crds(self) -> None:
        install_crds(self.http, self.crds(), urllib.error.HTTPError)
