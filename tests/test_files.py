"""Durable file writes (plumbing.files): secrets created owner-only once, files replaced whole."""

from __future__ import annotations

import os
import stat

import pytest

import fleet_ledger.plumbing.files
from fleet_ledger.plumbing.files import write_atomically, write_secret


def test_write_secret_is_owner_only_and_never_overwrites(tmp_path):
    path = tmp_path / "k.key"
    write_secret(path, "seed\n")
    assert path.read_text() == "seed\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_secret(path, "other\n")
    assert path.read_text() == "seed\n"


def test_write_atomically_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    """The new bytes replace the file with the asked mode; a failed replace leaves the old
    file as it was and no temporary file behind."""
    path = tmp_path / "state.json"
    write_atomically(path, b"one\n")
    write_atomically(path, b"two\n", 0o600)
    assert path.read_bytes() == b"two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fleet_ledger.plumbing.files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomically(path, b"three\n")
    monkeypatch.undo()
    assert path.read_bytes() == b"two\n"
    assert os.listdir(tmp_path) == ["state.json"]
