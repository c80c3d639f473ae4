"""A tlog-tiles client written from the C2SP texts alone, for the tests.

It imports nothing of the project (no fleet.log.merkle, fleet.log.note, fleet.log.tiles): hashing is
RFC 6962 section 2.1, note verification c2sp.org/signed-note, the checkpoint body
c2sp.org/tlog-checkpoint, tile paths and entry bundles c2sp.org/tlog-tiles, the witness
request c2sp.org/tlog-witness. If the server and this client agree, the server speaks the
spec, not merely our own reading of it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from nacl.signing import VerifyKey

WIDTH = 256


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tile_index_path(n: int) -> str:
    """"<N> ... encoded into zero-padded 3-digit path elements. All but the last path
    element MUST begin with an x" (1234067 -> x001/x234/067)."""
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i:i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


@dataclass
class Checkpoint:
    origin: str
    size: int
    root: bytes
    note: str


def verify_checkpoint(note: str, vkey: str) -> Checkpoint:
    """Parse a signed note and check the log's Ed25519 signature (c2sp.org/signed-note:
    key id = SHA-256(name || 0x0A || 0x01 || key)[:4], signature line "— name base64(id||sig)")."""
    name, key_hex, key_b64 = vkey.split("+", 2)
    blob = base64.b64decode(key_b64)
    assert blob[0] == 1, "Ed25519 keys start with 0x01"
    key_id = hashlib.sha256(name.encode() + b"\n" + blob).digest()[:4]
    assert key_id.hex() == key_hex
    text, sep, sigs = note.rpartition("\n\n")
    assert sep, "a note has a blank line before its signatures"
    text += "\n"
    ok = False
    for line in sigs.splitlines():
        assert line.startswith("\u2014 "), line
        signer, sig_b64 = line[2:].split(" ")
        sig = base64.b64decode(sig_b64)
        if signer == name and sig[:4] == key_id:
            VerifyKey(blob[1:]).verify(text.encode(), sig[4:])  # raises when bad
            ok = True
    assert ok, "no signature by the log's key"
    lines = text.split("\n")
    origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2])
    assert str(size) == lines[1] and len(root) == 32
    return Checkpoint(origin, size, root, note)


@dataclass
class TileClient:
    """Fetches tiles of ``base`` (the log's prefix URL) and derives everything from them."""

    base: str
    fetched: dict[str, bytes] = field(default_factory=dict)

    def get(self, path: str, gzip_ok: bool = False) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.base.rstrip("/") + "/" + path)
        req.add_header("Accept-Encoding", "gzip, identity" if gzip_ok else "identity")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                body = resp.read()
                headers = {k.lower(): v for k, v in resp.headers.items()}
                if headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                return resp.status, headers, body
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()

    def checkpoint(self, vkey: str) -> Checkpoint:
        status, _, body = self.get("checkpoint")
        assert status == 200, (status, body)
        return verify_checkpoint(body.decode(), vkey)

    @staticmethod
    def tile_path(level: int | str, n: int, size: int) -> str:
        """The path of tile n at ``level`` as a tree of ``size`` has it (full or partial)."""
        lvl = 0 if level == "entries" else int(level)
        hashes = size // WIDTH ** lvl
        width = WIDTH if (n + 1) * WIDTH <= hashes else hashes - n * WIDTH
        assert 0 < width <= WIDTH, f"tile {level}/{n} does not exist at size {size}"
        suffix = "" if width == WIDTH else f".p/{width}"
        return f"tile/{level}/{tile_index_path(n)}{suffix}"

    def tile(self, level: int, n: int, size: int) -> list[bytes]:
        path = self.tile_path(level, n, size)
        if path not in self.fetched:
            status, _, body = self.get(path)
            assert status == 200, (path, status, body)
            self.fetched[path] = body
        body = self.fetched[path]
        assert len(body) % 32 == 0
        return [body[i:i + 32] for i in range(0, len(body), 32)]

    def entries(self, n: int, size: int) -> list[bytes]:
        status, _, body = self.get(self.tile_path("entries", n, size), gzip_ok=True)
        assert status == 200, (n, status, body)
        out, pos = [], 0
        while pos < len(body):
            (length,) = struct.unpack(">H", body[pos:pos + 2])
            out.append(body[pos + 2:pos + 2 + length])
            pos += 2 + length
        assert pos == len(body)
        return out

    # -- Merkle tree hashes from tiles (RFC 6962 2.1, c2sp.org/tlog-tiles) ------------------

    def subtree(self, start: int, end: int, size: int) -> bytes:
        """MTH(D[start:end]) for an aligned power-of-two range (end - start = 2**k), from
        the tile at level k // 8 holding the hashes of D[start:...] in 256**(k//8) leaves,
        hashed up the remaining k % 8 levels."""
        count = end - start
        k = count.bit_length() - 1
        assert count == 1 << k and start % count == 0
        level, rest = divmod(k, 8)
        span = WIDTH ** level  # leaves per hash of a level-`level` tile
        first = start // span
        hashes = [self.tile(level, (first + i) // WIDTH, size)[(first + i) % WIDTH]
                  for i in range(1 << rest)]
        while len(hashes) > 1:
            hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def mth(self, start: int, end: int, size: int) -> bytes:
        """MTH(D[start:end]) (RFC 6962 2.1), any range ``start`` aligned as the recursion
        makes it."""
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:
            return self.subtree(start, end, size)
        k = 1 << ((n - 1).bit_length() - 1)  # largest power of two smaller than n
        return node_hash(self.mth(start, start + k, size), self.mth(start + k, end, size))

    def root(self, size: int) -> bytes:
        return hashlib.sha256(b"").digest() if size == 0 else self.mth(0, size, size)

    def inclusion(self, m: int, size: int, start: int = 0, fetch_size: int | None = None
                  ) -> list[bytes]:
        """PATH(m, D[start:start+size]) (RFC 6962 2.1.1), leaf's sibling first."""
        at = fetch_size or size
        if size == 1:
            return []
        k = 1 << ((size - 1).bit_length() - 1)
        if m < k:
            return [*self.inclusion(m, k, start, at), self.mth(start + k, start + size, at)]
        return [*self.inclusion(m - k, size - k, start + k, at), self.mth(start, start + k, at)]

    def consistency(self, old: int, new: int) -> list[bytes]:
        """PROOF(old, D[0:new]) (RFC 6962 2.1.2)."""
        if old in (0, new):
            return []
        return self._subproof(old, 0, new, True, new)

    def _subproof(self, m: int, start: int, n: int, whole: bool, at: int) -> list[bytes]:
        if m == n:
            return [] if whole else [self.mth(start, start + n, at)]
        k = 1 << ((n - 1).bit_length() - 1)
        if m <= k:
            return [*self._subproof(m, start, k, whole, at), self.mth(start + k, start + n, at)]
        return [*self._subproof(m - k, start + k, n - k, False, at),
                self.mth(start, start + k, at)]


def add_checkpoint_body(old: int, proof: list[bytes], note: str) -> bytes:
    """A c2sp.org/tlog-witness add-checkpoint request body."""
    lines = [f"old {old}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + note).encode()
