"""Submitting checkpoints to C2SP tlog-witnesses (the ledger side of ``add-checkpoint``)."""

from __future__ import annotations

import asyncio
import http.client
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from fleet_ledger.anchors.base import Anchor, AnchorError, ProofSource, Receipt
from fleet_ledger.fleet.log.cosignature import WitnessKey, parse_signature_lines, parse_witness_key
from fleet_ledger.fleet.log.cosignature import verify_cosignature_lines as verify_lines
from fleet_ledger.fleet.log.log_errors import LogError
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.log.witness import SIZE_CONTENT_TYPE, format_request


@dataclass(frozen=True)
class WitnessReply:
    status: int
    content_type: str
    body: bytes

    def conflict_size(self) -> int | None:
        """The witness's size from a 409 ``text/x.tlog.size`` answer."""
        if self.status != 409 or not self.content_type.startswith(SIZE_CONTENT_TYPE):
            return None
        text = self.body.decode("ascii", errors="replace").strip()
        return int(text) if text.isdigit() else None


def post_add_checkpoint(url: str, body: bytes, timeout: float = 10.0) -> WitnessReply:
    """POST one add-checkpoint body to a witness at ``url`` (its submission prefix)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"witness URL {url!r} is not http(s)://host[:port][/prefix]")
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else \
        http.client.HTTPConnection
    conn = conn_type(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path.rstrip("/") + "/add-checkpoint", body=body,
                     headers={"Content-Type": "text/plain; charset=utf-8"})
        resp = conn.getresponse()
        return WitnessReply(resp.status, resp.getheader("Content-Type", ""), resp.read())
    finally:
        conn.close()


def submit(url: str, note: str, size: int, known_size: int, proofs: ProofSource,
           timeout: float = 10.0) -> tuple[WitnessReply, int]:
    """Submit ``note`` (tree ``size``) claiming the witness holds ``known_size``; on a 409
    with a smaller size, retry once from that size. Returns the last reply and the size the
    witness is now believed to hold."""
    reply = WitnessReply(0, "", b"")
    for _ in range(2):
        old = known_size if known_size <= size else 0
        proof = [] if old in (0, size) else proofs.consistency_proof(old, size)
        reply = post_add_checkpoint(url, format_request(old, proof, note), timeout)
        if reply.status == 200:
            return reply, size
        held = reply.conflict_size()
        if held is None or held == known_size or held > size:
            return reply, known_size if held is None else held
        known_size = held
    return reply, known_size


def load_witness_key(value: str) -> WitnessKey:
    """A witness verifier key from a file, or the key text itself."""
    path = Path(value)
    text = path.read_text() if "+" not in value or path.exists() else value
    return parse_witness_key(text)


class WitnessAnchor(Anchor):
    """Submits each checkpoint to one witness; the receipt is its verified cosignature."""

    kind = "witness"

    def __init__(self, name: str, url: str, vkey: str, timeout: float = 10.0) -> None:
        super().__init__(name)
        self.url = url
        self.key = load_witness_key(vkey)
        self.timeout = timeout
        self.known_size = 0

    async def anchor(self, note: str, size: int, proofs: ProofSource) -> Receipt:
        try:
            reply, self.known_size = await asyncio.to_thread(
                submit, self.url, note, size, self.known_size, proofs, self.timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise AnchorError(f"witness {self.url} unreachable: {exc}") from exc
        if reply.status != 200:
            detail = reply.body.decode(errors="replace").strip()[:200]
            raise AnchorError(f"witness {self.url} answered {reply.status}: {detail}")
        try:
            body = parse_note(note)[0]
            found = verify_lines(body, parse_signature_lines(reply.body.decode()), [self.key])
        except (LogError, UnicodeDecodeError) as exc:
            raise AnchorError(f"witness {self.url} sent a bad cosignature: {exc}") from exc
        if not found:
            raise AnchorError(f"witness {self.url} sent no cosignature by {self.key.text()}")
        return Receipt(self.name, self.kind, size, "".join(c.signature.line() for c in found))
