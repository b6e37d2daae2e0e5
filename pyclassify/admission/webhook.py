"""A Kubernetes validating admission webhook for ContainerAdmissionPolicy (AdmissionReview
``admission.k8s.io/v1`` over HTTPS).

Served by ``pyclassify.httpserver.BoundedServer``: one event-loop thread holds the connections
(HTTP/1.1 keep-alive as the API server uses it; an idle one costs no thread), ``workers`` threads
decide; a request's head and body must arrive within ``request_timeout`` seconds of its first
byte (the API server's own webhook timeout is 10 s, 30 s at most), a body over ``max_body`` is
refused from its Content-Length before any of it is kept, at most ``max_connections``
connections are open. The certificate and key are read again when their files change (a
rotated Secret), for the connections made from then on; a pair that does not load is logged
and counted, and the last good one stays in use. Or the webhook makes and rotates them itself
(``pyclassify.admission.certs``, ``--tls-self-signed``).

Endpoints:

- ``POST /validate`` (or ``/``): an AdmissionReview. The answer is an AdmissionReview with the
  request's ``uid``, ``allowed``, and a ``status.message`` naming, for each rejected image, the
  policy and rule that rejected it (HTTP 200).
- ``GET /healthz``: ``ok`` while the server runs (it always has a valid policy snapshot).
- ``GET /metrics``: Prometheus metrics (``prometheus-client``, a registry of this server's own).

Bad requests never crash the server and always get an AdmissionReview error body: a body over
``max_body`` bytes (default 3 MiB, the API server's own request limit) gets HTTP 413, a request
without Content-Length 411, malformed JSON or a review that is not ``admission.k8s.io/v1``
``AdmissionReview`` with a ``request.uid`` 400; in all of them ``response.allowed`` is false (the
API server then applies its webhook ``failurePolicy``). The body is decoded as the API server
decodes it (Go's ``encoding/json``): invalid UTF-8 and lone surrogate escapes become U+FFFD,
so an image name is judged as the name the cluster will pull, never as something the rules
cannot read. An internal error while deciding (a bug) follows ``failure_policy``: ``Fail``
answers ``allowed: false`` with code 500, ``Ignore`` answers ``allowed: true`` with a warning.

Hot reload: a thread polls the modification time, size and inode of every manifest file under the
policy paths (and of the scan-results files) every ``reload_interval`` seconds (bounded to
0.05-60 s; no inotify). On a change it loads everything anew; a valid result replaces the
snapshot atomically, an invalid one is logged and counted and the last good snapshot stays in
force (as ``enforce`` does).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pyclassify.admission.certs import SelfSignedCertificates
from pyclassify.admission.evaluate import ResourceError, evaluate, is_pod_creating, resource_from_object
from pyclassify.admission.policy import AdmissionSet, build_admission
from pyclassify.admission.scans import ScanResults, load_scans
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.httpserver import BoundedServer, Request, Response
from pyclassify.loader import iter_paths, manifest_files

log = logging.getLogger("pyclassify.admission.webhook")

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
DEFAULT_MAX_BODY = 3 * 1024 * 1024  # the API server's own request body limit
MIN_RELOAD_INTERVAL = 0.05
MAX_RELOAD_INTERVAL = 60.0
FAILURE_POLICIES = ("Fail", "Ignore")
#: Worker threads, connections open at once, the seconds a request may take from its first byte
#: (the API server waits 10 s by default, 30 s at most), and an idle connection may stay.
DEFAULT_WORKERS = 8
DEFAULT_MAX_CONNECTIONS = 256
REQUEST_TIMEOUT = 30.0
IDLE_TIMEOUT = 90.0
#: Bodies held at once, across connections (each is at most max_body).
MAX_BUFFERED = 64 * 1024 * 1024
#: A lone UTF-16 surrogate (a ``\udcff`` escape decodes to one; a pair decodes to one character).
_SURROGATE = re.compile("[\ud800-\udfff]")
# Subresources whose requests carry a pod spec worth judging; others (status, scale, ...) are admitted.
JUDGED_SUBRESOURCES = ("", "ephemeralcontainers")


@dataclass(frozen=True)
class Snapshot:
    admission: AdmissionSet
    scans: ScanResults
    generation: int
    loaded_at: float


def load_snapshot(
    paths: Sequence[str], scan_paths: Sequence[str], generation: int, documents: Sequence[Document] = ()
) -> Snapshot:
    """Everything the webhook decides with (the manifests under ``paths`` and ``documents``, a
    cluster's objects); raises InvalidInput with every problem found."""
    problems = Problems()
    admission = build_admission(itertools.chain(iter_paths(paths, problems), documents), problems)
    scans = load_scans(scan_paths, problems) if scan_paths else ScanResults()
    if problems:
        raise InvalidInput(problems.errors)
    return Snapshot(admission, scans, generation, time.time())


def _fingerprint(paths: Iterable[str]) -> tuple[tuple[str, int, int, int], ...]:
    out: list[tuple[str, int, int, int]] = []
    for path in paths:
        p = Path(path)
        files = manifest_files(p) if p.is_dir() else [p]
        for f in files:
            try:
                st = os.stat(f)
                out.append((str(f), st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((str(f), -1, -1, -1))
    return tuple(out)


def decode_review(body: bytes) -> Any:
    """The JSON of a request body as the API server reads it (Go's ``encoding/json``): invalid
    UTF-8 and lone surrogate escapes become U+FFFD, the replacement character. Raises
    ValueError (or RecursionError) for what is not JSON."""
    value = json.loads(body.decode("utf-8", errors="replace"))
    return _replace_surrogates(value)


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


class _ServerCollector(Collector):
    """The HTTPS server's own counters at scrape time (``BoundedServer.stats``)."""

    def __init__(self, webhook: AdmissionWebhook) -> None:
        self.webhook = webhook

    def collect(self) -> Iterator[Any]:
        server = getattr(self.webhook, "server", None)
        stats = server.stats if server is not None else {}
        tls = CounterMetricFamily("pyclassify_admission_tls_handshake_errors", "Failed TLS handshakes")
        tls.add_metric([], stats.get("tls_errors", 0))
        yield tls
        refused = CounterMetricFamily(
            "pyclassify_admission_connections_cut",
            "Connections cut: refused at the cap, idle ones closed to make room, requests past their deadline, "
            "bodies over the limit, bodies refused while too many were being received",
            labels=["reason"],
        )
        for reason in ("refused", "evicted", "timeouts", "too_large", "busy", "bad_requests"):
            refused.add_metric([reason], stats.get(reason, 0))
        yield refused
        open_ = GaugeMetricFamily("pyclassify_admission_connections_open", "Connections open")
        open_.add_metric([], stats.get("open", 0))
        yield open_
        reloads = CounterMetricFamily(
            "pyclassify_admission_certificate_reloads",
            "TLS certificate and key replaced (read again from disk, or made by --tls-self-signed), by result",
            labels=["result"],
        )
        for result, n in self.webhook.certificate_reloads.items():
            reloads.add_metric([result], n)
        yield reloads
        certificates = getattr(self.webhook, "certificates", None)
        if certificates is not None and certificates.certificates is not None:
            expiry = GaugeMetricFamily(
                "pyclassify_admission_certificate_expiry_timestamp_seconds",
                "When the serving certificate made by --tls-self-signed expires (Unix time)",
            )
            expiry.add_metric([], certificates.certificates.cert.not_valid_after_utc.timestamp())
            yield expiry
            events = CounterMetricFamily(
                "pyclassify_admission_certificate_events",
                "--tls-self-signed: certificates made or rotated, adopted from the Secret, caBundle updates, "
                "failed checks (the Secret or the webhook configuration could not be read or written)",
                labels=["event"],
            )
            for event, n in certificates.counters.items():
                events.add_metric([event], n)
            yield events


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "pyclassify_admission_requests", "AdmissionReview requests by result", ["result"], registry=registry
        )
        self.images = Counter(
            "pyclassify_admission_images", "Container images judged, by decision", ["decision"], registry=registry
        )
        self.latency = Histogram(
            "pyclassify_admission_request_duration_seconds",
            "Time to answer one AdmissionReview",
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        )
        self.reloads = Counter(
            "pyclassify_admission_policy_reloads", "Policy reloads by result", ["result"], registry=registry
        )
        self.policies = Gauge("pyclassify_admission_policies", "ContainerAdmissionPolicies in force", registry=registry)
        self.generation = Gauge(
            "pyclassify_admission_policy_generation",
            "Generation of the policy snapshot in force (1 = as started)",
            registry=registry,
        )


class AdmissionWebhook:
    """The webhook: policy snapshot, reload thread, HTTPS server."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        certificates: SelfSignedCertificates | None = None,
        listen: tuple[str, int] = ("0.0.0.0", 8443),
        scan_paths: Sequence[str] = (),
        failure_policy: str = "Fail",
        max_body: int = DEFAULT_MAX_BODY,
        reload_interval: float = 2.0,
        trust_annotations: bool = False,
        clock: Callable[[], dt.datetime] | None = None,
        cluster: Any = None,
        workers: int = DEFAULT_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        """``cluster``: a cluster's admission input (``pyclassify.kube.admission``
        ``ClusterAdmissionInput``: ``fetch() -> (fingerprint, documents)``), polled like the files.
        The serving certificate: the files ``tls_cert`` and ``tls_key`` (read again when they
        change), or ``certificates``, made and rotated by the webhook itself (synchronised here
        first: raises ``CertificateError`` when its Secret or webhook configuration cannot be
        written)."""
        if (tls_cert is None or tls_key is None) == (certificates is None):
            raise ValueError("give either tls_cert and tls_key, or certificates")
        if failure_policy not in FAILURE_POLICIES:
            raise ValueError(f"failure policy must be one of {', '.join(FAILURE_POLICIES)}, not {failure_policy!r}")
        if max_body < 1:
            raise ValueError("max_body must be positive")
        self.paths = list(paths)
        self.scan_paths = list(scan_paths)
        self.failure_policy = failure_policy
        self.max_body = max_body
        self.reload_interval = min(max(reload_interval, MIN_RELOAD_INTERVAL), MAX_RELOAD_INTERVAL)
        self.trust_annotations = trust_annotations
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.evaluator = evaluate  # the decision function (replaceable, e.g. to test the failure policy)
        self.registry = CollectorRegistry()
        self.metrics = _Metrics(self.registry)
        self.certificate_reloads: dict[str, int] = {"success": 0, "failure": 0}
        self.registry.register(_ServerCollector(self))
        self.cluster = cluster
        self._cluster_down = False
        marks, documents = cluster.fetch() if cluster is not None else ((), [])
        self._snapshot = load_snapshot(self.paths, self.scan_paths, 1, documents)  # raises InvalidInput
        self._fingerprint: tuple[Any, ...] = (_fingerprint(self.paths + self.scan_paths), marks)
        self._failed_fingerprint: tuple[Any, ...] | None = None
        self._publish(self._snapshot)
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.certificates = certificates
        if certificates is not None:
            certificates.sync()  # raises CertificateError
            self.ssl_context = certificates.ssl_context()
            certificates.on_change = self._use_certificate
            self._tls_fingerprint: tuple[Any, ...] = ()
        else:
            assert tls_cert is not None and tls_key is not None
            self._tls_fingerprint = _fingerprint([tls_cert, tls_key])
            self.ssl_context = load_tls(tls_cert, tls_key)  # raises WebhookSetupError
        try:
            self.server = BoundedServer(
                listen,
                self._answer,
                tls=lambda: self.ssl_context,
                workers=workers,
                max_connections=max_connections,
                request_timeout=request_timeout,
                idle_timeout=IDLE_TIMEOUT,
                max_body=max_body,
                max_buffered=max(MAX_BUFFERED, max_body),
                error=_error_response,
                name="admission-https",
                server_header="pyclassify-admission",
            )
        except (OSError, OverflowError) as e:  # a busy port, an address not here, a name not resolved
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise WebhookSetupError(f"cannot listen on {_address_text(listen)}: {why}") from e
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- policy snapshot and reload ---

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def _publish(self, snap: Snapshot) -> None:
        self.metrics.policies.set(len(snap.admission.policies))
        self.metrics.generation.set(snap.generation)

    def reload_if_changed(self) -> bool | None:
        """Reloads when a watched file (or a cluster object) changed: True reloaded, False the new
        input is invalid or the cluster cannot be read (the old snapshot stays), None nothing
        changed."""
        marks: tuple[Any, ...] = ()
        documents: list[Document] = []
        if self.cluster is not None:
            try:
                marks, documents = self.cluster.fetch()
            except Exception as e:  # noqa: BLE001 - the API server is away: keep deciding with what we have
                self.metrics.reloads.labels("failure").inc()
                if not self._cluster_down:
                    log.warning("cannot read the cluster, keeping generation %d: %s", self._snapshot.generation, e)
                    self._cluster_down = True
                return False
            if self._cluster_down:
                log.info("the cluster can be read again")
                self._cluster_down = False
        fingerprint = (_fingerprint(self.paths + self.scan_paths), marks)
        if fingerprint == self._fingerprint or fingerprint == self._failed_fingerprint:
            return None
        try:
            snap = load_snapshot(self.paths, self.scan_paths, self._snapshot.generation + 1, documents)
        except InvalidInput as e:
            self._failed_fingerprint = fingerprint
            self.metrics.reloads.labels("failure").inc()
            log.warning("policy reload rejected, keeping generation %d:\n%s", self._snapshot.generation, e)
            return False
        except Exception:  # a bug while loading must not stop the watcher
            self._failed_fingerprint = fingerprint
            self.metrics.reloads.labels("failure").inc()
            log.exception("policy reload failed, keeping generation %d", self._snapshot.generation)
            return False
        self._snapshot = snap
        self._fingerprint = fingerprint
        self._failed_fingerprint = None
        self.metrics.reloads.labels("success").inc()
        self._publish(snap)
        log.info("policies reloaded: generation %d, %d policies", snap.generation, len(snap.admission.policies))
        return True

    def reload_certificate_if_changed(self) -> bool | None:
        """Loads the certificate and key again when either file changed: True reloaded (the
        connections made from now on get it), False they do not load (the last good pair stays
        in use), None nothing changed."""
        if self.tls_cert is None or self.tls_key is None:
            return None  # made by the webhook: its own timer replaces it
        fingerprint = _fingerprint([self.tls_cert, self.tls_key])
        if fingerprint == self._tls_fingerprint:
            return None
        self._tls_fingerprint = fingerprint  # a pair half written is tried again once complete
        try:
            context = load_tls(self.tls_cert, self.tls_key)
        except WebhookSetupError as e:
            self.certificate_reloads["failure"] += 1
            log.warning("TLS certificate reload failed, the last good certificate stays in use: %s", e)
            return False
        self.ssl_context = context
        self.certificate_reloads["success"] += 1
        log.info("TLS certificate reloaded from %s", self.tls_cert)
        return True

    def _use_certificate(self, context: ssl.SSLContext) -> None:
        self.ssl_context = context
        self.certificate_reloads["success"] += 1

    def _watch(self) -> None:
        while not self._stop.wait(self.reload_interval):
            try:
                self.reload_certificate_if_changed()
                self.reload_if_changed()
            except Exception:  # pragma: no cover - the watcher never dies
                log.exception("policy watcher error")

    # --- lifecycle ---

    def start(self) -> None:
        """Serves and watches in background threads (returns at once)."""
        self.server.start()
        if self.certificates is not None:
            self.certificates.start()
        t = threading.Thread(target=self._watch, name="admission-reload", daemon=True)
        t.start()
        self._threads.append(t)

    def serve_forever(self) -> None:
        """Serves until stop() (or KeyboardInterrupt) in background threads; this one waits."""
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self.certificates is not None:
            self.certificates.stop()
        self.server.stop()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> AdmissionWebhook:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- decisions ---

    def review(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """The HTTP status and AdmissionReview answer for one request body."""
        try:
            review = decode_review(body)
        except (ValueError, RecursionError) as e:
            self.metrics.requests.labels("invalid").inc()
            return 400, error_review("", 400, f"malformed AdmissionReview: invalid JSON: {e}")
        uid = ""
        if isinstance(review, dict) and isinstance(review.get("request"), dict):
            raw_uid = review["request"].get("uid")
            uid = raw_uid if isinstance(raw_uid, str) else ""
        problem = _review_problem(review)
        if problem:
            self.metrics.requests.labels("invalid").inc()
            return 400, error_review(uid, 400, problem)
        try:
            response = self._decide(review["request"])
        except Exception as e:  # an internal error: the configured failure policy answers
            log.exception("internal error deciding request %s", uid)
            self.metrics.requests.labels("error").inc()
            message = f"internal error in the admission webhook: {type(e).__name__}: {e}"
            if self.failure_policy == "Ignore":
                return 200, review_answer(uid, True, 500, message + " (failure policy Ignore: admitted)", [message])
            return 200, review_answer(uid, False, 500, message + " (failure policy Fail: rejected)")
        response["uid"] = uid
        self.metrics.requests.labels("allowed" if response["allowed"] else "denied").inc()
        return 200, {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}

    def _decide(self, request: dict[str, Any]) -> dict[str, Any]:
        operation = request.get("operation")
        obj = request.get("object")
        sub = request.get("subResource") or ""
        if operation in ("DELETE", "CONNECT") or obj is None:
            return _answer(True, 200, f"{operation or 'request'} without an object: nothing to judge")
        if sub not in JUDGED_SUBRESOURCES:
            return _answer(True, 200, f"subresource {sub!r} carries no new images: nothing to judge")
        if not isinstance(obj, dict) or not is_pod_creating(str(obj.get("apiVersion")), str(obj.get("kind"))):
            kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
            return _answer(True, 200, f"{kind} is not a pod-creating resource: nothing to judge")
        namespace = request.get("namespace")
        try:
            resource = resource_from_object(obj, namespace if isinstance(namespace, str) and namespace else None)
        except ResourceError as e:
            return _answer(False, 400, f"cannot judge this resource: {e}")
        snap = self._snapshot
        decision = self.evaluator(snap.admission, resource, snap.scans, self.clock(), self.trust_annotations)
        for c in decision.containers:
            self.metrics.images.labels(c.decision).inc()
        code = 200 if decision.allowed else 403
        return _answer(decision.allowed, code, decision.message(), list(decision.warnings))

    # --- HTTP ---

    def _answer(self, request: Request) -> Response:
        """One request, on a worker thread of the server."""
        if request.method == "GET":
            if request.path in ("/healthz", "/readyz", "/livez"):
                return Response(200, b"ok\n")
            if request.path == "/metrics":
                return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
            return Response(404, b"not found\n")
        if request.method != "POST":
            return Response(405, b"method not allowed\n", headers=[("Allow", "GET, POST")])
        if request.path not in ("/", "/validate"):
            return Response(404, b"not found\n", close=True)
        started = time.perf_counter()
        status, answer = self.review(request.body)
        self.metrics.latency.observe(time.perf_counter() - started)
        return Response(status, json.dumps(answer).encode(), "application/json")


def _review_problem(review: Any) -> str | None:
    if not isinstance(review, dict):
        return "malformed AdmissionReview: the body must be a JSON object"
    if review.get("apiVersion") != REVIEW_API_VERSION:
        return (
            f"unsupported AdmissionReview apiVersion {review.get('apiVersion')!r}: this webhook speaks "
            f'{REVIEW_API_VERSION} (set admissionReviewVersions: ["v1"])'
        )
    if review.get("kind") != REVIEW_KIND:
        return f"malformed AdmissionReview: kind is {review.get('kind')!r}, want {REVIEW_KIND!r}"
    request = review.get("request")
    if not isinstance(request, dict):
        return "malformed AdmissionReview: request is missing or not an object"
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        return "malformed AdmissionReview: request.uid is required"
    return None


def _answer(allowed: bool, code: int, message: str, warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"allowed": allowed, "status": {"code": code, "message": message}}
    if not allowed:
        response["status"]["reason"] = "Forbidden" if code == 403 else "BadRequest" if code == 400 else "InternalError"
    if warnings:
        response["warnings"] = warnings
    return response


def review_answer(
    uid: str, allowed: bool, code: int, message: str, warnings: list[str] | None = None
) -> dict[str, Any]:
    response = _answer(allowed, code, message, warnings)
    response["uid"] = uid
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}


def error_review(uid: str, code: int, message: str) -> dict[str, Any]:
    answer = review_answer(uid, False, code, message)
    answer["response"]["status"]["reason"] = HTTPStatus(code).phrase.replace(" ", "")
    return answer


def _error_response(status: int, message: str) -> Response:
    """The server's own refusals (411, 413, 431, 503, 400) as AdmissionReview errors."""
    return Response(status, json.dumps(error_review("", status, message)).encode(), "application/json")


def load_tls(cert: str, key: str) -> ssl.SSLContext:
    """A server context with the certificate chain and key; WebhookSetupError naming the file
    that does not load, and why."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # An encrypted key would make OpenSSL ask for its passphrase on the terminal and wait:
        # no passphrase is given, so it is an error at once.
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _EncryptedKey:
        raise WebhookSetupError(
            f"--tls-key {key}: an encrypted private key (it needs a passphrase); give the key unencrypted"
        ) from None
    except OSError as e:  # ssl.SSLError is one: "[SSL] PEM lib (_ssl.c:3905)" names neither file
        raise WebhookSetupError(tls_problem(cert, key, e)) from e
    return context


class WebhookSetupError(OSError):
    """The webhook cannot start: a certificate or key it cannot load, an address it cannot
    listen on. The message names the file or the address."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class _EncryptedKey(Exception):
    pass


def _no_passphrase() -> bytes:
    """``load_cert_chain``'s password callback: called only for an encrypted key."""
    raise _EncryptedKey


def _address_text(listen: tuple[str, int]) -> str:
    host, port = listen
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tls_problem(cert: str, key: str, error: OSError) -> str:
    """Which of the certificate and the key cannot be used, and why, in one line."""
    reason = getattr(error, "reason", None)
    if not isinstance(error, ssl.SSLError):
        where = error.filename if error.filename is not None else f"{cert} / {key}"
        return f"TLS certificate or key {where}: cannot read: {error.strerror or error}"

    def holds(path: str, marker: bytes) -> bool | None:
        try:
            with open(path, "rb") as f:
                return marker in f.read(1 << 20)
        except OSError:
            return None

    if not holds(cert, b"-----BEGIN CERTIFICATE-----"):
        return f"--tls-cert {cert}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)"
    if not holds(key, b"PRIVATE KEY-----"):
        return f"--tls-key {key}: no PEM private key in it (-----BEGIN PRIVATE KEY-----)"
    if reason == "KEY_VALUES_MISMATCH":
        return f"--tls-key {key} is not the key of the certificate in --tls-cert {cert}"
    what = reason or " ".join(str(error).split())
    try:  # the certificates alone, without the key: which of the two is broken?
        with open(cert, encoding="ascii", errors="replace") as f:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=f.read(1 << 20))
    except (ssl.SSLError, ValueError):
        return f"--tls-cert {cert}: not a valid PEM certificate ({what})"
    except OSError:
        pass
    else:
        return f"--tls-key {key}: not a valid PEM private key for --tls-cert {cert}, or an encrypted one ({what})"
    return f"--tls-cert {cert} / --tls-key {key}: cannot load the certificate and key: {what}"


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` (all addresses)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{text!r}: port must be 0-65535")
    return host, number
