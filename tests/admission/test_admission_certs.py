"""The webhook's own certificates (``pyclassify.admission.certs``, ``--tls-self-signed``): a client
that trusts the bundle published before a rotation still reaches the webhook after it, over real
TLS; a bundle two rotations old no longer does; what is kept round-trips; and the command line
refuses combinations that cannot work. (Against a real API server, with a Secret and a webhook
configuration: tests/kube/test_webhook_deploy.py.)"""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509

from pyclassify.admission.certs import Certificates, SelfSignedCertificates, parse_duration, service_names
from pyclassify.admission.webhook import AdmissionWebhook
from pyclassify.cli import main
from tests.admission.test_admission_webhook import EXAMPLES, resource, review_of

NAMES = ["127.0.0.1", *service_names("ns", "hook")]


def handshake(port: int, bundle: bytes, host: str = "127.0.0.1") -> str:
    """POSTs a review over a new connection trusting only ``bundle``; the answer's first line."""
    context = ssl.create_default_context(cadata=bundle.decode())
    body = json.dumps(review_of(resource("pod-pass.yaml"))).encode()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as s,
        context.wrap_socket(s, server_hostname=host) as t,
    ):
        t.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := t.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


def test_a_client_with_the_bundle_from_before_a_rotation_still_reaches_the_webhook() -> None:
    certs = SelfSignedCertificates(NAMES, rotation_period=3600)
    hook = AdmissionWebhook(
        [str(EXAMPLES / "policies")],
        certificates=certs,
        listen=("127.0.0.1", 0),
        scan_paths=[str(EXAMPLES / "scans.yaml")],
    )
    with hook:
        port = hook.address[1]
        assert certs.certificates is not None
        before = certs.certificates.bundle
        assert handshake(port, before) == "HTTP/1.1 200 OK"
        assert certs.sync(force=True) is True
        assert certs.certificates.bundle != before
        # served from the authority the old bundle already held
        assert handshake(port, before) == "HTTP/1.1 200 OK"
        assert handshake(port, certs.certificates.bundle) == "HTTP/1.1 200 OK"
        assert certs.sync(force=True) is True
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(port, before)  # two rotations on, that bundle's authorities sign nothing served
        assert handshake(port, certs.certificates.bundle, host="hook.ns.svc") == "HTTP/1.1 200 OK"
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(port, certs.certificates.bundle, host="other.ns.svc")
        assert hook.certificate_reloads["success"] == 2


def test_rotation_falls_due_after_the_period_or_when_the_names_change() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    period = dt.timedelta(hours=1)
    certs = Certificates.make(NAMES, now, period)
    assert certs.due(NAMES, now + period / 2, period) is None
    assert certs.due(NAMES, now + period, period) == "the rotation period passed"
    assert certs.due(NAMES[:2], now, period) == "the names wanted changed"
    later = certs.rotated(NAMES, now + period, period)
    assert later.current == certs.next.cert and later.cert.issuer == certs.next.cert.subject
    assert later.cert.not_valid_after_utc == now + 3 * period
    later.cert.verify_directly_issued_by(certs.next.cert)
    # A replica that has not adopted the rotation yet serves the certificate before it: still trusted.
    trusted = {c.subject: c for c in x509.load_pem_x509_certificates(later.bundle)}
    certs.cert.verify_directly_issued_by(trusted[certs.cert.issuer])
    assert len(trusted) == 3 and certs.previous is None
    assert certs.current.subject not in {
        c.subject for c in x509.load_pem_x509_certificates(later.rotated(NAMES, now + 2 * period, period).bundle)
    }


def test_what_is_kept_in_the_secret_round_trips_and_a_mismatched_key_is_refused() -> None:
    now = dt.datetime.now(dt.UTC)
    certs = Certificates.make(NAMES, now, dt.timedelta(hours=1))
    data = certs.to_secret_data()
    again = Certificates.from_secret_data(data)
    assert again.cert == certs.cert and again.current == certs.current and again.next.cert == certs.next.cert
    rotated = certs.rotated(NAMES, now, dt.timedelta(hours=1))
    assert Certificates.from_secret_data(rotated.to_secret_data()).previous == certs.current
    other = Certificates.make(NAMES, now, dt.timedelta(hours=1)).to_secret_data()
    with pytest.raises(ValueError, match="not the key"):
        Certificates.from_secret_data({**data, "tls.key": other["tls.key"]})
    with pytest.raises(ValueError):
        Certificates.from_secret_data({**data, "ca.crt": other["ca.crt"]})


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("15m") == 900 and parse_duration("720h") == 720 * 3600
    assert parse_duration("30d") == 30 * 86400 and parse_duration("2.5") == 2.5
    for bad in ("", "h", "-1h", "0s", "soon"):
        with pytest.raises(ValueError):
            parse_duration(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-self-signed"], "needs --service or --tls-san"),
        (["--tls-self-signed", "--tls-san", "127.0.0.1", "--tls-secret", "ns/s"], "need --kubeconfig"),
        (["--tls-self-signed", "--service", "hook"], "is not NAMESPACE/NAME"),
        (["--tls-self-signed", "--tls-san", "x", "--tls-rotation-period", "soon"], "is not a duration"),
        (["--service", "ns/hook"], "Missing option '--tls-cert'"),
        (["--tls-cert", "CERT", "--tls-key", "KEY", "--tls-self-signed", "--tls-san", "x"], "not both"),
        (["--tls-cert", "CERT", "--tls-key", "KEY", "--webhook-configuration", "w"], "goes with --tls-self-signed"),
    ],
)
def test_the_command_refuses_certificate_options_that_cannot_work(
    args: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "c").write_text("x")
    args = [str(tmp_path / "c") if a in ("CERT", "KEY") else a for a in args]
    result = CliRunner().invoke(main, ["admission-webhook", str(EXAMPLES / "policies"), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
