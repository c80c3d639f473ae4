"""The ledger's checkpoint signing key: created on first start (mode 0600), then reused."""

from __future__ import annotations

from pathlib import Path

from fleet_ledger.fleet.log.note import Signer, generate_signer, parse_signer_key
from fleet_ledger.plumbing.files import write_secret

KEY_FILE = "ledger.key"
VKEY_FILE = "ledger.vkey"


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
