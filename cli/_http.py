"""The ledger's HTTP options (``--http``, ``--ops``, ``--log-format``, ``--ready-max-unsigned``)
shared by ``fleet ledger serve`` and ``fleet up``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

OFF = "off"


@dataclass(frozen=True)
class HttpSettings:
    """Where the ledger serves its log and its operations endpoints (None: not at all)."""

    log: tuple[str, int] | None = None
    ops: tuple[str, int] | None = None
    max_unsigned_s: float = 30.0
    busy_rate: float | None = 200.0  # log requests/s while the fold has a backlog


def parse_address(value: str | None, option: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair; None for ``off`` or nothing."""
    if value is None or value == OFF:
        return None
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (or '{OFF}')", param_hint=option)
    return host, int(port)


def http_options(log_default: str | None, ops_default: str | None) -> Callable[[F], F]:
    """The options, with the defaults of one command (None: off unless given)."""
    def decorate(fn: F) -> F:
        for option in reversed([
            click.option("--http", "http_address", default=log_default,
                         show_default=log_default is not None, metavar="HOST:PORT",
                         help="Serve the log over HTTP (c2sp.org/tlog-tiles, tlog-proof, the "
                              f"explorer at /ui/); '{OFF}' to not."),
            click.option("--ops", "ops_address", default=ops_default,
                         show_default=ops_default is not None, metavar="HOST:PORT",
                         help="Serve /metrics, /healthz and /readyz on this address; "
                              f"'{OFF}' to not."),
            click.option("--ready-max-unsigned", type=click.FloatRange(0.1), default=30.0,
                         show_default=True, help="/readyz fails once a committed leaf has "
                         "waited this many seconds for a signed checkpoint."),
            click.option("--http-busy-rate", type=click.FloatRange(0), default=200.0,
                         show_default=True, help="Log requests a second while the fold has a "
                         "backlog (the fold comes first); 0: no limit."),
            click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
                         show_default=True, help="Log lines as text or one JSON object each."),
        ]):
            fn = option(fn)
        return fn
    return decorate


def http_settings(http_address: str | None, ops_address: str | None,
                  ready_max_unsigned: float, http_busy_rate: float = 200.0) -> HttpSettings:
    return HttpSettings(parse_address(http_address, "--http"),
                        parse_address(ops_address, "--ops"), ready_max_unsigned,
                        http_busy_rate or None)
