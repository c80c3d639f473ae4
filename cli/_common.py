"""Options and helpers shared by the commands that talk to a ledger."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError

F = TypeVar("F", bound=Callable[..., Any])


def nats_options(fn: F) -> F:
    """``--nats URL`` and ``--nkey PATH`` for commands that call the ledger's API."""
    fn = click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
                      help="NATS nkey seed file (the read-only 'reader' user).")(fn)
    fn = click.option("--nats", "url", envvar="FLEET_NATS", default="nats://127.0.0.1:4222",
                      show_default=True, help="NATS server URL(s), comma separated.")(fn)
    return fn


def split_servers(url: str) -> list[str]:
    """The server URLs of a ``--nats`` value (comma separated)."""
    return [u.strip() for u in url.split(",") if u.strip()]


def api(url: str, endpoint: str, body: dict[str, Any] | None = None,
        nkey: Path | None = None, timeout: float = 10.0, **kw: Any) -> Any:
    """Call the ledger; one readable line and a non-zero exit when that fails. ``kw``:
    more of :func:`ledger.client.call`'s options (``inbox_prefix``)."""
    from fleet_ledger.ledger.client import ApiError, LedgerUnreachable, call_sync

    try:
        return call_sync(url, endpoint, body, nkey=nkey, timeout=timeout, fleet=FLEET["name"],
                         **kw)
    except LedgerUnreachable as exc:
        raise UserError(str(exc)) from None
    except ApiError as exc:
        raise CheckFailed(f"the ledger refused: {exc} (code {exc.code})") from None


def text_or_file(value: str) -> str:
    """A key given as its text or as a file holding it: the file's text when ``value``
    names a file, else ``value``; stripped either way. A file that cannot be read raises
    OSError."""
    try:
        is_file = Path(value).is_file()
    except (OSError, ValueError):  # key text that is no possible path (too long, a NUL)
        is_file = False
    return (Path(value).read_text() if is_file else value).strip()


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=None, sort_keys=False))


def emit_result(doc: dict[str, Any], as_json: bool) -> None:
    """A benchmark's result: one JSON line, or ``key: value`` lines for a person."""
    if as_json:
        click.echo(json.dumps(doc))
        return
    for k, v in doc.items():
        click.echo(f"{k}: {v}")


_ERASE = "\r\033[K"  # back to the line's start, clear to its end
_shown: list[bool] = []


def progress(text: str) -> None:
    """A progress line on a terminal only: rewritten in place on stderr, never on stdout,
    and nothing at all when stderr is a pipe or file (a script reading ``--json``)."""
    if sys.stderr.isatty():
        click.echo(_ERASE + text, nl=False, err=True)
        _shown[:] = [True]


def progress_done() -> None:
    """Erase the progress line, if one is shown, before the command prints its result (so
    a terminal shows JSON on a clean line)."""
    if _shown:
        click.echo(_ERASE, nl=False, err=True)
        _shown.clear()


def load_key(path: Path) -> Any:
    """A signing key from a key file (``fleet grant keygen``, ``fleet operator keygen``);
    a missing or bad file is one line, exit 2."""
    from fleet_ledger.plumbing.files import read_key_file

    try:
        return read_key_file(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such key file") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a key file: {exc}") from None


_SPAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])\Z")
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def span_s(value: str) -> float | None:
    """Seconds in a span (``90s``, ``30m``, ``6h``, ``2d``, ``1.5w``), or ``None`` for text
    of another shape."""
    span = _SPAN.match(value.strip())
    return None if span is None else float(span.group(1)) * _UNITS_S[span.group(2)]
