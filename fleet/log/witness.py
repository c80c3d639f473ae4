"""C2SP tlog-witness ``add-checkpoint``: the request format and the witness's decision.

Pure: :func:`decide` takes the request body, the logs the witness knows, the witness's
state for the checkpoint's origin, its key and the time, and returns an :class:`Outcome`
(HTTP status, content type, body, and the new state to persist atomically before
answering, or ``None``). The HTTP server and the state file are the caller
(``anchors/witness_server.py``).

Request body (``POST <prefix>/add-checkpoint``)::

    old <size>\\n                  the size the client believes the witness last cosigned
    <base64 hash>\\n ...           0..63 consistency proof lines, old size -> checkpoint size
    \\n                            an empty line
    <signed checkpoint note>       origin, size, root, blank line, signature lines

Answers, in the order checked:

=====  ===============================================================================
400    the body does not parse, or ``old`` > the checkpoint's size
404    the checkpoint's origin is not a log this witness knows
403    no signature verifies under the log's keys (unknown key or bad signature)
409    ``old`` is not the size the witness last cosigned (body: that size, newline,
       ``Content-Type: text/x.tlog.size``), or the same size with another root
422    the consistency proof from the witness's root does not verify (or is not empty
       when ``old`` is 0)
200    cosignature line(s) of the checkpoint by the witness's key; the new state is the
       checkpoint
=====  ===============================================================================
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleet_ledger.fleet.log.checkpoint import Checkpoint, parse_checkpoint
from fleet_ledger.fleet.log.cosignature import WitnessSigner
from fleet_ledger.fleet.log.log_errors import LogError, NoteError, ProofError
from fleet_ledger.fleet.log.merkle import verify_consistency
from fleet_ledger.fleet.log.note import Verifier, open_note, parse_note
from fleet_ledger.fleet.log.tlog_proof import hash_lines

__all__ = [
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "AddCheckpoint",
    "MalformedRequest",
    "Outcome",
    "WitnessState",
    "decide",
    "format_request",
    "parse_request",
]


MAX_PROOF_LINES = 63
SIZE_CONTENT_TYPE = "text/x.tlog.size"
_OLD = re.compile(r"old (0|[1-9][0-9]{0,19})\Z")


class MalformedRequest(LogError):
    """An add-checkpoint body that does not follow the tlog-witness format."""


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed add-checkpoint request."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str


def format_request(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    """The add-checkpoint request body."""
    lines = [f"old {old_size}\n", *(base64.b64encode(h).decode() + "\n" for h in proof), "\n"]
    return ("".join(lines) + note).encode()


def parse_request(body: bytes) -> AddCheckpoint:
    """Parse an add-checkpoint body, or :class:`MalformedRequest`."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest("request body is not UTF-8") from exc
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise MalformedRequest("request has no empty line before the checkpoint")
    lines = head.split("\n")
    match = _OLD.match(lines[0])
    if match is None:
        raise MalformedRequest(f"first line {lines[0][:30]!r} is not 'old <size>'")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise MalformedRequest(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = hash_lines(lines[1:], "a consistency proof line", MalformedRequest)
    return AddCheckpoint(int(match.group(1)), tuple(proof), note)


@dataclass(frozen=True)
class WitnessState:
    """What the witness keeps per origin: the last checkpoint it cosigned."""

    size: int
    root: bytes
    note: str


@dataclass(frozen=True)
class Outcome:
    """The witness's answer and, on success, the state to persist before sending it."""

    status: int
    content_type: str
    body: bytes
    new_state: WitnessState | None = None
    origin: str | None = None


def _text(status: int, message: str) -> Outcome:
    return Outcome(status, "text/plain; charset=utf-8", (message + "\n").encode())


def _conflict(size: int, origin: str) -> Outcome:
    return Outcome(409, SIZE_CONTENT_TYPE, f"{size}\n".encode(), origin=origin)


def decide(
    body: bytes,
    logs: Mapping[str, Sequence[Verifier]],
    state: Mapping[str, WitnessState],
    signer: WitnessSigner,
    now: int,
) -> Outcome:
    """Decide one add-checkpoint request (see the module docstring for the table)."""
    try:
        request = parse_request(body)
        text, _ = parse_note(request.note)
        checkpoint: Checkpoint = parse_checkpoint(text)
    except LogError as exc:
        return _text(400, f"{exc.rule}: {exc}")
    origin = checkpoint.origin
    verifiers = logs.get(origin)
    if not verifiers:
        return _text(404, f"unknown log origin {origin!r}")
    try:
        open_note(request.note, verifiers)
    except NoteError as exc:
        return _text(403, f"{exc.rule}: {exc}")
    if request.old_size > checkpoint.size:
        return _text(400, f"old size {request.old_size} exceeds checkpoint size {checkpoint.size}")
    held = state.get(origin)
    held_size = 0 if held is None else held.size
    if request.old_size != held_size:
        return _conflict(held_size, origin)
    if held is not None and held.size == checkpoint.size:
        if held.root != checkpoint.root:
            return _conflict(held_size, origin)
    elif held is None:
        if request.proof:
            return _text(422, "the consistency proof must be empty when old size is 0")
    else:
        try:
            verify_consistency(held.size, checkpoint.size, request.proof, held.root,
                               checkpoint.root)
        except ProofError as exc:
            return Outcome(422, "text/plain; charset=utf-8", f"{exc.rule}: {exc}\n".encode(),
                           origin=origin)
    cosig = signer.cosign(text, now)
    new_state = WitnessState(checkpoint.size, checkpoint.root, request.note)
    return Outcome(200, "text/plain; charset=utf-8", cosig.line().encode(), new_state, origin)
