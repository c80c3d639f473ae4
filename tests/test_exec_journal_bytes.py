"""Every byte the exec journal stores is checked: an edit to any column of an entry (its
fields or its ``body``, the canonical bytes kept for outside readers) makes ``fleet exec
journal`` exit 1 naming the entry; an edit to a sealed interval's row names the interval."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet_ledger.agents.exec_journal_store import ExecJournal
from fleet_ledger.cli import cli as fleet_cli
from fleet_ledger.fleet.address import digest, format_address

# (column, SQL expression giving an edited value of one stored byte or field)
ENTRY_EDITS = [
    ("seq", "seq + 10"),
    ("time_ns", "time_ns + 1"),
    ("access", "CASE access WHEN 'open' THEN 'exec' ELSE 'open' END"),
    ("verdict", "'allow'"),
    ("cause", "'unpinned'"),
    ("bytes", f"'{format_address(digest(b'other bytes'))}'"),
    ("policy", f"'{format_address(digest(b'other policy'))}'"),
    ("label", "'innocent'"),
    ("path", "'/elsewhere'"),
    ("body", "substr(body, 1, length(body) - 1) || x'00'"),
    ("body", "body || x'00'"),
    ("bytes", "'not an address'"),
    ("label", "CAST(x'ff' AS TEXT)"),
]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("journal") / "exec.db"
    j = ExecJournal(path, run="b3:" + "A" * 43)
    policy = digest(b"policy")
    j.append(access="exec", verdict="deny", cause="policy", content=digest(b"x"),
             policy=policy, label="x", path="/u/x")
    j.append(access="exec", verdict="deny", cause="policy", content=digest(b"y"),
             policy=policy, label="y", path="/u/y")
    j.seal_interval()
    j.append(access="open", verdict="deny", cause="policy", content=digest(b"z"),
             policy=policy, label="z", path="/u/z")
    j.close()
    return path


def _journal(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(fleet_cli, ["exec", "journal", str(path)])
    return result.exit_code, result.output


def _edit(src: Path, dest: Path, sql: str) -> Path:
    shutil.copyfile(src, dest)
    db = sqlite3.connect(dest)
    db.execute(sql)
    db.commit()
    db.close()
    return dest


def test_an_untouched_journal_passes(journal):
    """The journal as written is accepted (exit 0): the edits below are what fails."""
    assert _journal(journal)[0] == 0


@pytest.mark.parametrize(("column", "value"), ENTRY_EDITS)
@pytest.mark.parametrize("seq", [2, 3])  # in a sealed interval, in the open one
def test_an_edited_entry_column_is_refused_naming_the_entry(journal, tmp_path, column, value,
                                                            seq):
    """Any edited column of an entry, sealed or not, is exit 1 naming that entry."""
    edited = _edit(journal, tmp_path / "edited.db",
                   f"UPDATE entries SET {column} = {value} WHERE seq = {seq}")
    code, text = _journal(edited)
    named = seq + 10 if column == "seq" else seq
    assert code == 1 and f"entries [{named}] do not match their stored bytes" in text, text


@pytest.mark.parametrize("sql", [
    "UPDATE intervals SET root = '" + format_address(digest(b"r")) + "' WHERE interval = 1",
    "UPDATE intervals SET entries = 1 WHERE interval = 1",
    "UPDATE entries SET interval = 2 WHERE seq = 2",
    "DELETE FROM entries WHERE seq = 1",
])
def test_an_edited_interval_is_refused_naming_the_interval(journal, tmp_path, sql):
    """A sealed interval whose root, count or entries were edited (an entry moved out or
    deleted) is exit 1 naming the interval."""
    code, text = _journal(_edit(journal, tmp_path / "edited.db", sql))
    assert code == 1 and "stored roots of intervals [1] do not match" in text, text
