"""The demo's look at grants (C21): an issuer tightens a running run's budget, and the ledger
refuses the run's next segment ``OverBudget`` while its earlier segments stand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.agents.sim_grants import sim_keys
from fleet_ledger.cli._app import CheckFailed
from fleet_ledger.cli._embedded import wait_folded
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.grant_events import NO_AMENDMENT, amend_event, event_id, issue_event
from fleet_ledger.fleet.grants.grant import grant_address, make_terms, sign_grant
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger import views
from fleet_ledger.ledger.store import LedgerStore

HOST = "granted"
BUDGET_UJ = 10_000
STEP_UJ = 3_000
TIGHTER_UJ = 7_000
_HOUR_MS = 3_600_000


async def _publish_event(ledger: Any, event: bytes) -> None:
    await ledger.js.publish(ledger.names.grant_subject, event, stream=ledger.names.stream,
                            headers={"Nats-Msg-Id": event_id(event)})
    await wait_folded(ledger, ledger.js, 60.0)


async def _publish_segments(ledger: Any, host: Host) -> None:
    await Publisher(host.outbox, ledger.js, stream=ledger.names.stream).drain(timeout=30.0)
    await wait_folded(ledger, ledger.js, 60.0)


async def overspending_run(ledger: Any, workdir: Path, now_ms: int) -> dict[str, Any]:
    """A run under a 10,000 µJ grant spends 3,000 µJ a segment; after two, its issuer amends
    the budget to 7,000 µJ and the third (which would reach 9,000) is refused by name. A
    missing or different refusal, or an earlier segment lost, is a failed check."""
    issuer, agent = sim_keys("fleet-demo")
    host = Host(HOST, workdir / "hosts" / HOST, fleet=ledger.names.fleet)
    try:
        store = LedgerStore(workdir / "ledger")
        try:
            store.enroll(HOST, encode_key(bytes(host.key.verify_key)))
        finally:
            store.close()
        terms = make_terms(["/demo/overspend"], BUDGET_UJ, now_ms - _HOUR_MS, now_ms + _HOUR_MS,
                           hosts=[HOST])
        grant = sign_grant(issuer, bytes(agent.verify_key), terms)
        gid = grant_address(grant)
        await _publish_event(ledger, issue_event(issuer, grant))
        run = host.open_run(digest(b"fleet-demo/unit/overspend"), gid)

        def interval() -> None:
            run.execute(uj=STEP_UJ, provenance="estimated", meter="estimate:demo",
                        journal_root=digest(b"fleet-demo/overspend/%d" % run.state.index))

        interval()
        interval()
        await _publish_segments(ledger, host)
        tighter = make_terms(terms.scopes, TIGHTER_UJ, terms.not_before_ms, terms.expires_ms,
                             hosts=[HOST])
        await _publish_event(ledger, amend_event(issuer, gid, 1, NO_AMENDMENT, tighter))
        interval()
        await _publish_segments(ledger, host)
        run_id = run.run
    finally:
        host.close()
    refusals = ledger.store.rejections(host=HOST)
    status = views.run_status(ledger.store, run_id, ledger.grants)
    if not refusals or refusals[0]["rule"] != "OverBudget" or status["segments"] != 2:
        got = refusals[0]["rule"] if refusals else "nothing refused"
        raise CheckFailed(f"the grant demo expected OverBudget at segment 3 with 2 segments "
                          f"standing; got {got}, {status['segments']} standing")
    return {"run": run_id, "grant": format_address(gid), "budget_uj": BUDGET_UJ,
            "amended_budget_uj": TIGHTER_UJ, "spent_uj": status["energy"]["total_uj"],
            "refused_index": refusals[0]["index"], "rule": refusals[0]["rule"],
            "reason": refusals[0]["detail"], "segments_standing": status["segments"]}
