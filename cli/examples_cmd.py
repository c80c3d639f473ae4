"""``fleet examples``: the examples installed with ``fleet`` (sample devcontainers, agents
written against the runtime), and a copy of them to edit and run from."""

from __future__ import annotations

from pathlib import Path

import click

from fleet_ledger.cli._app import UserError, cli
from fleet_ledger.cli._common import emit_json


def _files(folder: Path) -> list[str]:
    """The example files under ``folder``, relative, sorted (no caches)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


@cli.command("examples")
@click.option("--copy-to", type=click.Path(file_okay=False, path_type=Path),
              help="Copy the examples into this folder (made if missing); an existing file "
              "there is a mistake, never overwritten.")
@click.option("--json", "as_json", is_flag=True, help="Print folder and files as JSON.")
def examples(copy_to: Path | None, as_json: bool) -> None:
    """Where the examples are (then e.g. `fleet runtime start triage:triage ... --path
    FOLDER`), or a copy of them in a folder of yours."""
    from fleet_ledger.cli._samples import examples_folder

    folder = examples_folder()
    files = _files(folder)
    if copy_to is not None:
        taken = [f for f in files if (copy_to / f).exists()]
        if taken:
            raise UserError(f"--copy-to: {copy_to / taken[0]} exists (not overwritten)")
        for f in files:
            (copy_to / f).parent.mkdir(parents=True, exist_ok=True)
            (copy_to / f).write_bytes((folder / f).read_bytes())
        folder = copy_to
    if as_json:
        emit_json({"folder": str(folder), "files": files})
        return
    click.echo(f"{'copied to' if copy_to is not None else 'examples in'} {folder}:")
    for f in files:
        click.echo(f"  {f}")
