"""Every ``type: ignore`` in the packages names its error codes and says why.

The type checker (``mypy``, configured in pyproject.toml and run by .ci/run) refuses an
ignore without a code (``ignore-without-code``) and one that no longer silences anything
(``warn_unused_ignores``); this holds the rest of the rule: after the codes, a second
comment gives the reason, on the same line::

    value = lib.call()  # type: ignore[attr-defined]  # lib ships no stubs for call

Comments are read with :mod:`tokenize`, so the words inside a string do not count.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fleet", "plumbing", "agents", "ledger", "anchors", "cli")

_IGNORE = re.compile(r"type:\s*ignore")
_WELL_FORMED = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\]\s+#\s*\S")


def bad_ignores(source: str, path: str) -> list[str]:
    """One line per ``type: ignore`` comment in ``source`` without codes and a reason."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if (tok.type == tokenize.COMMENT and _IGNORE.search(tok.string)
                and not _WELL_FORMED.match(tok.string)):
            out.append(f"{path}:{tok.start[0]}: {tok.string.strip()}")
    return out


@pytest.mark.parametrize("comment", [
    "# type: ignore",
    "# type: ignore[attr-defined]",
    "# type: ignore[attr-defined]  #",
    "# type: ignore  # no codes, only a reason",
    "# type:ignore[misc]",
])
def test_an_ignore_without_codes_or_reason_is_reported(comment):
    """A bare ignore, one without a reason and one without codes are each reported."""
    assert bad_ignores(f"x = f()  {comment}\n", "m.py") == [f"m.py:1: {comment}"]


def test_an_ignore_with_codes_and_reason_passes_and_strings_do_not_count():
    """Codes plus a reason pass; the same words inside a string are not a comment."""
    source = ('x = f()  # type: ignore[attr-defined, arg-type]  # lib has no stubs\n'
              'y = "# type: ignore"\n')
    assert bad_ignores(source, "m.py") == []


def test_every_ignore_in_the_packages_has_codes_and_a_reason():
    """No ``type: ignore`` in the six packages lacks its error codes or its reason."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += bad_ignores(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(ROOT)))
    assert found == [], "\n".join(found)
