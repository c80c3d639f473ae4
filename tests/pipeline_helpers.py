"""Shared pieces of the pipeline suites (issue 4): the installed ``fleet`` program, waiting
for a ledger to reach the stream's end, and reading what hosts and ledgers hold.

Everything runs for real: ``fleet`` subprocesses (the console script beside the test's
Python, so the entry point itself is tested), a nats-server from the fixtures, SQLite files.
Every wait is bounded and fails with what it last saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleet_ledger.agents.host import PUB_FILE, load_or_create_key
from fleet_ledger.fleet.log.proof_bundle import verify_bundle
from fleet_ledger.ledger.client import call
from fleet_ledger.plumbing.natsd import free_ports

from fault_helpers import stream_state, wait_until

FLEET_BIN = str(Path(sys.executable).with_name("fleet"))


def cli(*args: str, timeout: float = 90.0, check: bool = True, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run the installed ``fleet`` program; with ``check``, fail on a non-zero exit."""
    result = subprocess.run([FLEET_BIN, *args], capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, check=False,
                            env=None if env is None else {**os.environ, **env})
    if check and result.returncode != 0:
        raise AssertionError(f"fleet {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def cli_json(*args: str, timeout: float = 90.0) -> Any:
    return json.loads(cli(*args, timeout=timeout).stdout)


def closed_port() -> int:
    """A loopback port nothing listens on (taken from the kernel, then released)."""
    return free_ports(1)[0]


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """A ``fleet`` child in its own session, output to ``log``; stop it with :func:`stop`."""
    with log.open("ab") as out:
        return subprocess.Popen([FLEET_BIN, *args], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[Any], sig: signal.Signals = signal.SIGTERM,
         timeout: float = 20.0) -> int:
    """Signal our own child by pid (SIGKILL if it outlives ``timeout``); its exit code."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


# -- ledger and stream positions ---------------------------------------------------------


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)


def watermark(data: Path) -> int:
    """The stream sequence a ledger's store has decided up to (0 with no store yet)."""
    if not (data / "ledger.db").exists():
        return 0
    db = _ro(data / "ledger.db")
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()
    return int(row[0]) if row else 0


def last_seq(url: str) -> int:
    return asyncio.run(stream_state(url))[1]


def wait_folded(url: str, *datas: Path, timeout: float = 60.0) -> int:
    """Wait until every ledger store in ``datas`` has decided the stream's last message."""
    def done() -> int | None:
        top = last_seq(url)
        marks = [watermark(d) for d in datas]
        return top if top and all(m == top for m in marks) else None

    return wait_until(done, timeout, f"ledgers {[str(d) for d in datas]} to fold the stream "
                      f"(watermarks {[watermark(d) for d in datas]}, stream {last_seq(url)})",
                      interval=0.2)


# -- hosts ------------------------------------------------------------------------------


def host_keys(base: Path, names: list[str]) -> dict[str, str]:
    """Create (or read) each host's seal key in ``base/<name>``; name -> public key."""
    out = {}
    for name in names:
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        load_or_create_key(d)
        out[name] = (d / PUB_FILE).read_text().strip()
    return out


def outbox_rows(host_dir: Path) -> list[tuple[str, int, str, str]]:
    """(run, idx, head, state) of every segment a host wrote (the head read from the
    sealed envelope; its msg id is the envelope's, ``fleet.record.wire.segment_id``)."""
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.record.wire import decode_envelope

    db = _ro(host_dir / "outbox.db")
    try:
        return [(r, i, format_address(decode_envelope(p).sealed.head), st)
                for r, i, p, st in db.execute(
                    "SELECT run, idx, payload, state FROM segments ORDER BY id")]
    finally:
        db.close()


# -- the API ----------------------------------------------------------------------------


def api(url: str, endpoint: str, body: dict[str, Any] | None = None) -> Any:
    return json.loads(asyncio.run(call(url, endpoint, body)))


def prove_all(url: str, runs: list[str], verifiers: list[Any]) -> list[Any]:
    """Each run's head proved through the API and verified offline (VerifiedBundle each)."""
    async def go() -> list[tuple[dict[str, Any], Any]]:
        out = []
        for r in runs:
            bundle = json.loads(await call(url, "prove", {"run": r}))
            out.append((bundle, verify_bundle(bundle, verifiers)))
        return out

    return asyncio.run(go())


def wait_proc(proc: subprocess.Popen[Any], timeout: float, what: str) -> int:
    """Wait for our child to exit within ``timeout``; kill it and fail if it does not."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(proc, signal.SIGKILL)
        raise AssertionError(f"{what} did not finish within {timeout}s") from None


def wait_for(pred: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    return wait_until(pred, timeout, what, interval)
