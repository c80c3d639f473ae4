"""C2SP tlog-checkpoint bodies, and the guard that keeps signed checkpoints consistent.

Body (``c2sp.org/tlog-checkpoint``), the text of a signed note (:mod:`fleet.log.note`)::

    <origin>\\n                 non-empty, e.g. "fleet.example/log"; no control characters
    <tree size>\\n              ASCII decimal, no sign, no leading zero (except "0" itself)
    <base64 root hash>\\n       standard base64 with padding of the 32-byte RFC 9162 root
    [<extension line>\\n ...]   optional, each non-empty

The ledger signs with a key whose name is the origin. Parsing is strict: anything else is
:class:`~fleet.log.log_errors.MalformedCheckpoint`.

The guard (:func:`check_extends`, :func:`check_consistent_then_sign`) is why the ledger
can never sign two checkpoints that contradict each other: before signing size ``n`` it
must hold a consistency proof from the last size it signed, and it refuses
(:class:`~fleet.log.log_errors.ShrinkingCheckpoint`,
:class:`~fleet.log.log_errors.InconsistentCheckpoint`) unless that proof verifies.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleet_ledger.fleet.log.log_errors import (
    InconsistentCheckpoint,
    MalformedCheckpoint,
    ProofError,
    ShrinkingCheckpoint,
)
from fleet_ledger.fleet.log.merkle import HASH_SIZE, verify_consistency
from fleet_ledger.fleet.log.note import Signer, Verifier, b64decode_strict, open_note, sign_note

__all__ = [
    "Checkpoint",
    "check_consistent_then_sign",
    "check_extends",
    "make_checkpoint",
    "open_checkpoint",
    "parse_checkpoint",
    "sign_checkpoint",
]


_SIZE = re.compile(r"(0|[1-9][0-9]{0,19})\Z")
_MAX_SIZE = (1 << 63) - 1


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint: the log's origin, its size and its root hash."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        """The checkpoint's note text."""
        lines = [self.origin, str(self.size), self.root_base64()]
        return "".join(line + "\n" for line in (*lines, *self.extensions))

    def root_base64(self) -> str:
        return base64.b64encode(self.root).decode()


def make_checkpoint(origin: str, size: int, root: bytes) -> Checkpoint:
    """A checkpoint after checking each field would survive :func:`parse_checkpoint`."""
    return parse_checkpoint(Checkpoint(origin, size, root).body())


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint in a note text, or :class:`MalformedCheckpoint`."""
    if not text.endswith("\n"):
        raise MalformedCheckpoint("a checkpoint ends with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedCheckpoint("a checkpoint has an origin, a size and a root line")
    origin, size_text, root_text, *extensions = lines
    if not origin or any(ord(ch) < 0x20 for ch in origin):
        raise MalformedCheckpoint("checkpoint origin is empty or has control characters")
    if _SIZE.match(size_text) is None or int(size_text) > _MAX_SIZE:
        raise MalformedCheckpoint(f"checkpoint size {size_text[:30]!r} is not a decimal size")
    root = b64decode_strict(root_text, "checkpoint root", MalformedCheckpoint)
    if len(root) != HASH_SIZE:
        raise MalformedCheckpoint(f"checkpoint root is {len(root)} bytes, not {HASH_SIZE}")
    if any(not line for line in extensions):
        raise MalformedCheckpoint("checkpoint extension lines must not be empty")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> str:
    """The signed note of ``checkpoint``."""
    return sign_note(checkpoint.body(), [signer])


def open_checkpoint(note: str | bytes, verifiers: Iterable[Verifier]) -> Checkpoint:
    """Verify a signed checkpoint note and parse its body."""
    return parse_checkpoint(open_note(note, verifiers).text)


def check_extends(last: Checkpoint | None, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Raise unless ``new`` extends ``last`` (the last checkpoint signed) by ``proof``."""
    if last is None:
        return
    if new.origin != last.origin:
        raise InconsistentCheckpoint(f"origin {new.origin!r} is not {last.origin!r}")
    if new.size < last.size:
        raise ShrinkingCheckpoint(f"size {new.size} is below the last signed {last.size}")
    try:
        verify_consistency(last.size, new.size, proof, last.root, new.root)
    except ProofError as exc:
        raise InconsistentCheckpoint(
            f"tree of size {new.size} does not extend the last signed size {last.size}: {exc}"
        ) from exc


def check_consistent_then_sign(
    last: Checkpoint | None, new: Checkpoint, proof: Sequence[bytes], signer: Signer
) -> str:
    """Sign ``new`` only if the consistency ``proof`` from ``last`` verifies."""
    check_extends(last, new, proof)
    return sign_checkpoint(new, signer)
