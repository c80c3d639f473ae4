"""NATS server configuration for a fleet: one account, nkey users, least-privilege permissions.

Format: a nats-server configuration file (one per node for a cluster) whose ``accounts``
block holds account ``FLEET`` (JetStream enabled) and the system account ``SYS``. Every
user is an nkey user: the file holds only its public key (``U...``); the seed (``SU...``)
is written beside it in ``creds/<name>.nk`` with mode 0600 and never printed.

Users and what they may do (publish / subscribe; everything else is denied)::

    host <h>   pub  fleet.seg.<h>.>                     its own segments only
                    fleet.api.export, fleet.api.prove    records and proofs of runs to adopt
                    fleet.api.rejections                 refusals missed while away
               sub  fleet.rej.<h>, _INBOX.<h>.>          its refusals, its replies
    ledger     pub  fleet.>, $JS.API.>, $JS.ACK.>, $JS.FC.>, $SRV.>, $KV.>, _INBOX.>
               sub  fleet.>, $SRV.>, _INBOX.>
                    ($KV.>: the replicas' lease and heartbeats, ledger.replica)
    reader     pub  fleet.api.>, $SRV.*.fleet-ledger[.*]  the API and its discovery
               sub  fleet.checkpoint[.cosigned], _INBOX.reader.>
    issuer     pub  fleet.ctl.grant                      grant events (fleet grant ...)
                    fleet.ctl.job                        job events (fleet job open|seal)
                    fleet.api.grant, fleet.api.run       a grant's and a run's state
                    fleet.api.rejections                 the decision on an event it sent
               sub  _INBOX.issuer.>                      its replies (stream acks)
    sys        (system account SYS) server monitoring and events

A host's JetStream publish (``Nats-Msg-Id``, ``Nats-Expected-Last-Subject-Sequence``)
is a plain publish with a reply subject: the server sends the ack into the host's inbox,
so a host needs no ``$JS.API`` permission. The ``issuer`` user is the transport of every
grant event (an issuer's grants and amendments, a holder's mints and checkpoints, a
trigger): each event is signed by the principal the ledger checks, so one user for all of
them lets no one do more than their keys allow, and it can touch nothing else. Hosts, the
reader and the issuer each get a private inbox prefix (``_INBOX.<name>``) so no client
can read another's replies; they must connect with ``inbox_prefix=inbox_prefix(name)``.
The ledger may subscribe to ``_INBOX.>`` and so works with nats-py's default prefix.

Cluster routes (port 6222) carry no credentials, because a route URL could only hold a
plaintext password: keep the route port on a private network.

Generating (the text functions are pure; :func:`write_config` does the file I/O)::

    write_config(Path("out"), ["host1", "host2"], cluster=3)
    # out/n1.conf out/n2.conf out/n3.conf out/creds/{host1,host2,ledger,reader,issuer,sys}.nk
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import nkeys

from fleet_ledger.fleet.subjects import (
    API,
    API_SERVICE,
    CHECKPOINTS,
    DEFAULT_FLEET,
    SEGMENTS,
    STREAM,
    api_subject,
    check_host_name,
    rejection_subject,
)
from fleet_ledger.plumbing.files import write_secret

ACCOUNT: Final = STREAM
SYSTEM_ACCOUNT: Final = "SYS"
LEDGER: Final = "ledger"
READER: Final = "reader"
ISSUER: Final = "issuer"
SYSTEM_USER: Final = "sys"
RESERVED_NAMES: Final = frozenset({LEDGER, READER, ISSUER, SYSTEM_USER})

CLUSTER_NAME: Final = "fleet"
ROUTE_PORT: Final = 6222
SERVICE_PREFIX: Final = "nats"  # compose service names nats1..natsN
DEFAULT_PORT: Final = 4222
DEFAULT_STORE: Final = "/data"  # the server keeps its streams in <store>/jetstream
SINGLE_FILE: Final = "nats.conf"
CREDS_DIR: Final = "creds"
SEED_SUFFIX: Final = ".nk"


@dataclass(frozen=True)
class Permissions:
    """What one user may publish and subscribe to; anything not listed is denied."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


@dataclass(frozen=True)
class User:
    """A named nkey user: ``public_key`` is its ``U...`` key, never the seed."""

    name: str
    public_key: str
    permissions: Permissions | None  # None: no restriction (the system user only)


def inbox_prefix(name: str) -> str:
    """The inbox prefix a host or the reader must connect with (``_INBOX.<name>``)."""
    return f"_INBOX.{name}"


def host_permissions(host: str) -> Permissions:
    check_host_name(host)
    return Permissions(
        # A host adopting a parked run reads its record and a proof of its head (read-only
        # API endpoints; never the rest of the API).
        publish=(f"{SEGMENTS}.{host}.>", api_subject("export"), api_subject("prove"),
                 api_subject("rejections")),
        subscribe=(rejection_subject(host), f"{inbox_prefix(host)}.>"),
    )


def ledger_permissions() -> Permissions:
    return Permissions(
        publish=("fleet.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$SRV.>", "$KV.>", "_INBOX.>"),
        subscribe=("fleet.>", "$SRV.>", "_INBOX.>"),
    )


def reader_permissions() -> Permissions:
    return Permissions(
        publish=(f"{API}.>", f"$SRV.*.{API_SERVICE}", f"$SRV.*.{API_SERVICE}.*"),
        subscribe=(CHECKPOINTS, f"{CHECKPOINTS}.cosigned", f"{inbox_prefix(READER)}.>"),
    )


def issuer_permissions() -> Permissions:
    return Permissions(
        publish=(DEFAULT_FLEET.grant_subject, DEFAULT_FLEET.job_subject, api_subject("grant"),
                 api_subject("run"), api_subject("rejections"), api_subject("job")),
        subscribe=(f"{inbox_prefix(ISSUER)}.>",),
    )


def fleet_permissions(name: str) -> Permissions:
    """The permissions of the FLEET account user called ``name`` (a host unless reserved)."""
    if name == LEDGER:
        return ledger_permissions()
    if name == READER:
        return reader_permissions()
    if name == ISSUER:
        return issuer_permissions()
    return host_permissions(name)


def check_hosts(hosts: Sequence[str]) -> list[str]:
    """Host names as given, each valid, unique and not a reserved user name."""
    seen: list[str] = []
    for host in hosts:
        check_host_name(host)
        if host in RESERVED_NAMES:
            raise ValueError(f"{host!r} is a reserved user name, not a host name")
        if host in seen:
            raise ValueError(f"host {host!r} is listed twice")
        seen.append(host)
    if not seen:
        raise ValueError("at least one host name is needed")
    return seen


def user_names(hosts: Sequence[str]) -> list[str]:
    """Every user a fleet config has: its hosts, then ledger, reader, issuer and sys."""
    return [*check_hosts(hosts), LEDGER, READER, ISSUER, SYSTEM_USER]


def node_names(cluster: int) -> list[str]:
    """Server names of a cluster's nodes (``n1``..``nN``); one node is ``fleet``."""
    if cluster < 1:
        raise ValueError(f"a cluster has at least one node, got {cluster}")
    return ["fleet"] if cluster == 1 else [f"n{i}" for i in range(1, cluster + 1)]


def config_file_name(server_name: str, cluster: int) -> str:
    return SINGLE_FILE if cluster == 1 else f"{server_name}.conf"


def _quote(text: str) -> str:
    if any(c in text for c in '"\\\n'):
        raise ValueError(f"cannot quote {text!r} in a nats-server config")
    return f'"{text}"'


def _subject_list(subjects: Sequence[str]) -> str:
    return "[" + ", ".join(_quote(s) for s in subjects) + "]"


def _user_block(user: User, indent: str) -> list[str]:
    lines = [f"{indent}# {user.name}", f"{indent}{{ nkey: {user.public_key}"]
    if user.permissions is not None:
        perms = user.permissions
        lines += [
            f"{indent}  permissions: {{",
            f"{indent}    publish: {{ allow: {_subject_list(perms.publish)} }}",
            f"{indent}    subscribe: {{ allow: {_subject_list(perms.subscribe)} }}",
            f"{indent}  }}",
        ]
    lines.append(f"{indent}}}")
    return lines


def accounts_text(users: Sequence[User]) -> str:
    """The ``accounts`` block: every user but ``sys`` in FLEET, ``sys`` in SYS."""
    fleet = [u for u in users if u.name != SYSTEM_USER]
    system = [u for u in users if u.name == SYSTEM_USER]
    lines = ["accounts {", f"  {ACCOUNT} {{", "    jetstream: enabled", "    users: ["]
    for user in fleet:
        lines += _user_block(user, "      ")
    lines += ["    ]", "  }", f"  {SYSTEM_ACCOUNT} {{", "    users: ["]
    for user in system:
        lines += _user_block(user, "      ")
    lines += ["    ]", "  }", "}", f"system_account: {SYSTEM_ACCOUNT}"]
    return "\n".join(lines) + "\n"


def server_config(
    users: Sequence[User],
    *,
    server_name: str,
    host_address: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    store_dir: str = DEFAULT_STORE,
    routes: Sequence[str] = (),
) -> str:
    """The text of one nats-server config; ``routes`` (service host names) make it a cluster node.

    ``port`` may be -1 for a random port (tests read the chosen one from the server's log).
    """
    lines = [
        "# Generated by `fleet nats-config`; regenerate rather than edit.",
        "# Public nkeys only: each seed is in creds/<name>.nk beside this file.",
        f"server_name: {_quote(server_name)}",
        f"listen: {_quote(f'{host_address}:{port}')}",
        "",
        "jetstream {",
        f"  store_dir: {_quote(store_dir)}",
        "}",
        "",
    ]
    if routes:
        lines += [
            "cluster {",
            f"  name: {CLUSTER_NAME}",
            f"  listen: {_quote(f'{host_address}:{ROUTE_PORT}')}",
            "  routes: [",
            *(f"    {_quote(f'nats-route://{r}:{ROUTE_PORT}')}" for r in routes),
            "  ]",
            "}",
            "",
        ]
    return "\n".join(lines) + "\n" + accounts_text(users)


def cluster_configs(
    users: Sequence[User],
    *,
    cluster: int = 1,
    host_address: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    store_dir: str = DEFAULT_STORE,
) -> dict[str, str]:
    """File name to config text: ``nats.conf`` for one node, ``n1.conf``..``nN.conf`` else.

    Cluster nodes route to each other by the compose service names ``nats1``..``natsN``.
    """
    routes = [f"{SERVICE_PREFIX}{i}" for i in range(1, cluster + 1)] if cluster > 1 else []
    return {
        config_file_name(name, cluster): server_config(
            users,
            server_name=name,
            host_address=host_address,
            port=port,
            store_dir=store_dir,
            routes=routes,
        )
        for name in node_names(cluster)
    }


def new_seed() -> bytes:
    """A fresh nkey user seed (``SU...``)."""
    return bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))


def public_key(seed: bytes) -> str:
    """The ``U...`` public key of a user seed; ValueError if it is not one."""
    try:
        pair = nkeys.from_seed(bytearray(seed.strip()))
        key = pair.public_key.decode()
    except (nkeys.NkeysError, ValueError, TypeError) as exc:
        raise ValueError("not an nkey seed") from exc
    if not key.startswith("U"):
        raise ValueError("not a user nkey seed (it must start with 'SU')")
    return key


@dataclass(frozen=True)
class Written:
    """What :func:`write_config` wrote: config files, and seed files (new or kept)."""

    configs: list[Path]
    new_seeds: list[Path]
    kept_seeds: list[Path]


def _load_or_create_seed(path: Path) -> tuple[bytes, bool]:
    if path.exists():
        seed = path.read_bytes().strip()
        try:
            public_key(seed)
        except ValueError as exc:
            raise ValueError(
                f"{path} holds no user nkey seed; remove it to make a new one"
            ) from exc
        os.chmod(path, 0o600)
        return seed, False
    seed = new_seed()
    write_secret(path, seed.decode() + "\n")
    return seed, True


def write_config(
    out: Path,
    hosts: Sequence[str],
    *,
    cluster: int = 1,
    host_address: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    store_dir: str = DEFAULT_STORE,
) -> Written:
    """Write the config file(s) into ``out`` and a seed per user into ``out/creds``.

    A seed file that already exists is kept (so re-running to add a host does not lock out
    the others); delete it to rotate that user's key.
    """
    names = user_names(hosts)
    node_names(cluster)  # raises on a bad cluster size before anything is written
    creds = out / CREDS_DIR
    creds.mkdir(parents=True, exist_ok=True)
    os.chmod(creds, 0o700)
    users: list[User] = []
    new: list[Path] = []
    kept: list[Path] = []
    for name in names:
        path = creds / f"{name}{SEED_SUFFIX}"
        seed, created = _load_or_create_seed(path)
        (new if created else kept).append(path)
        perms = None if name == SYSTEM_USER else fleet_permissions(name)
        users.append(User(name=name, public_key=public_key(seed), permissions=perms))
    configs: list[Path] = []
    texts = cluster_configs(
        users, cluster=cluster, host_address=host_address, port=port, store_dir=store_dir
    )
    for file_name, text in texts.items():
        path = out / file_name
        # Rewritten in place, not renamed over: a container that bind-mounts this one file
        # keeps the old inode, and must see the new text when the server reloads.
        path.write_text(text)
        configs.append(path)
    return Written(configs=configs, new_seeds=new, kept_seeds=kept)
