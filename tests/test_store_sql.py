"""SQL into the store: the ledger's schema is read and written by its store modules only.

Every other module of ``ledger/`` (the audit, the metrics, the explorer, the log reader,
the service, the API...) calls the store's named methods, and no CLI module runs SQL on a
ledger store's connection. The check is a grep over the source, as a reviewer would run it:
an SQL keyword in capitals or a call of ``execute``/``executemany`` outside the store
modules fails it, wherever it stands (code, string or comment).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The modules that own the ledger database's schema, its writes and its reads.
STORE_MODULES = frozenset({"ledger/store.py", "ledger/store_reads.py", "ledger/tree_store.py",
                           "ledger/job_store.py"})
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b|\bexecute(many)?\(")
LEDGER_CONN = re.compile(r"\bstore\.conn\.execute")


def sql_lines(path: Path, pattern: re.Pattern[str] = SQL) -> list[str]:
    """``path:line: text`` of each line of ``path`` that ``pattern`` finds."""
    return [f"{path}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def ledger_sql(root: Path) -> list[str]:
    """The SQL lines of the ledger's modules (subpackages too) outside the store modules,
    in the tree at ``root``."""
    return [hit for path in sorted((root / "ledger").rglob("*.py"))
            if path.relative_to(root).as_posix() not in STORE_MODULES
            for hit in sql_lines(path)]


def test_the_grep_finds_the_store_sql() -> None:
    """The pattern finds the store's own statements, so an empty answer elsewhere means
    something (a pattern that matched nothing would pass every module)."""
    found = sql_lines(ROOT / "ledger" / "store_reads.py") + sql_lines(ROOT / "ledger" / "store.py")
    assert any("SELECT" in h for h in found) and any("INSERT" in h for h in found)
    assert any("UPDATE" in h for h in found) and any("execute(" in h for h in found)


def test_no_sql_in_the_ledger_outside_the_store() -> None:
    """No module of ``ledger/`` but the store's holds SQL or executes a statement."""
    assert ledger_sql(ROOT) == []


def test_no_cli_module_queries_a_ledger_store() -> None:
    """The CLI (demos, benchmarks) reads a ledger store through its methods, never by
    running statements on its connection."""
    hits = [h for path in sorted((ROOT / "cli").rglob("*.py"))
            for h in sql_lines(path, LEDGER_CONN)]
    assert hits == []
