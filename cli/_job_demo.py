"""The demo's look at jobs (C10): an issuer opens a job of six items under a grant, two
hosts run them, a third host's second run of one item is refused ``DuplicateItem``, the
last close seals the job, and one item is proved against the receipt and a signed
checkpoint, offline."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.sim_grants import sim_keys
from fleet_ledger.cli._app import CheckFailed
from fleet_ledger.cli._grant_demo import _publish_segments
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.grant_events import event_id as grant_event_id
from fleet_ledger.fleet.fold.grant_events import issue_event
from fleet_ledger.fleet.fold.job_events import event_id, open_event
from fleet_ledger.fleet.grants.grant import grant_address, make_terms, sign_grant
from fleet_ledger.fleet.jobs.job_bundle import verify_job_bundle
from fleet_ledger.fleet.jobs.job_id import NONCE_SIZE, JobTerms, encode_terms, job_id
from fleet_ledger.fleet.log.note import Verifier
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.ledger import job_views
from fleet_ledger.ledger.store import LedgerStore

HOSTS = ("job-a", "job-b")
ITEMS = 6
_HOUR_MS = 3_600_000


async def _event(ledger: Any, subject: str, data: bytes, msg_id: str) -> None:
    from fleet_ledger.cli._embedded import wait_folded

    await ledger.js.publish(subject, data, stream=ledger.names.stream,
                            headers={"Nats-Msg-Id": msg_id})
    await wait_folded(ledger, ledger.js, 60.0)


def _item(host: Host, job: bytes, index: int, grant: bytes, close: bool = True) -> str:
    """Item ``index`` recorded on ``host``: two intervals and a close (else one interval)."""
    run = host.open_item_run(job, index, grant)
    for step in range(2 if close else 1):
        run.execute(uj=2_000 + 100 * index, provenance="estimated", meter="estimate:demo",
                    journal_root=digest(b"fleet-demo/job/%d/%d" % (index, step)),
                    calls=CallAccount((f"c{step}",), (f"c{step - 1}",) if step else ()))
    if close:
        run.close()
    return run.run


async def job_demo(ledger: Any, workdir: Path, now_ms: int, vkey: Verifier) -> dict[str, Any]:
    """Run the job demo on the embedded ledger; its summary. A missing refusal, a job not
    sealed or a proof that does not verify is a failed check."""
    issuer, agent = sim_keys("fleet-demo")
    hosts = [Host(name, workdir / "hosts" / name, fleet=ledger.names.fleet)
             for name in (*HOSTS, "job-twin")]
    try:
        store = LedgerStore(workdir / "ledger")
        try:
            for host in hosts:
                store.enroll(host.name, encode_key(bytes(host.key.verify_key)))
        finally:
            store.close()
        terms = make_terms(["/demo/job"], 10**9, now_ms - _HOUR_MS, now_ms + _HOUR_MS,
                           hosts=[h.name for h in hosts])
        grant = sign_grant(issuer, bytes(agent.verify_key), terms)
        gid = grant_address(grant)
        # A second grant, for the twin: a run of item 2 under another grant set is another
        # run (a run under the same unit and grants is the same run).
        other = sign_grant(issuer, bytes(agent.verify_key), make_terms(
            ["/demo/job/twin"], 10**9, now_ms - _HOUR_MS, now_ms + _HOUR_MS,
            hosts=[h.name for h in hosts]))
        for g in (grant, other):
            issued = issue_event(issuer, g)
            await _event(ledger, ledger.names.grant_subject, issued, grant_event_id(issued))
        job_terms = JobTerms("demo-eval", ITEMS, bytes(issuer.verify_key),
                             secrets.token_bytes(NONCE_SIZE), gid)
        job = job_id(job_terms)
        opened = open_event(issuer, encode_terms(job_terms))
        await _event(ledger, ledger.names.job_subject, opened, event_id(opened))
        runs = [_item(hosts[i % 2], job, i, gid) for i in range(ITEMS - 1)]
        for host in hosts[:2]:
            await _publish_segments(ledger, host)
        twin = _item(hosts[2], job, 2, grant_address(other), close=False)
        await _publish_segments(ledger, hosts[2])
        runs.append(_item(hosts[1], job, ITEMS - 1, gid))
        await _publish_segments(ledger, hosts[1])
    finally:
        for host in hosts:
            host.close()
    refused = ledger.store.rejections(host="job-twin")
    text = format_address(job)
    doc = job_views.job_status(ledger.store, text)
    if not refused or refused[0]["rule"] != "DuplicateItem" or refused[0]["run"] != twin:
        raise CheckFailed(f"the job demo expected DuplicateItem for a second run of item 2; "
                          f"got {refused[0]['rule'] if refused else 'nothing refused'}")
    if not doc["sealed"] or doc["missing"]:
        raise CheckFailed(f"the job demo's job is not sealed with nothing missing: {doc}")
    await ledger.sign_checkpoint_now()
    size = ledger.store.tree.size()
    bundle = job_views.job_prove(ledger.store, text, 3)
    proved = verify_job_bundle(bundle, [vkey])
    return {"job": text, "items": ITEMS, "hosts": list(HOSTS), "grant": format_address(gid),
            "receipt_root": doc["receipt"]["root"], "log_size": doc["receipt"]["log_size"],
            "energy_uj": doc["energy"]["total_uj"], "verdicts": doc["verdicts"],
            "missing": doc["missing"], "duplicate_rule": refused[0]["rule"],
            "proved_item": 3, "proved_run": runs[3],
            "proof_bytes": len(bytes.fromhex(bundle["item_proof"])),
            "receipt_leaf": proved.leaf_index, "checkpoint_size": proved.checkpoint.size,
            "tree_size": size, "root": ledger.store.tree.root(size).hex()}
