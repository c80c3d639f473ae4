"""A real RFC 3161 TSA for tests: a throwaway CA, a TSA certificate (critical timeStamping
EKU) and ``openssl ts -reply`` run per request behind a loopback HTTP server."""

from __future__ import annotations

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_CONFIG = """\
[ tsa ]
default_tsa = tsa_config1

[ tsa_config1 ]
dir = {dir}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.crt
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=30)


def make_ca(folder: Path, name: str = "Fleet Test TSA Root") -> Path:
    """A throwaway EC P-256 CA in ``folder`` (ca.key, ca.crt); returns ca.crt."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    return folder / "ca.crt"


def make_tsa(folder: Path) -> Path:
    """CA + TSA certificate + ``openssl ts`` config in ``folder``; returns the config path."""
    make_ca(folder)
    (folder / "tsa.ext").write_text("basicConstraints=CA:FALSE\n"
                                    "keyUsage=critical,digitalSignature\n"
                                    "extendedKeyUsage=critical,timeStamping\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "tsa.key", "-out", "tsa.csr", "-subj", "/CN=Fleet Test TSA", cwd=folder)
    _openssl("x509", "-req", "-in", "tsa.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "tsa.crt", "-days", "1", "-extfile", "tsa.ext",
             cwd=folder)
    (folder / "serial").write_text("01\n")
    config = folder / "tsa.cnf"
    config.write_text(_CONFIG.format(dir=folder))
    return config


class _Handler(BaseHTTPRequestHandler):
    server: OpenSslTsa

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.append(body)
        with self.server.lock:
            query = self.server.folder / "query.tsq"
            reply = self.server.folder / "reply.tsr"
            query.write_bytes(body)
            result = subprocess.run(
                ["openssl", "ts", "-reply", "-config", str(self.server.config), "-queryfile",
                 str(query), "-out", str(reply)], capture_output=True, timeout=30,
                stdin=subprocess.DEVNULL, check=False)
            data = reply.read_bytes() if result.returncode == 0 else b""
        self.send_response(200 if data else 500)
        self.send_header("Content-Type", "application/timestamp-reply")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class OpenSslTsa(ThreadingHTTPServer):
    """``openssl ts -reply`` behind http://127.0.0.1:<free port>/; ``received`` holds every
    request body. Use as a context manager: it always stops."""

    daemon_threads = True

    def __init__(self, folder: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = folder
        self.config = make_tsa(folder)
        self.ca = folder / "ca.crt"
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def __enter__(self) -> OpenSslTsa:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)
