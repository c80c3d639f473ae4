"""Seal verification on a second core.

Ed25519 verification is most of the fold's CPU (:mod:`ledger.seal_verifiers` picks the
implementation), and it holds the GIL while it runs, so threads cannot share it out. The
ledger therefore hands seals to a worker process
(``python -m fleet_ledger.ledger.seal_worker``, talking
over its stdin and stdout): each batch's while the previous batch is folded (see
:class:`SealWorker`). The verdicts are plain booleans, the ones the fold would compute in
line; a worker that fails is dropped and the ledger verifies in line (slower, never
different). The worker exits when its stdin closes, so it never outlives the ledger.

Frames: a request is ``count:u32 || size:u32`` then ``size`` bytes holding, per item,
``public_key[32] || len:u16 || message || signature[64]``; the reply is ``count`` bytes, 1
for a valid seal and 0 otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
from collections import deque
from typing import BinaryIO

from fleet_ledger.ledger.seal_verifiers import Item, verify_many

__all__ = ["MAX_ITEM_MESSAGE", "Item", "SealTicket", "SealWorker", "decode_request",
           "encode_request", "serve", "verify_many"]

_HEAD = struct.Struct(">II")
_LEN = struct.Struct(">H")
# The longest message an item may carry (its length is a u16 in a frame).
MAX_ITEM_MESSAGE = 0xFFFF


def encode_request(items: list[Item]) -> bytes:
    parts: list[bytes] = []
    for public, message, signature in items:
        parts += (public, _LEN.pack(len(message)), message, signature)
    body = b"".join(parts)
    return _HEAD.pack(len(items), len(body)) + body


def decode_request(count: int, body: bytes) -> list[Item]:
    items = []
    pos = 0
    for _ in range(count):
        (length,) = _LEN.unpack_from(body, pos + 32)
        end = pos + 34 + length
        items.append((body[pos:pos + 32], body[pos + 34:end], body[end:end + 64]))
        pos = end + 64
    if pos != len(body):
        raise ValueError("a seal request's items do not fill its body")
    return items


def _read(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError
    return data


def _read_fd(fd: int, n: int) -> bytes:
    # Unbuffered: a buffered reader could hold the next answer's bytes, which the
    # readiness check (``select`` on the descriptor) would then not see.
    parts = []
    while n:
        data = os.read(fd, n)
        if not data:
            raise EOFError
        parts.append(data)
        n -= len(data)
    return b"".join(parts)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """The worker's loop: read a request, answer it, until the input ends."""
    while True:
        try:
            count, size = _HEAD.unpack(_read(inp, _HEAD.size))
            items = decode_request(count, _read(inp, size))
        except EOFError:
            return
        out.write(bytes(verify_many(items)))
        out.flush()


class SealTicket:
    """A batch's seals in flight: the worker checks ``theirs`` while the ledger does other
    work; the ledger checks ``mine`` itself when it collects the verdicts."""

    __slots__ = ("adaptive", "answer", "mine", "theirs")

    def __init__(self, mine: list[Item], theirs: list[Item], adaptive: bool = False) -> None:
        self.mine = mine
        self.theirs = theirs
        self.answer: list[bool] | None = None if theirs else []
        self.adaptive = adaptive


class SealWorker:
    """One worker process, started on demand and replaced by in-line checks if it fails.

    :meth:`submit` and :meth:`collect` let the ledger overlap a batch's seals with the
    previous batch's fold: it submits batch k+1, folds and commits batch k, then collects
    k+1 (a caller with nothing to do meanwhile submits with ``share_in_line=0.5`` and
    checks half itself). Two requests may be outstanding: the one the worker is checking
    and the next, waiting in the pipe (enlarged to hold a whole batch where the system
    allows), so submitting batch k+1 never waits for the worker to finish batch k. Their
    answers (a byte per seal) are kept well inside the smallest pipe, so the worker never
    blocks writing one while the ledger writes the next request. The share the ledger
    checks itself adapts: it grows while the worker's answer is late when collected (the
    worker is the bottleneck) and shrinks while it is early.
    """

    MIN_SPLIT = 64
    _STEP = 0.05
    # Answer bytes that may be outstanding: half of Linux's smallest pipe (64 KiB).
    _MAX_UNREAD = 32 * 1024
    _PIPE_SIZE = 1 << 20

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._outstanding: deque[SealTicket] = deque()
        self.share_in_line = 0.0

    def start(self) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "fleet_ledger.ledger.seal_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert self._proc.stdin is not None
            # A batch's request (about 170 bytes a seal) then fits in the pipe whole; where
            # the system refuses, a write waits for the worker, which is slower, not wrong.
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, self._PIPE_SIZE)

    def submit(self, items: list[Item], share_in_line: float | None = None) -> SealTicket:
        """Hand a batch's seals to the worker and return; the caller checks
        ``share_in_line`` of them itself when it collects (by default the adaptive share,
        right for a caller that does other work before collecting). With nothing in the
        worker (the fold's first batch, or the first after a quiet spell), the adaptive
        share is half: nothing else is in flight for the worker to be ahead on."""
        if self._proc is None or len(items) < self.MIN_SPLIT:
            return SealTicket(items, [])
        adaptive = share_in_line is None and bool(self._outstanding)
        if share_in_line is None:
            share_in_line = self.share_in_line if adaptive else 0.5
        mine = int(len(items) * share_in_line)
        return self._send(items[:mine], items[mine:], adaptive=adaptive)

    def collect(self, ticket: SealTicket) -> list[bool]:
        """The verdicts of a submitted batch, in the order submitted."""
        mine = verify_many(ticket.mine)
        while ticket.answer is None:
            self._receive()
        return mine + ticket.answer

    def _send(self, mine: list[Item], theirs: list[Item], adaptive: bool = False
              ) -> SealTicket:
        ticket = SealTicket(mine, theirs, adaptive)
        while self._outstanding and (len(self._outstanding) > 1 or sum(
                len(t.theirs) for t in self._outstanding) + len(theirs) > self._MAX_UNREAD):
            self._receive()
        proc = self._proc
        if proc is None:
            ticket.answer = verify_many(theirs)
            return ticket
        assert proc.stdin is not None
        try:
            proc.stdin.write(encode_request(theirs))
            proc.stdin.flush()
        except OSError:
            self.close()
            ticket.answer = verify_many(theirs)
            return ticket
        self._outstanding.append(ticket)
        return ticket

    def _receive(self) -> None:
        """Read the oldest outstanding request's answer (checking it, and every later one,
        in line if the worker died)."""
        ticket = self._outstanding.popleft()
        proc = self._proc
        if proc is None or proc.stdout is None:
            ticket.answer = verify_many(ticket.theirs)
            return
        if ticket.adaptive:
            late = not select.select([proc.stdout], [], [], 0)[0]
            step = self._STEP if late else -self._STEP
            self.share_in_line = min(0.5, max(0.0, self.share_in_line + step))
        try:
            answer = _read_fd(proc.stdout.fileno(), len(ticket.theirs))
        except (OSError, EOFError):
            self.close()
            ticket.answer = verify_many(ticket.theirs)
            return
        ticket.answer = [b == 1 for b in answer]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        while self._outstanding:
            ticket = self._outstanding.popleft()
            ticket.answer = verify_many(ticket.theirs)
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
