"""Message identity on the stream: a segment's ``Nats-Msg-Id`` binds the whole sealed
envelope (its host and seal), so one host's message is never taken by the broker for a
duplicate of another's, and a publisher never counts as recorded what the ledger did not fold."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from gen_vectors_ids import OUT, render

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.control import event_id as control_event_id
from fleet_ledger.fleet.fold.grant_events import event_id as grant_event_id
from fleet_ledger.fleet.grants.grant import grant_address, sign_grant
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.run_codec import state_from_json, state_to_json
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.segment import make_snapshot
from fleet_ledger.fleet.record.wire import decode_envelope, segment_id
from fleet_ledger.plumbing.files import write_key_file
from fleet_ledger.plumbing.natsd import NatsServer

import grant_helpers as gh
from fault_helpers import MANIFEST, fleet, host_key, running_ledger, store_summary

HOUR = 3_600_000


def _hosts() -> list[tuple[str, str, int, None]]:
    return [(n, encode_key(bytes(host_key(n).verify_key)), 0, None) for n in ("h1", "h2")]


def _host(name: str, base: Path) -> Any:
    """A real host (outbox, runs) sealing with the key the ledger enrolled for ``name``."""
    from fleet_ledger.agents.host import Host

    (base / name).mkdir(parents=True)
    write_key_file(base / name / "host.key", host_key(name))
    return Host(name, base / name)


async def _folded(ledger: Any, js: Any) -> None:
    last = (await js.stream_info("FLEET")).state.last_seq
    deadline = time.monotonic() + 20
    while ledger.store.watermark() < last:
        assert time.monotonic() < deadline, "the ledger did not fold the stream"
        await asyncio.sleep(0.05)


def test_a_resume_byte_identical_to_a_refused_one_from_another_host_is_folded(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """Host h2 (not granted) resumes h1's park first and is refused HostNotGranted; h1's own
    resume of that park, identical in every field of its segment, is then folded, not
    dropped by the broker as a duplicate and counted as acked."""
    from fleet_ledger.agents.host import HostRun
    from fleet_ledger.agents.publisher import Publisher
    from fleet_ledger.agents.refusals import RefusalWatcher

    async def scenario() -> tuple[Any, Any, Any]:
        async with running_ledger(nats_server.url, tmp_path / "ledger", _hosts(), name="ids",
                                  grants="enforce") as (ledger, js):
            now = int(time.time() * 1000)
            g = sign_grant(gh.ISSUER, bytes(gh.AGENT.verify_key), gh.terms(
                hosts=["h1"], not_before_ms=now - HOUR, expires_ms=now + HOUR))
            issue = gh.issue_event(gh.ISSUER, g)
            await js.publish(gh.GRANT_SUBJECT, issue,
                             headers={"Nats-Msg-Id": grant_event_id(issue)})
            a, b = _host("h1", tmp_path / "hosts"), _host("h2", tmp_path / "hosts")
            try:
                run_a = a.open_run(digest(b"unit-race"), grant_address(g))
                run_a.execute(uj=1000, provenance="measured", meter="test",
                              journal_root=digest(b"j1"))
                park = make_snapshot(transcript=digest(b"park"))
                run_a.suspend(park, MANIFEST)
                assert (await Publisher(a.outbox, js).drain(timeout=20)).acked == 2
                await _folded(ledger, js)
                # h2 holds a verified copy of the park (adoption's checks: test_moving_runs).
                builder = RecordBuilder(b.key, run_a.state.unit_id, run_a.state.grants_id)
                builder.state = state_from_json(state_to_json(run_a.state))  # a copy
                run_b = HostRun(b, builder)
                run_b.verified = True
                same = {"idle_uj": 700, "provenance": "estimated", "meter": "estimate:test"}
                sealed_b = run_b.resume(park, MANIFEST, **same)
                assert (await Publisher(b.outbox, js).drain(timeout=20)).acked == 1
                await _folded(ledger, js)
                sealed_a = run_a.resume(park, MANIFEST, **same)
                assert sealed_a.head == sealed_b.head  # one head, two hosts' seals
                report = await Publisher(a.outbox, js).drain(timeout=20)
                await _folded(ledger, js)
                shown = await asyncio.to_thread(fleet, "run", "show", run_a.run, "--nats",
                                                nats_server.url)
                assert "refused: h2 segment 3 HostNotGranted at stream sequence" in (
                    shown.stdout), shown.stdout
                # h2 was not listening when it was refused: it asks, and learns it.
                watcher = RefusalWatcher(ledger.nc, "h2", b.outbox)
                assert await watcher.catch_up() == 1
                told = b.outbox.stopped_runs()
                assert list(told) == [run_a.run] and told[run_a.run].startswith(
                    "HostNotGranted at segment 3 (stream sequence"), told
                b.outbox.restart_run(run_a.run)  # the run came back to h2 (an adoption)
                again = RefusalWatcher(ledger.nc, "h2", b.outbox)  # e.g. after a restart
                assert await again.catch_up() == 0 and b.outbox.stopped_runs() == {}
                return report, run_a.run, a.outbox.stopped_runs()
            finally:
                a.close()
                b.close()

    report, run, stopped = asyncio.run(scenario())
    held = store_summary(tmp_path / "ledger")
    assert [r[1] for r in held.rejections] == ["HostNotGranted"]
    assert stopped == {}, stopped
    # h1's resume was appended to the stream (not a duplicate) and folded at index 3.
    assert report.acked == 1 and report.duplicates == 0, report
    assert [(r[0], r[1], r[2]) for r in held.runs] == [(run, "h1", 3)], held.runs


VECTORS = json.loads(Path(OUT).read_text())
PREFIX = {"segment": "seg", "control": "ctl", "grant": "gev"}
ID_OF = {"segment": segment_id, "control": control_event_id, "grant": grant_event_id}


def test_the_code_reproduces_the_id_vector_file() -> None:
    """The generator, run now, writes exactly the checked-in message_ids.json."""
    assert render() == Path(OUT).read_text()


@pytest.mark.parametrize("v", VECTORS["messages"], ids=lambda v: v["name"])
def test_each_id_is_blake3_of_the_whole_message(v: dict[str, Any]) -> None:
    """id = <kind> "-" hex(BLAKE3(message)[:16]), from the spec's text (the blake3 package)
    and from the code; a message with one byte changed has another id."""
    message = base64.b64decode(v["message"])
    spec = f"{PREFIX[v['kind']]}-{blake3(message).digest()[:16].hex()}"
    assert v["id"] == spec == ID_OF[v["kind"]](message)
    flipped = message[:-2] + bytes([message[-2] ^ 1]) + message[-1:]
    assert ID_OF[v["kind"]](flipped) != v["id"]


def test_two_hosts_seal_one_head_under_two_ids() -> None:
    """The two resumes of one park in the vectors share their head and differ in id: the
    host's name and seal are part of what the id binds."""
    a, b = (v for v in VECTORS["messages"] if v["kind"] == "segment")
    ea, eb = (decode_envelope(base64.b64decode(v["message"])) for v in (a, b))
    assert ea.sealed.head == eb.sealed.head and format_address(ea.sealed.head) == a["head"]
    assert (ea.host, eb.host) == ("a", "b") and ea.sealed.seal != eb.sealed.seal
    assert a["id"] != b["id"]
