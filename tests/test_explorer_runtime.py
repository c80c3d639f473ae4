"""The explorer's run page for a runtime run: each executed interval's outcome, journal
root and call account, the calls it waited inside, its effect marks, and why the wait
proof says what it says (read off the record: the ledger never imports the runtime)."""

from __future__ import annotations

from urllib.parse import quote

from http_helpers import enroll_h1, http_get, publish, serving
from test_explorer import Dom

from fleet.address import format_address
from fleet.segment import CallAccount

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
            status, _h, body = http_get(f"{base}/ui/run/{quote(run)}")
            return Dom(body.decode()) if status == 200 else None

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
