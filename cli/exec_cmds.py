"""``fleet exec``: content-addressed process control (docs/process-control.md).

    fleet exec policy build --deny ./nc --allow-dir /usr/bin --out policy.json
    fleet exec policy show policy.json
    fleet exec policy verify policy.json --address b3:...
    fleet exec run --policy policy.json --journal host/exec.db -- python3 job.py
    fleet exec journal host/exec.db
    fleet exec probe
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.cli._common import emit_json
from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.env.exec_errors import ExecError, ExecGuardUnavailable
from fleet_ledger.fleet.env.exec_journal import UNPINNED
from fleet_ledger.fleet.env.exec_policy import (
    ALLOW,
    DENY,
    ExecPolicy,
    build_policy,
    policy_from_json,
    policy_to_json,
)
from fleet_ledger.fleet.errors import MalformedAddress


@cli.group("exec")
def exec_group() -> None:
    """Run units under exec policies: allow or deny file bytes by their BLAKE3."""


@exec_group.group("policy")
def policy_group() -> None:
    """Build, show and verify exec policies."""


def file_address(path: Path) -> bytes:
    """BLAKE3 of a file's bytes."""
    from fleet_ledger.agents.host_linux import hash_fd

    with path.open("rb") as f:
        return hash_fd(f.fileno())


def _target(spec: str, verdict: str) -> tuple[bytes, str, str]:
    """``PATH``, ``b3:ADDRESS``, either followed by ``#LABEL``: a rule."""
    where, _, label = spec.partition("#")
    if where.startswith("b3:") and not Path(where).exists():
        try:
            return parse_address(where), verdict, label or "by address"
        except MalformedAddress as exc:
            raise UserError(f"{spec}: {exc}") from None
    path = Path(where)
    if not path.is_file():
        raise UserError(f"{where}: no such file (give a file or a b3: address)")
    return file_address(path), verdict, label or path.name


def _dir_rules(folder: Path, verdict: str) -> list[tuple[bytes, str, str]]:
    """A rule for every executable regular file directly in ``folder``."""
    if not folder.is_dir():
        raise UserError(f"{folder}: not a directory")
    rules = []
    for entry in sorted(folder.iterdir()):
        try:
            st = entry.stat()
        except OSError:
            continue  # a dangling link
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and os.access(entry, os.R_OK):
            rules.append((file_address(entry), verdict, entry.name[:128]))
    return rules


def load_policy(path: Path) -> ExecPolicy:
    """A policy file, checked; one line and exit 2 when it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not JSON: {exc}") from None
    try:
        return policy_from_json(doc)
    except ExecError as exc:
        raise UserError(f"{path}: {exc.rule}: {exc}") from None


def _summary(policy: ExecPolicy) -> dict[str, Any]:
    return {"address": format_address(policy.address), "mode": policy.mode,
            "default": policy.default, "rules": len(policy.rules), **policy.counts()}


@policy_group.command("build")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the policy file.")
@click.option("--default", "default", type=click.Choice([ALLOW, DENY]), default=None,
              help="Verdict for unlisted bytes: allow (deny-listed mode, the default for a "
                   "new policy) or deny (allow-listed mode).")
@click.option("--allow", "allows", multiple=True, metavar="PATH|b3:ADDR[#LABEL]",
              help="Allow these bytes (repeatable). The label defaults to the file's name.")
@click.option("--deny", "denies", multiple=True, metavar="PATH|b3:ADDR[#LABEL]",
              help="Deny these bytes (repeatable). Deny beats allow.")
@click.option("--allow-dir", "allow_dirs", multiple=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Allow every executable file directly in this folder (repeatable).")
@click.option("--deny-dir", "deny_dirs", multiple=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Deny every executable file directly in this folder (repeatable).")
@click.option("--from", "base", type=click.Path(dir_okay=False, path_type=Path),
              help="Start from this policy's rules (and default, unless --default is given).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def policy_build(out: Path, default: str | None, allows: tuple[str, ...],
                 denies: tuple[str, ...], allow_dirs: tuple[Path, ...],
                 deny_dirs: tuple[Path, ...], base: Path | None, as_json: bool) -> None:
    """Write a canonical policy file from files, folders and addresses."""
    rules: list[tuple[bytes, str, str]] = []
    start = load_policy(base) if base is not None else None
    if start is not None:
        rules += [(r.bytes, r.verdict, r.label) for r in start.rules]
    rules += [_target(s, ALLOW) for s in allows] + [_target(s, DENY) for s in denies]
    for d in allow_dirs:
        rules += _dir_rules(d, ALLOW)
    for d in deny_dirs:
        rules += _dir_rules(d, DENY)
    chosen = default or (start.default if start is not None else ALLOW)
    try:
        policy = build_policy(chosen, rules)
    except ExecError as exc:
        raise UserError(f"{exc.rule}: {exc}") from None
    out.write_text(json.dumps(policy_to_json(policy), indent=2) + "\n")
    if as_json:
        emit_json({"file": str(out), **_summary(policy)})
    else:
        click.echo(f"{format_address(policy.address)}  {policy.mode}, {len(policy.rules)} "
                   f"rules -> {out}")


@policy_group.command("show")
@click.argument("policy_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the policy file form.")
def policy_show(policy_file: Path, as_json: bool) -> None:
    """Print a policy: address, mode and every rule."""
    policy = load_policy(policy_file)
    if as_json:
        emit_json(policy_to_json(policy))
        return
    s = _summary(policy)
    click.echo(f"policy {s['address']}")
    click.echo(f"  {s['mode']} (unlisted bytes: {s['default']}), {s['allow']} allowed, "
               f"{s['deny']} denied")
    for r in policy.rules:
        click.echo(f"  {r.verdict:<5}  {format_address(r.bytes)}  {r.label}")


@policy_group.command("verify")
@click.argument("policy_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--address", help="The address the policy must have (as a grant names it).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def policy_verify(policy_file: Path, address: str | None, as_json: bool) -> None:
    """Check a policy file is canonical and hashes to its stated address (and --address)."""
    try:
        doc = json.loads(policy_file.read_text())
    except FileNotFoundError:
        raise UserError(f"{policy_file}: no such file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{policy_file}: not JSON: {exc}") from None
    try:
        policy = policy_from_json(doc)
        if address is not None and parse_address(address) != policy.address:
            raise CheckFailed(f"{policy_file}: policy is {format_address(policy.address)}, "
                              f"not {address}")
    except (ExecError, MalformedAddress) as exc:
        if as_json:
            emit_json({"verdict": "invalid", "rule": exc.rule, "error": str(exc)})
        raise CheckFailed(f"{policy_file}: invalid: {exc.rule}: {exc}") from None
    except CheckFailed:
        if as_json:
            emit_json({"verdict": "invalid", "rule": "AddressMismatch",
                       "address": format_address(policy.address)})
        raise
    if as_json:
        emit_json({"verdict": "valid", **_summary(policy)})
    else:
        click.echo(f"valid: {format_address(policy.address)} ({policy.mode}, "
                   f"{len(policy.rules)} rules)")


@exec_group.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="The policy file (reloaded on SIGHUP).")
@click.option("--journal", type=click.Path(dir_okay=False, path_type=Path),
              default="exec-journal.db", show_default=True, envvar="FLEET_EXEC_JOURNAL",
              help="The exec journal (SQLite) in the run's host folder.")
@click.option("--run", "run_id", help="The run this unit belongs to (kept in the journal).")
@click.option("--mark", "marks", multiple=True,
              help="Mark only the unit's mounts holding these paths (repeatable). Default: "
                   "every mount of the unit's namespace that can hold files.")
@click.option("--user", help="Run the unit as this user (name or uid) and its group.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a JSON summary here when the unit ends.")
@click.option("--keep-capabilities", is_flag=True,
              help="Leave a root unit its capabilities. This gives up the guarantee: with "
                   "CAP_SYS_ADMIN or CAP_SYS_PTRACE a unit can run bytes the guard never "
                   "sees (docs/process-control.md).")
@click.option("--deny-write-exec", is_flag=True,
              help="Refuse memory made executable after it was writable (PR_SET_MDWE, Linux "
                   "6.3): closes code built in memory, breaks JIT compilers.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_run(policy_file: Path, journal: Path, run_id: str | None, marks: tuple[str, ...],
             user: str | None, report: Path | None, keep_capabilities: bool,
             deny_write_exec: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND as a unit under the policy; exits with the unit's status, or 126 when
    the guard refuses COMMAND itself. SIGHUP reloads the policy, SIGUSR1 ends the
    journal's interval, SIGINT/SIGTERM go to the unit."""
    from fleet_ledger.cli._exec_run import run_unit

    policy = load_policy(policy_file)
    uid = gid = None
    if user is not None:
        import pwd

        try:
            pw = pwd.getpwnam(user) if not user.isdigit() else pwd.getpwuid(int(user))
        except KeyError:
            raise UserError(f"no such user: {user}") from None
        uid, gid = pw.pw_uid, pw.pw_gid
    try:
        code, summary = run_unit(policy, policy_file, list(command), journal=journal,
                                 run_id=run_id, marks=list(marks) or None, uid=uid, gid=gid,
                                 load=load_policy, keep_capabilities=keep_capabilities,
                                 deny_write_exec=deny_write_exec)
    except ExecGuardUnavailable as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot run {command[0]}: {exc.strerror}") from None
    except subprocess.SubprocessError as exc:  # the unit's set-up between fork and exec
        raise UserError(f"cannot start {command[0]} as a unit: {exc}") from None
    if report is not None:
        report.write_text(json.dumps(summary, indent=2) + "\n")
    if summary["denied_first"]:
        click.echo(f"fleet exec: {command[0]}: refused by the exec policy (exit 126)",
                   err=True)
    click.echo(f"fleet exec: {summary['stats']['denied']} denied, {summary['stats']['allowed']}"
               f" allowed; journal {journal}, interval root {summary['root']}", err=True)
    sys.exit(code)


def check_roots(journal: dict[str, Any], journal_file: Path) -> None:
    """Refuse a journal file (read by ``read_journal``) with an entry whose stored bytes do
    not match its fields, or whose stored interval roots do not match their entries."""
    entries = journal.get("bad_entries", [])
    if entries:
        first = entries[0]
        raise CheckFailed(f"{journal_file}: entries {[e['seq'] for e in entries]} do not "
                          f"match their stored bytes (entry {first['seq']} of interval "
                          f"{first['interval']}: {first['error']})")
    bad = [i["interval"] for i in journal["intervals"] if i.get("root_matches") is False]
    if bad:
        raise CheckFailed(f"{journal_file}: stored roots of intervals {bad} do not match "
                          "their entries")


def audit_journal(journal: dict[str, Any], data: bytes, what: str) -> list[dict[str, Any]]:
    """Verify a record file's bytes (refused as ``what: rule: reason``), then, for each of
    its executed segments, the exec-journal interval whose root is its attestation's
    journal root, with that interval's counts (``interval``: ``None`` when no interval has
    that root, e.g. a root folded with a replay journal's)."""
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import ExecutedWire, decode_record

    try:
        record = decode_record(data)
        verify_record(record)
    except FleetError as exc:
        raise CheckFailed(f"{what}: {exc.rule}: {exc}") from None
    roots = {i["root"]: i for i in journal["intervals"]}
    out = []
    for number, seg in enumerate(record.segments, 1):
        if not isinstance(seg, ExecutedWire):
            continue
        root = seg.attestation_object.journal_root
        hit = roots.get(root)
        out.append({"segment": number, "journal_root": root,
                    "interval": hit["interval"] if hit else None,
                    "entries": hit["entries"] if hit else None,
                    "denied": hit["denied"] if hit else None})
    return out


@exec_group.command("journal")
@click.argument("journal_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--record", "record_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A run record file (fleet run export): verify it and show which executed "
                   "segment commits to which interval of the journal.")
@click.option("--all", "show_all", is_flag=True, help="List allows too, not only denials.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def exec_journal(journal_file: Path, record_file: Path | None, show_all: bool,
                 as_json: bool) -> None:
    """Show an exec journal: each interval's root (recomputed) and its decisions."""
    from fleet_ledger.agents.exec_journal_store import read_journal

    if not journal_file.is_file():
        raise UserError(f"{journal_file}: no such file")
    doc = read_journal(journal_file)
    if record_file is not None:
        doc["record"] = _audit_record(doc, record_file)
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"exec journal {journal_file}" + (f" (run {doc['run']})" if doc["run"]
                                                       else ""))
        for i in doc["intervals"]:
            state = "sealed" if i["sealed"] else "open"
            click.echo(f"  interval {i['interval']} ({state}): {i['entries']} entries, "
                       f"{i['denied']} denied, root {i['root']}")
            for d in i["decisions"]:
                if show_all or d["verdict"] == DENY:
                    click.echo(f"    {d['verdict']:<5} {d['access']:<4} {d['bytes']} "
                               f"{d['label']}  {d['path']}"
                               + ("  (unpinned)" if d["cause"] == UNPINNED else ""))
        for m in doc.get("record", []):
            where = (f"interval {m['interval']} ({m['denied']} denied)" if m["interval"]
                     else "no interval of this journal")
            click.echo(f"  segment {m['segment']}: journal root {m['journal_root']} = {where}")
    check_roots(doc, journal_file)


def _audit_record(journal: dict[str, Any], record_file: Path) -> list[dict[str, Any]]:
    try:
        data = record_file.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{record_file}: no such file") from None
    return audit_journal(journal, data, f"{record_file}: invalid")


@exec_group.command("probe")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def exec_probe(as_json: bool) -> None:
    """Can this host enforce exec policies? (fanotify permission events, cgroup v2, seccomp,
    a mount namespace for the unit)"""
    from fleet_ledger.cli._exec_run import probe_host

    doc = probe_host()
    if as_json:
        emit_json(doc)
    else:
        for k, v in doc["checks"].items():
            click.echo(f"{k}: {'ok' if v is None else v}")
    if not doc["ok"]:
        raise CheckFailed("this host cannot enforce exec policies")

