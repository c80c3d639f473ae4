"""The ``fleet`` command. Each module below adds its commands to the one click group."""

from __future__ import annotations

from fleet.cli import (
    nats_cmds,  # noqa: F401
    record_cmds,  # noqa: F401  (registers commands)
)
from fleet.cli._app import cli, run


def main() -> None:
    run(cli)


__all__ = ["cli", "main"]
