"""The admission webhook under hostile clients, with real sockets on 127.0.0.1: idle connections
by the thousand, stalled bodies, one-byte trickles, a certificate rotated on disk, and a review
it could not read as the API server does (a lone surrogate). Threads and memory stay bounded,
every request meets its deadline, and nothing is admitted that a rule rejects."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from pyclassify.admission.webhook import AdmissionWebhook
from tests.admission.certs import self_signed
from tests.enforce.report import record

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "admission"
NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


@pytest.fixture
def tls(tmp_path: Path) -> tuple[str, str]:
    return self_signed(tmp_path / "tls", "first.test")


def hook_with(tls: tuple[str, str], tmp_path: Path, **options: object) -> AdmissionWebhook:
    policies = tmp_path / "policies"
    if not policies.exists():
        shutil.copytree(EXAMPLES / "policies", policies)
    return AdmissionWebhook(
        [str(policies)],
        tls_cert=tls[0],
        tls_key=tls[1],
        listen=("127.0.0.1", 0),
        scan_paths=[str(EXAMPLES / "scans.yaml")],
        reload_interval=0.05,
        clock=lambda: NOW,
        **options,
    )  # type: ignore[arg-type]


@pytest.fixture
def hook(tls: tuple[str, str], tmp_path: Path) -> Iterator[AdmissionWebhook]:
    with hook_with(tls, tmp_path, request_timeout=2.0) as h:
        yield h


def review(image: str, uid: str = "u1") -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "production"},
        "spec": {"containers": [{"name": "c", "image": "IMAGE"}]},
    }
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "production",
            "object": pod,
        },
    }
    # the image goes in as JSON text, escapes and all, as a client may send it
    return json.dumps(body).replace('"IMAGE"', json.dumps(image)).encode()


def tls_client(cafile: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cafile)
    return ctx


def post(h: AdmissionWebhook, cafile: str, body: bytes, timeout: float = 10.0) -> tuple[int, dict]:
    with socket.create_connection(h.address, timeout=timeout) as raw:
        with tls_client(cafile).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(
                b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            data = b""
            while b"\r\n\r\n" not in data:
                data += s.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(
                [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0]
            )
            while len(rest) < length:
                rest += s.recv(65536)
            return int(head.split()[1]), json.loads(rest)


def healthz(h: AdmissionWebhook, cafile: str) -> float:
    """Seconds /healthz took to answer 200 (raises if it does not answer in 30 s: a figure is
    recorded, no time is asserted)."""
    t = time.monotonic()
    with socket.create_connection(h.address, timeout=30) as raw:
        with tls_client(cafile).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
    return time.monotonic() - t


def threads_of_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_a_lone_surrogate_is_judged_as_the_api_server_reads_it(
    tls: tuple[str, str], tmp_path: Path, failure_policy: str
) -> None:
    """The API server decodes a lone ``\\udcff`` escape as U+FFFD; the webhook judges that name.
    An image outside the allowed repository stays rejected whatever the failure policy."""
    with hook_with(tls, tmp_path, failure_policy=failure_policy) as h:
        status, answer = post(h, tls[0], review("docker.io/evil\udcff:1"))
        assert status == 200 and answer["response"]["allowed"] is False, answer
        assert answer["response"]["status"]["code"] == 403
        assert (
            "rejected by ContainerAdmissionPolicy/reject-failed-and-non-gcr rule 0"
            in answer["response"]["status"]["message"]
        )
        assert "\ufffd" in answer["response"]["status"]["message"]  # the name as the cluster has it
        # Invalid UTF-8 bytes in the body: the same replacement, the same judgement.
        body = review("docker.io/evilXX:1").replace(b"evilXX", b"evil\xff\xfe")
        status, answer = post(h, tls[0], body)
        assert status == 200 and answer["response"]["allowed"] is False
        assert h.metrics.requests.labels("error")._value.get() == 0  # judged, not an internal error


def test_two_thousand_idle_connections_hold_no_threads(hook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    before = threads_of_this_process()
    idle = []
    try:
        for _ in range(2000):
            idle.append(socket.create_connection(hook.address, timeout=5))
        time.sleep(0.5)
        held = threads_of_this_process() - before
        # the server's threads are its loop and its workers, however many connections
        assert held <= 8 + 1, f"{held} threads for 2,000 idle connections"
        probe = healthz(hook, tls[0])
        status, answer = post(hook, tls[0], review("gcr.io/company/production-repository/frontend:2.3.1"))
        assert status == 200 and answer["response"]["allowed"] is True
        assert hook.server.stats["open"] <= 256
        record(
            "webhook-idle-connections",
            {
                "connections": 2000,
                "threads_added": held,
                "open": hook.server.stats["open"],
                "evicted": hook.server.stats["evicted"],
                "healthz_ms": round(probe * 1000, 1),
            },
        )
    finally:
        for s in idle:
            s.close()


def test_stalled_bodies_are_bounded_and_cut_at_the_deadline(hook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    """200 connections each announce a 3 MiB body, send 1 MiB of it and stall: the server keeps
    at most its buffer bound, refuses the bodies past it (503), and cuts the rest at the
    request deadline (2 s here)."""
    rss_before = rss_mb()
    stalled: list[ssl.SSLSocket] = []

    def open_one() -> None:
        raw = socket.create_connection(hook.address, timeout=10)
        s = tls_client(tls[0]).wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (3 * 1024 * 1024))
        try:
            s.sendall(b"x" * (1024 * 1024))
        except OSError:
            pass  # refused already
        stalled.append(s)

    threads = [threading.Thread(target=open_one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = rss_mb() - rss_before
    healthz(hook, tls[0])
    # every connection cut: at its request deadline (2 s from its first byte), or refused (503)
    deadline = time.monotonic() + 60
    while hook.server.stats["open"]:
        assert time.monotonic() < deadline, f"{hook.server.stats['open']} stalled connections still open"
        time.sleep(0.2)
    for s in stalled:
        s.settimeout(5)
        try:
            data = s.recv(65536)
            while data and b"HTTP/1.1 503" not in data:
                data = s.recv(65536)
        except TimeoutError:
            pytest.fail("a stalled connection is still open on the server's side")
        except (OSError, ssl.SSLError):
            pass  # reset: cut
        s.close()
    assert hook.server.stats["timeouts"] + hook.server.stats["busy"] >= 200
    # 200 bodies of 3 MiB would be 600 MiB; the server holds at most its bound (64 MiB)
    assert peak < 200, f"RSS grew {peak:.0f} MiB"
    record(
        "webhook-stalled-bodies",
        {
            "connections": 200,
            "body_bytes": 3 * 1024 * 1024,
            "sent_bytes": 1024 * 1024,
            "rss_growth_mb": round(peak, 1),
            "busy": hook.server.stats["busy"],
            "timeouts": hook.server.stats["timeouts"],
            "deadline_s": 2.0,
        },
    )


def test_one_byte_trickles_are_cut_at_the_request_deadline(hook: AdmissionWebhook, tls: tuple[str, str]) -> None:
    conns = []
    for _ in range(100):
        raw = socket.create_connection(hook.address, timeout=10)
        conns.append(tls_client(tls[0]).wrap_socket(raw, server_hostname="127.0.0.1"))
    before = threads_of_this_process()
    start = time.monotonic()
    request = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
    alive = list(conns)
    i = 0
    while alive and time.monotonic() - start < 8.0:
        for s in list(alive):
            try:
                s.sendall(request[i % len(request) : i % len(request) + 1])
            except OSError:
                alive.remove(s)
        i += 1
        time.sleep(0.25)
        assert threads_of_this_process() - before <= 2
    elapsed = time.monotonic() - start
    assert not alive, f"{len(alive)} trickling connections still open after {elapsed:.1f} s (deadline 2 s)"
    record("webhook-trickles", {"connections": 100, "deadline_s": 2.0, "all_cut_after_s": round(elapsed, 2)})
    for s in conns:
        s.close()
    healthz(hook, tls[0])


def test_a_rotated_certificate_serves_new_connections(
    hook: AdmissionWebhook, tls: tuple[str, str], tmp_path: Path
) -> None:
    def common_name() -> str:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(hook.address, timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                der = s.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).subject.rfc4514_string()

    assert common_name() == "CN=first.test"
    new_cert, new_key = self_signed(tmp_path / "rotated", "second.test")
    # as a Secret volume updates: the new pair renamed over the old files
    shutil.copy(new_key, tls[1] + ".new")
    shutil.copy(new_cert, tls[0] + ".new")
    os.replace(tls[1] + ".new", tls[1])
    os.replace(tls[0] + ".new", tls[0])
    deadline = time.monotonic() + 10
    while common_name() != "CN=second.test":
        assert time.monotonic() < deadline, "the rotated certificate is never served"
        time.sleep(0.1)
    assert hook.certificate_reloads["success"] >= 1
    # A broken pair (a key that is not the certificate's) is refused; the last good one stays.
    shutil.copy(self_signed(tmp_path / "other", "third.test")[1], tls[1])
    deadline = time.monotonic() + 10
    while hook.certificate_reloads["failure"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert common_name() == "CN=second.test"
    status, answer = post(hook, new_cert, review("gcr.io/company/production-repository/frontend:2.3.1"))
    assert status == 200 and answer["response"]["allowed"] is True
