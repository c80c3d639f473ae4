"""C2SP tlog-proof (``c2sp.org/tlog-proof@v1``): an entry's inclusion proof and the signed
checkpoint it leads to, as one text - what ``GET /proof/<run>[/<index>]`` serves.

Format (lines end in ``\\n``)::

    c2sp.org/tlog-proof@v1
    extra <base64 of the 84 fleet-leaf bytes>       (we always send it)
    index <leaf index, decimal, no leading zero>
    <base64 hash>                                    zero or more: the RFC 9162 inclusion
    ...                                              proof, leaf's sibling first
    <empty line>
    <the signed checkpoint note, verbatim, cosignatures included>

The ``extra`` line is not authenticated: a verifier rebuilds the leaf from the run, index
and head it expects (:func:`fleet.log.leaf.encode_leaf`) and compares, then checks the
checkpoint's signature and the inclusion proof against its root. Parsing is strict
(:class:`~fleet.log.log_errors.MalformedProof`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fleet_ledger.fleet.log.log_errors import MalformedProof
from fleet_ledger.fleet.log.merkle import HASH_SIZE
from fleet_ledger.fleet.log.note import b64decode_strict

__all__ = ["HEADER", "TlogProof", "format_tlog_proof", "hash_lines", "parse_tlog_proof"]

HEADER = "c2sp.org/tlog-proof@v1"
_INDEX = re.compile(r"index (0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class TlogProof:
    """A parsed tlog-proof."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None


def format_tlog_proof(index: int, proof: Sequence[bytes], checkpoint: str,
                      extra: bytes | None = None) -> str:
    """The proof text of leaf ``index`` with inclusion ``proof`` into ``checkpoint``."""
    lines = [HEADER]
    if extra is not None:
        lines.append("extra " + base64.b64encode(extra).decode())
    lines.append(f"index {index}")
    lines.extend(base64.b64encode(h).decode() for h in proof)
    return "\n".join(lines) + "\n\n" + checkpoint


def parse_tlog_proof(text: str) -> TlogProof:
    """The parts of a proof text, or :class:`MalformedProof`."""
    head, sep, checkpoint = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or lines[0] != HEADER:
        raise MalformedProof(f"a tlog proof starts with {HEADER!r} and has an empty line")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = b64decode_strict(rest.pop(0)[6:], "extra data", MalformedProof)
    match = _INDEX.match(rest[0]) if rest else None
    if match is None:
        raise MalformedProof("a tlog proof names its index ('index N') before the hashes")
    hashes = hash_lines(rest[1:], "a proof hash", MalformedProof)
    return TlogProof(int(match.group(1)), tuple(hashes), checkpoint, extra)


def hash_lines(lines: Sequence[str], what: str, error: type[Exception]) -> list[bytes]:
    """Lines of one base64 SHA-256 hash each (proofs in C2SP texts), or ``error``."""
    hashes = []
    for line in lines:
        item = b64decode_strict(line, what, error)
        if len(item) != HASH_SIZE:
            raise error(f"{what} is {HASH_SIZE} bytes, got {len(item)}")
        hashes.append(item)
    return hashes
