"""Submitting checkpoints to C2SP tlog-witnesses (the ledger side of ``add-checkpoint``)."""

from __future__ import annotations

import http.client
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

from fleet.witness import SIZE_CONTENT_TYPE, format_request


class ProofSource(Protocol):
    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]: ...


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
