"""Named refusals through a running ledger: segments published straight into the stream on
another host's subject or by a host nobody enrolled, and a host enrolled or revoked with the
CLI while the ledger runs. The ledger keeps folding; the refusals are listed and counted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path

import nats
import pytest

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.note import parse_verifier_key
from fleet_ledger.fleet.log.proof_bundle import verify_bundle
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import REJECTIONS, segment_subject
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, host_key, sealed_run, store_summary
from pipeline_helpers import api, cli, cli_json, wait_folded

pytestmark = pytest.mark.timeout(120)


def _pub(name: str) -> str:
    return encode_key(bytes(host_key(name).verify_key))


def _publish(url: str, msgs: Iterable[tuple[str, bytes]]) -> list[int]:
    """Publish straight into the stream (no outbox, no expected sequence); the seqs."""
    async def go() -> list[int]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(timeout=10.0)
            await ensure_stream(js)
            return [(await js.publish(s, d)).seq for s, d in msgs]
        finally:
            await nc.close()

    return asyncio.run(go())


def test_subject_mismatch_and_unknown_host_are_refused_and_folding_goes_on(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A segment on another host's subject is SubjectMismatch, one from an unenrolled host
    UnknownHost; both are listed and counted, sent to the hosts, and later segments fold."""
    url, led = nats_server.url, tmp_path / "ledger"
    led.mkdir()
    for name in ("h1", "h2"):
        cli("host", "enroll", name, "--pubkey", _pub(name), "--data", str(led))
    good = sealed_run("h1", "unit-good", "eprec")
    theirs = sealed_run("h1", "unit-stolen", "e")  # genuine h1 bytes on h2's subject
    stolen = (segment_subject("h2", format_address(theirs.run)), theirs.messages[0][1])
    ghost = sealed_run("ghost", "unit-ghost", "ee")
    later = sealed_run("h2", "unit-later", "epre")
    notified: list[tuple[str, dict]] = []

    async def watch(stop: asyncio.Event, ready: asyncio.Event) -> None:
        nc = await nats.connect(url)
        try:
            async def on(msg: nats.aio.msg.Msg) -> None:
                notified.append((msg.subject, json.loads(msg.data)))

            await nc.subscribe(f"{REJECTIONS}.>", cb=on)
            await nc.flush()
            ready.set()
            await stop.wait()
        finally:
            await nc.close()

    with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        ledger.start()

        async def scenario() -> None:
            stop, ready = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(watch(stop, ready))
            await ready.wait()
            await asyncio.to_thread(_publish, url, [*good.messages, stolen, *ghost.messages])
            await asyncio.to_thread(wait_folded, url, led)
            await asyncio.to_thread(_publish, url, later.messages)
            await asyncio.to_thread(wait_folded, url, led)
            await asyncio.sleep(0.5)  # refusals are published just after their batch commits
            stop.set()
            await task

        asyncio.run(scenario())
        status = cli_json("status", "--json", "--nats", url)
        listed = cli_json("rejections", "--json", "--nats", url)
        text = cli("rejections", "--nats", url).stdout
        assert ledger.alive()
    n_good = len(good.messages) + len(later.messages)
    assert status["healthy"] is True
    assert status["rejected"] == {"SubjectMismatch": 1, "UnknownHost": 2}
    assert status["tree_size"] == status["segments_folded"] == n_good
    assert sorted((r["rule"], r["host"]) for r in listed) == [
        ("SubjectMismatch", "h2"), ("UnknownHost", "ghost"), ("UnknownHost", "ghost")]
    mismatch = next(r for r in listed if r["rule"] == "SubjectMismatch")
    assert mismatch["run"] == format_address(theirs.run) and mismatch["index"] == 1
    assert "SubjectMismatch" in text and "UnknownHost" in text
    assert sorted((s, b["rule"]) for s, b in notified) == [
        ("fleet.rej.ghost", "UnknownHost"), ("fleet.rej.ghost", "UnknownHost"),
        ("fleet.rej.h2", "SubjectMismatch")]
    held = store_summary(led)
    assert {r for r, *_ in held.runs} == {format_address(good.run), format_address(later.run)}
    held.check_leaves()


def test_enroll_while_running_and_revoke_keep_earlier_segments(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """`fleet host enroll` takes effect in a running ledger without a restart; after
    `fleet host revoke` the host's later segments are RevokedHost and its earlier ones stay
    in the log, still provable."""
    url, led = nats_server.url, tmp_path / "ledger"
    led.mkdir()
    early = sealed_run("h1", "unit-early", "e")
    run = sealed_run("h1", "unit-run", "eprec")
    with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        _publish(url, early.messages)
        wait_folded(url, led)
        assert cli_json("status", "--json", "--nats", url)["rejected"] == {"UnknownHost": 1}

        assert cli("host", "enroll", "h1", "--pubkey", _pub("h1"), "--data", str(led)
                   ).stdout.strip() == "enrolled h1"
        _publish(url, run.messages[:3])
        wait_folded(url, led)
        mid = cli_json("status", "--json", "--nats", url)
        assert (mid["tree_size"], mid["runs"]) == (3, 1)

        assert cli("host", "revoke", "h1", "--data", str(led)).stdout.strip() == "revoked h1"
        _publish(url, run.messages[3:])
        wait_folded(url, led)
        end = cli_json("status", "--json", "--nats", url)
        shown = cli_json("run", "show", format_address(run.run), "--json", "--nats", url)
        bundle = api(url, "prove", {"run": format_address(run.run), "index": 3})
        missing = cli("host", "revoke", "nobody", "--data", str(led), check=False)
        assert ledger.alive()
    assert end["rejected"] == {"UnknownHost": 1, "RevokedHost": len(run.messages) - 3}
    assert end["tree_size"] == 3 and shown["segments"] == 3 and shown["phase"] == "resumed"
    hosts = {h["name"]: h for h in end["hosts"]}
    assert hosts["h1"]["revoked_after"] == mid["stream_seq"]
    vkey = parse_verifier_key((led / "ledger.vkey").read_text().strip())
    assert verify_bundle(bundle, [vkey]).leaf.index == 3
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == ["Error: no enrolled host named 'nobody'"]
