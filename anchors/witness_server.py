"""``fleet witness serve``: a C2SP tlog-witness HTTP endpoint around
:func:`fleet.log.witness.decide`.

The witness knows the logs' verifier keys (the key name is the log's origin) and keeps,
per origin, the last checkpoint it cosigned in one JSON state file. Checking a request
against that state and persisting the new state happen under one lock, and the state file
is replaced atomically (write a temporary file, fsync, rename over, fsync the folder)
before the cosignature is sent, so a crash never leaves a witness that answered for a
state it did not keep, and two racing requests can never roll the witness back.

Endpoint: ``POST <prefix>/add-checkpoint``. Only loopback or operator-chosen addresses;
there is no authentication beyond the checkpoint's signature (as the spec says).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.log.cosignature import WitnessSigner
from fleet_ledger.fleet.log.note import Verifier
from fleet_ledger.fleet.log.witness import WitnessState, decide
from fleet_ledger.plumbing.files import write_atomically

log = logging.getLogger(__name__)

STATE_FILE = "witness-state.json"
MAX_BODY = 64 * 1024


class WitnessStateFile:
    """The witness's per-origin state in one atomically replaced JSON file."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / STATE_FILE
        self.states: dict[str, WitnessState] = {}
        if self.path.exists():
            doc = json.loads(self.path.read_text())
            self.states = {
                origin: WitnessState(v["size"], base64.b64decode(v["root"]), v["note"])
                for origin, v in doc["logs"].items()
            }

    def save(self, origin: str, state: WitnessState) -> None:
        states = {**self.states, origin: state}
        doc = {"logs": {o: {"size": s.size, "root": base64.b64encode(s.root).decode(),
                            "note": s.note} for o, s in sorted(states.items())}}
        write_atomically(self.path, json.dumps(doc, indent=1).encode() + b"\n", 0o600)
        self.states = states


class Witness:
    """Decides and persists add-checkpoint requests; thread-safe."""

    def __init__(self, signer: WitnessSigner, logs: Iterable[Verifier], state_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.signer = signer
        self.logs: dict[str, list[Verifier]] = {}
        for verifier in logs:
            self.logs.setdefault(verifier.name, []).append(verifier)
        self.state = WitnessStateFile(state_dir)
        self.clock = clock
        self.lock = threading.Lock()

    def add_checkpoint(self, body: bytes) -> tuple[int, str, bytes]:
        with self.lock:
            outcome = decide(body, self.logs, self.state.states, self.signer, int(self.clock()))
            if outcome.new_state is not None and outcome.origin is not None:
                self.state.save(outcome.origin, outcome.new_state)
        if outcome.status != 200:
            log.warning("add-checkpoint refused %d: %s", outcome.status,
                        outcome.body.decode(errors="replace").strip())
        return outcome.status, outcome.content_type, outcome.body


class _Handler(BaseHTTPRequestHandler):
    server: WitnessHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != self.server.prefix + "/add-checkpoint":
            self._send(404, "text/plain", b"no such endpoint\n")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(411, "text/plain", b"Content-Length required\n")
            return
        if not 0 <= length <= MAX_BODY:
            self._send(413, "text/plain", b"request too large\n")
            return
        body = self.rfile.read(length)
        if self.server.on_request is not None:
            self.server.on_request(body)
        self._send(*self.server.witness.add_checkpoint(body))

    def do_GET(self) -> None:
        self._send(405, "text/plain", b"POST add-checkpoint\n")


class WitnessHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: Witness, prefix: str = "",
                 on_request: Callable[[bytes], None] | None = None) -> None:
        super().__init__(address, _Handler)
        self.witness = witness
        self.prefix = prefix.rstrip("/")
        self.on_request = on_request

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        assert isinstance(host, str)  # an AF_INET address (bytes are AF_UNIX's)
        return f"http://{host}:{port}{self.prefix}"


class RunningWitness:
    """A witness HTTP server on a background thread (tests, embedding); ``close()`` stops it."""

    def __init__(self, witness: Witness, host: str = "127.0.0.1", port: int = 0,
                 on_request: Callable[[bytes], None] | None = None) -> None:
        self.httpd = WitnessHTTPServer((host, port), witness, on_request=on_request)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return self.httpd.url

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self) -> RunningWitness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
