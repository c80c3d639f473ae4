"""The ``fleet`` command. Every public module of this package adds its commands to the one
click group when imported, so a new command is a new module and nothing else."""

from __future__ import annotations

import importlib
import pkgutil

from cli._app import cli, run

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def main() -> None:
    run(cli)


__all__ = ["cli", "main"]
