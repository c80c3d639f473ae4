"""``fleet runtime serve --http --tls-cert --tls-key``: HTTPS only, under a certificate a
client can pin; without the options the token is accepted over plain HTTP (the wire sees
it), with them a plain-HTTP request gets no answer and an unpinned client refuses the
server. The certificate is self-signed, made here (``cryptography``, which the RFC 3161
client already installs)."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import signal
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fleet_ledger.plumbing.natsd import NatsServer

from pipeline_helpers import FLEET_BIN

pytestmark = pytest.mark.timeout(120)

TOKEN = "tls-test-token-0123456789"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A P-256 key and a self-signed certificate for 127.0.0.1, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleet-runtime-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@contextmanager
def serving(tmp_path: Path, url: str, *tls: str) -> Iterator[str]:
    """``fleet runtime serve`` on a free loopback port; yields the address it prints."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    proc = subprocess.Popen([FLEET_BIN, "runtime", "serve", "--http", "127.0.0.1:0",
                             "--token-file", str(tmp_path / "token"), *tls, "--data",
                             str(tmp_path / "A"), "--name", "A", "--nats", url],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving "), proc.stderr.read()  # type: ignore[union-attr]
        yield line.split()[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def status(address: str, context: ssl.SSLContext | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    """GET /runs/nobody with the token over HTTP (``context`` None) or HTTPS."""
    host, port = address.split("://")[1].rsplit(":", 1)
    conn: http.client.HTTPConnection = (
        http.client.HTTPConnection(host, int(port), timeout=30) if context is None
        else http.client.HTTPSConnection(host, int(port), timeout=30, context=context))
    try:
        conn.request("GET", "/runs/nobody", headers={"Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_without_tls_the_token_travels_in_plain_http(nats_server: NatsServer,
                                                      tmp_path: Path):
    """Without the defence: the server answers a plain-HTTP request carrying the token
    (anyone on the path reads it)."""
    with serving(tmp_path, nats_server.url) as address:
        assert address.startswith("http://")
        code, doc = status(address)
        assert code == 404 and doc["error"], doc


def test_with_tls_only_https_under_the_pinned_certificate_is_answered(
        nats_server: NatsServer, tmp_path: Path):
    """With --tls-cert/--tls-key: a client pinning the certificate gets its answer over
    HTTPS; the same request in plain HTTP gets no HTTP answer; a client trusting only the
    system's roots refuses the server."""
    cert, key = self_signed(tmp_path)
    with serving(tmp_path, nats_server.url, "--tls-cert", str(cert), "--tls-key",
                 str(key)) as address:
        assert address.startswith("https://")
        pinned = ssl.create_default_context(cafile=str(cert))
        code, doc = status(address, pinned)
        assert code == 404 and doc["error"], doc
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            status("http://" + address.split("://")[1])
        with pytest.raises(ssl.SSLCertVerificationError):
            status(address, ssl.create_default_context())


def test_a_certificate_without_its_key_or_unreadable_is_one_readable_line(tmp_path: Path):
    """--tls-cert alone, or files that are not PEM: exit non-zero with one line, no
    traceback."""
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate\n")
    for extra in (["--tls-cert", str(cert)], ["--tls-cert", str(cert), "--tls-key", str(cert)]):
        out = subprocess.run([FLEET_BIN, "runtime", "serve", "--http", "127.0.0.1:0",
                              *extra, "--data", str(tmp_path / "A"), "--nats",
                              "nats://127.0.0.1:1"], capture_output=True, text=True,
                             env={"FLEET_RUNTIME_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
                             timeout=60, stdin=subprocess.DEVNULL, check=False)
        assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
        assert "--tls" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
