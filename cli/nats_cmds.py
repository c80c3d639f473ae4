"""``fleet nats-config``: write nats-server configs with nkey users, and their seed files."""

from __future__ import annotations

from pathlib import Path

import click

from fleet_ledger.cli._app import UserError, cli
from fleet_ledger.ledger.nats_config import DEFAULT_PORT, DEFAULT_STORE, write_config


@cli.command("nats-config")
@click.option(
    "--hosts",
    required=True,
    metavar="H1,H2,...",
    help="Comma-separated host names; each gets its own nkey user.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the config file(s); seeds go to OUT/creds/<name>.nk (mode 0600).",
)
@click.option(
    "--cluster",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Nodes: 1 writes nats.conf; N>1 writes n1.conf..nN.conf routing to nats1..natsN.",
)
@click.option(
    "--js-dir",
    default=None,
    help="JetStream store folder on the server, which keeps its streams in JS_DIR/jetstream "
    f"[default: {DEFAULT_STORE} for a cluster, OUT for one node].",
)
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="Client port.")
@click.option(
    "--host-address",
    default="0.0.0.0",
    show_default=True,
    help="Address the server listens on (clients and cluster routes).",
)
def nats_config(
    hosts: str, out: Path, cluster: int, js_dir: str | None, port: int, host_address: str
) -> None:
    """Write a nats-server config with account FLEET, nkey users and their permissions.

    Users: one per host, `ledger`, a read-only `reader`, `issuer` (grant events), and
    `sys` (system account). A seed already in OUT/creds is kept, so re-running keeps
    existing users' keys; delete a seed file to rotate that key. Prints the paths written,
    never a seed.
    """
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if js_dir is None:
        js_dir = DEFAULT_STORE if cluster > 1 else str(out.resolve())
    try:
        written = write_config(
            out, names, cluster=cluster, host_address=host_address, port=port, store_dir=js_dir
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot write to {out}: {exc.strerror or exc}") from None
    for path in written.configs:
        click.echo(f"config  {path}")
    for path in written.new_seeds:
        click.echo(f"seed    {path} (new)")
    for path in written.kept_seeds:
        click.echo(f"seed    {path} (kept)")
