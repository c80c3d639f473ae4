"""The ledger's checkpoint signing key: created on first start (mode 0600), then reused."""

from __future__ import annotations

import os
from pathlib import Path

from fleet.note import Signer, generate_signer, parse_signer_key

KEY_FILE = "ledger.key"
VKEY_FILE = "ledger.vkey"


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a new file readable by its owner only (never widened, even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def load_or_create_signer(data_dir: Path, origin: str) -> Signer:
    """The signer in ``data_dir``, created for ``origin`` if the folder has none yet."""
    key_path = data_dir / KEY_FILE
    if key_path.exists():
        signer = parse_signer_key(key_path.read_text())
    else:
        signer = generate_signer(origin)
        write_secret(key_path, signer.text() + "\n")
    vkey_path = data_dir / VKEY_FILE
    vkey = signer.verifier().text() + "\n"
    if not vkey_path.exists() or vkey_path.read_text() != vkey:
        vkey_path.write_text(vkey)
    return signer
