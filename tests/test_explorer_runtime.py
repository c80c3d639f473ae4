"""The explorer's run page for a runtime run: each executed interval's outcome, journal
root and call account, the calls it waited inside, its effect marks, and why the wait
proof says what it says (read off the record: the ledger never imports the runtime)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from http_helpers import enroll_h1, http_get, publish, serving
from test_explorer import Dom

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.segment import CallAccount

from fault_helpers import sealed_run
from pipeline_helpers import wait_for


def test_the_run_page_shows_intervals_accounts_effects_and_why(nats_server, tmp_path):
    """A run whose second interval re-ran an unkeyed effectful step (``c0!unkeyed!dup/
    retry``) is Blocked there: the page names the segment and the call it waited inside,
    flags the possible duplicate effect, and lists both intervals with their outcomes; a
    run whose intervals only dispatched says NonBlocking and why."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    dup = "c0!unkeyed!dup/retry"
    blocked = sealed_run("h1", "runtime-blocked", "")
    blocked.execute(0, calls=CallAccount(("c0!unkeyed",), ()))
    blocked.execute(1, calls=CallAccount((dup,), (dup,)))
    calm = sealed_run("h1", "runtime-calm", "eprec")
    ids = [format_address(r.run) for r in (blocked, calm)]
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served:
        publish(nats_server.url, [*blocked.messages, *calm.messages])
        base = served.log_url

        def page(run: str) -> Dom | None:
            """The run's page once both its executed intervals are folded."""
            status, _h, body = http_get(f"{base}/ui/run/{quote(run)}")
            dom = Dom(body.decode()) if status == 200 else None
            return dom if dom is not None and len(dom.cells("intervals")) == 16 else None

        dom = wait_for(lambda: page(ids[0]), 60, "the blocked run folded")
        why = dom.by_id("why")["text"]
        assert why.startswith("Blocked: segment 2 resolved calls it dispatched itself"
                              f" ({dup})"), why
        cells = dom.cells("intervals")
        assert cells[:8] == ["1", "h1", "ok", cells[3], "c0!unkeyed", "", "",
                             "no idempotency key c0!unkeyed"]
        assert cells[8:] == ["2", "h1", "ok", cells[11], dup, dup, dup,
                             f"possible duplicate effect {dup}"]
        assert cells[3].startswith("b3:") and cells[3] != cells[11]
        other = wait_for(lambda: page(ids[1]), 60, "the calm run folded")
        assert other.by_id("why")["text"].startswith("NonBlocking: every executed interval")
        assert [c for c in other.cells("intervals")][6::8] == ["", ""]


def test_the_run_page_shows_a_parked_runtime_journal_with_values_unless_shredded(
        nats_server, tmp_path):
    """A runtime run parks (its journal and keys published to JetStream); the ledger's
    run page shows each journal entry with its values read from there (the input, the
    step's result); after `fleet runtime shred` of the step's value the page says
    "shredded" for it and still shows the rest. A journal object rewritten in JetStream
    (the step's name changed) no longer chains to the run's head and is not shown."""
    import json
    import os
    from pathlib import Path

    from pipeline_helpers import cli, host_keys, wait_folded

    tests = str(Path(__file__).resolve().parent)
    data, base = tmp_path / "ledger", tmp_path / "hosts"
    (key,) = host_keys(base, ["A"]).values()
    env = {**os.environ, "RUNTIME_EFFECTS": str(tmp_path / "effects.db"), "PYTHONPATH": tests}
    with serving(nats_server.url, data) as served:
        cli("host", "enroll", "A", "--pubkey", key, "--data", str(data))
        out = cli("runtime", "start", "runtime_flows:approval", "j-1", "--input",
                  '{"ticket": 7}', "--path", tests, "--data", str(base / "A"), "--name", "A",
                  "--nats", nats_server.url, "--json", env=env).stdout
        run = json.loads(out.strip().splitlines()[-1])["run"]
        wait_folded(nats_server.url, data)

        def journal() -> Dom | None:
            status, _h, body = http_get(f"{served.log_url}/ui/run/{quote(run)}")
            dom = Dom(body.decode()) if status == 200 else None
            return dom if dom and any(e.get("id") == "journal" for e in dom.elements) else None

        dom = wait_for(journal, 60, "the run page with its journal")
        cells = dom.cells("journal")
        kinds = cells[1::5]
        assert kinds == ["start", "dispatch", "resolve", "wait"], cells
        values = [v.get("text") for v in dom.by_class("value")]
        assert values == ['{"ticket":7}', '"done:classify:7"']
        address = cells[5 * 2 + 4].split(" = ")[0]
        cli("runtime", "shred", address, "--data", str(base / "A"), "--nats",
            nats_server.url)
        after = [v.get("text") for v in wait_for(journal, 60, "the page").by_class("value")]
        assert after == ['{"ticket":7}', "shredded"]
        asyncio.run(_forge_journal(nats_server.url, run))
        status, _h, body = http_get(f"{served.log_url}/ui/run/{quote(run)}")
        note = Dom(body.decode()).by_id("journal-note")["text"]
        assert status == 200 and note.startswith("the stored journal is not shown"), note


async def _forge_journal(url: str, run: str) -> None:
    """Rewrite the run's published journal object: the first step renamed."""
    import json

    import nats

    from fleet_ledger.fleet.subjects import fleet_names, run_token

    names = fleet_names()
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        doc = json.loads((await (await js.key_value(names.runtime_runs)).get(
            run_token(run))).value)
        store = await js.object_store(names.runtime_journals)
        got = await store.get(run_token(doc["head"]))
        forged = got.data.replace(b'\\"name\\":\\"classify\\"', b'\\"name\\":\\"approve\\"')
        assert forged != got.data
        await store.put(run_token(doc["head"]), forged)
    finally:
        await nc.close()
