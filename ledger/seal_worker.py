"""Seal verification on a second core.

Ed25519 verification is most of the fold's CPU, and PyNaCl holds the GIL while it runs, so
threads cannot share it out. The ledger therefore hands half of each large batch's seals to
a worker process (``python -m ledger.seal_worker``, talking over its stdin and stdout) and
checks the other half itself. The verdicts are plain booleans, the ones the fold would
compute in line; a worker that fails is dropped and the ledger verifies in line (slower,
never different). The worker exits when its stdin closes, so it never outlives the ledger.

Frames: a request is ``count:u32`` then per item ``public_key[32] || len:u16 || message ||
signature[64]``; the reply is ``count`` bytes, 1 for a valid seal and 0 otherwise.
"""

from __future__ import annotations

import contextlib
import struct
import subprocess
import sys
from typing import BinaryIO

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

# (public key, sealed message, signature)
Item = tuple[bytes, bytes, bytes]

_COUNT = struct.Struct(">I")
_LEN = struct.Struct(">H")
_KEYS: dict[bytes, VerifyKey] = {}


def verify_many(items: list[Item]) -> list[bool]:
    """Each seal's verdict, in order."""
    out = []
    for public, message, signature in items:
        key = _KEYS.get(public)
        if key is None:
            key = _KEYS[public] = VerifyKey(public)
        try:
            key.verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            out.append(False)
        else:
            out.append(True)
    return out


def encode_request(items: list[Item]) -> bytes:
    parts = [_COUNT.pack(len(items))]
    for public, message, signature in items:
        parts += (public, _LEN.pack(len(message)), message, signature)
    return b"".join(parts)


def _read(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError
    return data


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker's loop: read a request, answer it, until the input ends."""
    while True:
        try:
            (count,) = _COUNT.unpack(_read(inp, 4))
            items = []
            for _ in range(count):
                public = _read(inp, 32)
                (length,) = _LEN.unpack(_read(inp, 2))
                items.append((public, _read(inp, length), _read(inp, 64)))
        except EOFError:
            return
        out.write(bytes(verify_many(items)))
        out.flush()


class SealWorker:
    """One worker process, started on demand and replaced by in-line checks if it fails."""

    MIN_SPLIT = 64

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ledger.seal_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def verify(self, items: list[Item]) -> list[bool]:
        """Verdicts for ``items``: the worker takes the second half while we do the first."""
        proc = self._proc
        if proc is None or len(items) < self.MIN_SPLIT:
            return verify_many(items)
        half = len(items) // 2
        theirs = items[half:]
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(encode_request(theirs))
            proc.stdin.flush()
        except OSError:
            self.close()
            return verify_many(items)
        mine = verify_many(items[:half])
        try:
            answer = _read(proc.stdout, len(theirs))
        except (OSError, EOFError):
            self.close()
            return mine + verify_many(theirs)
        return mine + [b == 1 for b in answer]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
