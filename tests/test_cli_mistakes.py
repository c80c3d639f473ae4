"""User mistakes with files end every command the same way: one line, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_helpers import cli


def _one_line_exit_2(*args: str) -> str:
    result = cli(*args, check=False, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unwritable_output_folder(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert "Error:" in _one_line_exit_2("witness", "keygen", "--out", str(blocker / "sub"), "w")
    assert "Error:" in _one_line_exit_2("bench", "merkle", "--dir", str(blocker / "sub"),
                                        "--leaves", "100", "--proofs", "10", "--json")


def test_a_store_that_is_not_a_database(tmp_path: Path):
    (tmp_path / "ledger.db").write_text("garbage, not SQLite\n" * 100)
    assert "not a database" in _one_line_exit_2("status", "--data", str(tmp_path), "--json")


def test_a_host_key_file_that_holds_no_key(tmp_path: Path):
    (tmp_path / "host.key").write_text("not base64!!\n")
    line = _one_line_exit_2("host", "simulate", "--hosts", "1", "--runs", "1", "--name", "h",
                            "--data", str(tmp_path), "--nats", "nats://127.0.0.1:1")
    assert "host.key" in line


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "nohostport"])
def test_a_witness_listen_address_out_of_range(tmp_path: Path, listen: str):
    cli("witness", "keygen", "--out", str(tmp_path), "w")
    cli("keygen", "--out", str(tmp_path), "log")
    line = _one_line_exit_2("witness", "serve", "--key", str(tmp_path / "w.key"),
                            "--log-vkey", str(tmp_path / "log.vkey"),
                            "--state", str(tmp_path / "state"), "--listen", listen)
    assert "HOST:PORT" in line


def test_a_corrupt_witness_state(tmp_path: Path):
    cli("witness", "keygen", "--out", str(tmp_path), "w")
    cli("keygen", "--out", str(tmp_path), "log")
    state = tmp_path / "state"
    state.mkdir()
    (state / "witness-state.json").write_text("{not json")
    line = _one_line_exit_2("witness", "serve", "--key", str(tmp_path / "w.key"),
                            "--log-vkey", str(tmp_path / "log.vkey"), "--state", str(state),
                            "--listen", "127.0.0.1:0")
    assert "witness state" in line
