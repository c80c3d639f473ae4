"""Durable file writes: owner-only secrets created once, and files replaced atomically.

Both fsync what they write before they return, so a file the caller then relies on (a key a
ledger signs with, the enrollments a rebuilt store starts from, a witness's last cosigned
size) survives a crash or power loss in full or not at all.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from nacl.signing import SigningKey


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a new file readable by its owner only (never widened, even briefly;
    mode 0600 whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` by ``data``: a temporary file beside it (named for this process, so
    two writers never share one), fsync'd, renamed over ``path``, then the folder fsync'd so
    the rename itself is durable. On failure the temporary file is removed and ``path`` is
    untouched."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_key_file(path: Path) -> SigningKey:
    """The Ed25519 signing key in a key file (its 32-byte seed in base64: what
    :func:`write_key_file` writes for hosts, operators, issuers and agents alike);
    ``OSError`` when unreadable, ``ValueError`` when it holds no such seed."""
    try:
        return SigningKey(base64.b64decode(path.read_text().strip(), validate=True))
    except TypeError as exc:  # a seed of the wrong length
        raise ValueError(str(exc)) from None


def write_key_file(path: Path, key: SigningKey) -> None:
    """A new key file holding ``key`` (mode 0600; see :func:`write_secret`)."""
    write_secret(path, base64.b64encode(bytes(key)).decode() + "\n")
