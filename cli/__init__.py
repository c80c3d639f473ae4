"""The ``fleet`` command, and the one place that wires the shells together (``_wiring``): it
may import every package. Every public module of this package adds its commands to the one
click group when imported, so a new command is a new module and nothing else; helpers that
are not commands start with an underscore."""

from __future__ import annotations

import importlib
import pkgutil

from fleet_ledger.cli._app import cli, run

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def main() -> None:
    run(cli)


__all__ = ["cli", "main"]
