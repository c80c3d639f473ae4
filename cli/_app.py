"""The ``fleet`` click group and the error handling every command shares."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

import click


class UserError(click.ClickException):
    """A mistake by the person at the terminal: printed as one line, exit code 2."""

    exit_code = 2


class CheckFailed(click.ClickException):
    """Something checked did not hold (a record, a proof, a note): one line, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


def _set_fleet(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from fleet_ledger.fleet.subjects import fleet_names

    try:
        fleet_names(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    FLEET["name"] = value
    if value != "fleet":  # commands run as child processes (host simulate) inherit it
        os.environ["FLEET_NAME"] = value
    return value


# The fleet the command works in (``fleet --fleet NAME ...``): the prefix of the stream,
# subjects, API and buckets (fleet.subjects.fleet_names).
FLEET = {"name": "fleet"}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fleet-ledger")
@click.option("--fleet", envvar="FLEET_NAME", default="fleet", show_default=True,
              expose_value=False, is_eager=True, callback=_set_fleet,
              help="The fleet's name: several fleets share one NATS cluster apart.")
def cli() -> None:
    """Fleet ledger: hash-chained run records, a Merkle fleet log, proofs anyone can check."""


def run(entry: Callable[..., Any]) -> None:
    """Run the group. A file the user named that cannot be read or written, or a database
    that is not one, ends every command the same way: one line, exit 2, no traceback."""
    try:
        entry(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"Error: {exc.strerror or exc}{where}", err=True)
        sys.exit(UserError.exit_code)
    except sqlite3.DatabaseError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(UserError.exit_code)


@cli.group()
def bench() -> None:
    """Benchmarks: each prints JSON and compares against a baseline measured in the same run."""
