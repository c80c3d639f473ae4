"""The anchors TOML file: kinds, names and relative key paths."""

from __future__ import annotations

import pytest

from fleet_ledger.anchors.base import load_anchor_config
from fleet_ledger.anchors.factory import build_anchor
from fleet_ledger.fleet.log.cosignature import generate_witness_signer


def test_config_resolves_relative_paths_and_builds_anchors(tmp_path):
    """Relative vkey paths are read from the file's folder and each entry builds its anchor."""
    key = generate_witness_signer("w.example/1").key()
    (tmp_path / "w1.vkey").write_text(key.text() + "\n")
    path = tmp_path / "anchors.toml"
    path.write_text('[[witness]]\nname = "w1"\nurl = "http://127.0.0.1:9"\nvkey = "w1.vkey"\n'
                    '[[nats]]\nname = "aud"\nurl = "nats://127.0.0.1:9"\nsubject = "a.b"\n')
    configs = load_anchor_config(path)
    assert [(c.kind, c.name) for c in configs] == [("witness", "w1"), ("nats", "aud")]
    assert build_anchor(configs[0]).key == key


@pytest.mark.parametrize("text", [
    '[[blockchain]]\nname = "x"\nurl = "http://x"\n',
    '[[witness]]\nurl = "http://x"\nvkey = "k"\n',
    '[[tsa]]\nname = "a"\nurl = "http://x"\n[[nats]]\nname = "a"\nurl = "n"\nsubject = "s"\n',
])
def test_bad_config_is_refused(tmp_path, text):
    """Unknown kinds, missing names and duplicate names are refused with a ValueError."""
    path = tmp_path / "anchors.toml"
    path.write_text(text)
    with pytest.raises(ValueError):
        load_anchor_config(path)


def test_ledger_serve_refuses_a_bad_anchors_file_before_starting(tmp_path):
    """`fleet ledger serve --anchors FILE` with an unknown kind exits 2 with one line."""
    import subprocess
    import sys

    path = tmp_path / "anchors.toml"
    path.write_text('[[blockchain]]\nname = "x"\nurl = "http://x"\n')
    result = subprocess.run(
        [sys.executable, "-m", "fleet_ledger.cli", "ledger", "serve", "--nats", "nats://127.0.0.1:9",
         "--data", str(tmp_path / "d"), "--anchors", str(path)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 2 and "unknown anchor kinds" in result.stderr, result.stderr
