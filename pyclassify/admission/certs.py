"""Serving certificates the admission webhook makes, keeps and rotates itself (``admission-webhook
--tls-self-signed``), so that it can be deployed without cert-manager.

The trust bundle (``ca.crt``, and the ``caBundle`` of every webhook in the
ValidatingWebhookConfiguration named) holds the *current* authority, which signed the certificate
being served, the *next* one, made a full rotation period before it signs anything, and the
*previous* one. When a rotation starts serving a certificate of the next authority, every API
server has trusted that authority for a period already, so no call fails while the new bundle is
on its way; and a replica that has not adopted the rotation yet still serves a certificate of the
previous authority, which the new bundle still holds. A rotation makes a new next authority and
drops the one before the previous.

Timing, for a rotation period P: a serving certificate is valid 2P from its issue and replaced
after P; an authority is valid 4P (published for P, signing for P, trusted by certificates it
signed for 2P more). Every certificate is dated a few minutes back for clocks a little behind.

Where they are kept: a Secret (``--tls-secret NAMESPACE/NAME``: ``tls.crt``, ``tls.key``,
``ca.crt``, and the next authority's ``next-ca.crt``/``next-ca.key``), which replicas and restarts
share: a replica adopts what the Secret holds while it is valid, and a rotation is written with the
Secret's resourceVersion so that of two replicas rotating at once, one wins and the other adopts
its result. Without a Secret they are kept in memory only (one replica; a restart makes new ones).

A background timer checks every ``check_interval`` seconds (a quarter of the period, at most a
minute): rotates when due (or when the names wanted changed), adopts a newer Secret, and puts the
bundle back into the webhook configuration when it differs (a re-applied manifest with an empty
``caBundle``). Each new certificate goes to ``on_change`` as an ``ssl.SSLContext``: the
connections made from then on get it, the open ones keep theirs.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger("pyclassify.admission.certs")

#: How far back every certificate is dated (a node whose clock is a little behind still accepts it).
BACKDATE = dt.timedelta(minutes=5)
MIN_ROTATION_PERIOD = 1.0
MAX_CHECK_INTERVAL = 60.0
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds of ``90s``, ``15m``, ``720h``, ``30d`` (or a bare number of seconds)."""
    value = text.strip()
    unit = value[-1:] if value[-1:] in _UNITS else "s"
    number = value[:-1] if value[-1:] in _UNITS else value
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (like 90s, 15m, 720h, 30d)") from None
    if not seconds > 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    return seconds


def service_names(namespace: str, name: str) -> list[str]:
    """The DNS names the API server may call a Service by."""
    return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", name]


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issued(cert: x509.Certificate) -> dt.datetime:
    return cert.not_valid_before_utc + BACKDATE


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def make(cls, now: dt.datetime, validity: dt.timedelta) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        # A name of its own: the bundle holds two authorities, a certificate names its issuer.
        unique = f"{x509.random_serial_number():x}"[:16]
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"pyclassify-admission-ca-{unique}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)


def _san(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


@dataclass(frozen=True)
class Certificates:
    """The serving certificate and key, the authority that signed it, the next authority, and
    the one that signed the certificate before."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    current: x509.Certificate
    next: Authority
    previous: x509.Certificate | None = None

    @classmethod
    def make(
        cls,
        names: Sequence[str],
        now: dt.datetime,
        period: dt.timedelta,
        signer: Authority | None = None,
        previous: x509.Certificate | None = None,
    ) -> Certificates:
        """A serving certificate for ``names`` (DNS names or IP addresses) signed by ``signer``
        (a new authority if none), and a new next authority."""
        if signer is None:
            signer = Authority.make(now, 4 * period)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(signer.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + 2 * period, signer.cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(_san(names)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.key.public_key()), critical=False)
            .sign(signer.key, hashes.SHA256())
        )
        return cls(cert, key, signer.cert, Authority.make(now, 4 * period), previous)

    def rotated(self, names: Sequence[str], now: dt.datetime, period: dt.timedelta) -> Certificates:
        """The next certificate: signed by the next authority, which becomes the current one."""
        return Certificates.make(names, now, period, self.next, previous=self.current)

    @property
    def bundle(self) -> bytes:
        """What clients trust: the previous (if any), the current and the next authority."""
        return b"".join(_pem(c) for c in (self.previous, self.current, self.next.cert) if c is not None)

    def due(self, names: Sequence[str], now: dt.datetime, period: dt.timedelta) -> str | None:
        """Why these must be replaced now, or None."""
        try:
            have = self.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return "the certificate has no subject alternative names"
        if set(have) != set(_san(names)):
            return "the names wanted changed"
        if now >= _issued(self.cert) + period:
            return "the rotation period passed"
        if now >= self.cert.not_valid_after_utc or now >= self.next.cert.not_valid_after_utc - 2 * period:
            return "a certificate is about to expire"
        return None

    def to_secret_data(self) -> dict[str, str]:
        raw = {
            "tls.crt": _pem(self.cert),
            "tls.key": _pem_key(self.key),
            "ca.crt": self.bundle,
            "next-ca.crt": _pem(self.next.cert),
            "next-ca.key": _pem_key(self.next.key),
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret_data(cls, data: dict[str, str]) -> Certificates:
        """Raises ValueError (or KeyError) for what is not a set this module wrote."""
        raw = {k: base64.b64decode(v) for k, v in data.items()}
        cert = x509.load_pem_x509_certificate(raw["tls.crt"])
        key = serialization.load_pem_private_key(raw["tls.key"], None)
        next_cert = x509.load_pem_x509_certificate(raw["next-ca.crt"])
        next_key = serialization.load_pem_private_key(raw["next-ca.key"], None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(next_key, ec.EllipticCurvePrivateKey):
            raise ValueError("keys must be EC keys")
        bundle = x509.load_pem_x509_certificates(raw["ca.crt"])
        current = next((c for c in bundle if c.subject == cert.issuer), None)
        previous = next((c for c in bundle if c.subject not in (cert.issuer, next_cert.subject)), None)
        if current is None:
            raise ValueError("ca.crt does not hold the authority of tls.crt")
        try:
            cert.verify_directly_issued_by(current)
        except InvalidSignature:
            raise ValueError("tls.crt is not signed by its authority in ca.crt") from None
        if key.public_key() != cert.public_key() or next_key.public_key() != next_cert.public_key():
            raise ValueError("a key is not the key of its certificate")
        return cls(cert, key, current, Authority(next_cert, next_key), previous)

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only: a private directory, removed at once.
        directory = tempfile.mkdtemp(prefix="pyclassify-tls-")
        try:
            cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
            with open(cert, "wb") as f:
                f.write(_pem(self.cert))
            with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(_pem_key(self.key))
            context.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return context


class CertificateError(RuntimeError):
    """The Secret or the webhook configuration cannot be read or written (the message says which)."""


class SelfSignedCertificates:
    """Makes, keeps, publishes and rotates the webhook's serving certificate (see the module)."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        rotation_period: float,
        client: Any = None,
        secret: tuple[str, str] | None = None,
        webhook_configuration: str | None = None,
        on_change: Callable[[ssl.SSLContext], None] | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        if not names:
            raise ValueError("the serving certificate needs at least one DNS name or IP address")
        if (secret or webhook_configuration) and client is None:
            raise ValueError("a Secret or a webhook configuration needs a cluster (--kubeconfig or --in-cluster)")
        self.names = list(names)
        self.period = dt.timedelta(seconds=max(rotation_period, MIN_ROTATION_PERIOD))
        self.check_interval = min(self.period.total_seconds() / 4, MAX_CHECK_INTERVAL)
        self.client = client
        self.secret = secret
        self.webhook_configuration = webhook_configuration
        self.on_change = on_change
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.certificates: Certificates | None = None
        self.counters = {"rotations": 0, "adopted": 0, "bundle_updates": 0, "errors": 0}
        self._said_missing = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def _secret_path(self) -> str:
        assert self.secret is not None
        namespace, name = self.secret
        return f"/api/v1/namespaces/{namespace}/secrets/{name}"

    # --- the Secret ---

    def _read_secret(self) -> tuple[Certificates | None, dict[str, Any] | None]:
        from pyclassify.kube.client import ApiException

        try:
            obj = self.client.request("GET", self._secret_path)
        except ApiException as e:
            if e.status == 404:
                return None, None
            raise CertificateError(f"cannot read Secret {'/'.join(self.secret or ())}: {_api_error(e)}") from e
        try:
            return Certificates.from_secret_data(obj.get("data") or {}), obj
        except (ValueError, KeyError, TypeError) as e:
            if obj.get("data"):
                log.warning(
                    "Secret %s holds no usable certificates (%s): new ones replace them", "/".join(self.secret or ()), e
                )
            return None, obj

    def _write_secret(self, certs: Certificates, current: dict[str, Any] | None) -> bool:
        """True written; False another replica wrote first (read it again)."""
        from pyclassify.kube.client import ApiException

        assert self.secret is not None
        namespace, name = self.secret
        where = f"Secret {namespace}/{name}"
        try:
            if current is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": namespace},
                    "type": "Opaque",
                    "data": certs.to_secret_data(),
                }
                self.client.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
            else:
                body = dict(current)
                body["data"] = certs.to_secret_data()
                self.client.request("PUT", self._secret_path, body=body)
        except ApiException as e:
            if e.status == 409:  # a conflict, or created meanwhile
                return False
            raise CertificateError(f"cannot write {where}: {_api_error(e)}") from e
        return True

    # --- the webhook configuration ---

    def publish_bundle(self) -> bool:
        """Puts the trust bundle into every webhook of the configuration; True when it changed."""
        from pyclassify.kube.client import ApiException

        if self.webhook_configuration is None or self.certificates is None:
            return False
        bundle = base64.b64encode(self.certificates.bundle).decode()
        path = f"{WEBHOOK_CONFIGURATIONS}/{self.webhook_configuration}"
        for _ in range(5):
            try:
                vwc = self.client.request("GET", path)
            except ApiException as e:
                if e.status == 404:  # applied after the Deployment started: the next check puts it in
                    if not self._said_missing:
                        log.warning(
                            "ValidatingWebhookConfiguration %s not found: its caBundle is set once it exists",
                            self.webhook_configuration,
                        )
                        self._said_missing = True
                    return False
                raise CertificateError(
                    f"cannot read ValidatingWebhookConfiguration {self.webhook_configuration}: {_api_error(e)}"
                ) from e
            self._said_missing = False
            hooks = vwc.get("webhooks") or []
            if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
                return False
            for h in hooks:
                h.setdefault("clientConfig", {})["caBundle"] = bundle
            try:
                self.client.request("PUT", path, body=vwc)  # with its resourceVersion: a conflict reads again
            except ApiException as e:
                if e.status == 409:
                    continue
                raise CertificateError(
                    f"cannot update ValidatingWebhookConfiguration {self.webhook_configuration}: {_api_error(e)}"
                ) from e
            self.counters["bundle_updates"] += 1
            log.info("caBundle of ValidatingWebhookConfiguration %s updated", self.webhook_configuration)
            return True
        raise CertificateError(f"ValidatingWebhookConfiguration {self.webhook_configuration}: conflicts, try again")

    # --- rotation ---

    def sync(self, force: bool = False) -> bool:
        """One check: adopt, make or rotate, then publish the bundle. True when the served
        certificate changed. Raises CertificateError when the cluster cannot be read or written."""
        with self._lock:
            changed = self._sync(force)
            self.publish_bundle()
            return changed

    def _sync(self, force: bool) -> bool:
        for _ in range(5):
            now = self.clock()
            stored, obj = self._read_secret() if self.secret is not None else (self.certificates, None)
            why = "forced" if force else "none yet" if stored is None else stored.due(self.names, now, self.period)
            if why is None:
                assert stored is not None
                return self._use(stored, adopted=True)
            if stored is None:
                new = Certificates.make(self.names, now, self.period)
            else:
                new = stored.rotated(self.names, now, self.period)
            if self.secret is not None and not self._write_secret(new, obj):
                force = False  # another replica rotated: adopt its result
                continue
            self.counters["rotations"] += 1
            log.info(
                "serving certificate %s (%s): valid until %s",
                "made" if stored is None else "rotated",
                why,
                new.cert.not_valid_after_utc.isoformat(),
            )
            return self._use(new, adopted=False)
        raise CertificateError(f"Secret {'/'.join(self.secret or ())}: conflicts, try again")

    def _use(self, certs: Certificates, adopted: bool) -> bool:
        """Serves ``certs`` from now on (True), unless they are the ones served already (False)."""
        if self.certificates is not None and certs.cert == self.certificates.cert:
            return False
        context = certs.ssl_context()
        self.certificates = certs
        if adopted:
            self.counters["adopted"] += 1
            log.info("serving certificate adopted from the Secret: valid until %s", certs.cert.not_valid_after_utc)
        if self.on_change is not None:
            self.on_change(context)
        return True

    def ssl_context(self) -> ssl.SSLContext:
        assert self.certificates is not None, "sync() first"
        return self.certificates.ssl_context()

    def _run(self) -> None:
        while not self._stop.wait(self.check_interval):
            try:
                self.sync()
            except CertificateError as e:
                self.counters["errors"] += 1
                log.warning("certificates: %s (the current certificate stays in use)", e)
            except Exception:  # pragma: no cover - the timer never dies
                self.counters["errors"] += 1
                log.exception("certificate timer error")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="admission-certificates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _api_error(e: Any) -> str:
    status = getattr(e, "status", None)
    reason = getattr(e, "reason", "")
    hint = " (the service account needs get and update on it)" if status == 403 else ""
    return f"HTTP {status} {reason}{hint}"
