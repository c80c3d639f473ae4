"""The run explorer (``/ui/`` on the log port): server-rendered HTML, no build step.

- ``/ui/``: the newest checkpoints, the jobs, and the runs with filters (host, verdict, phase);
- ``/ui/run/<run>``: one run's chain as a timeline (executed, parked, resumed intervals,
  energy, the host of each segment and where it changes; the job it is an item of), each
  segment linking to
- ``/ui/proof/<run>/<index>``: the segment's inclusion proof path to the newest signed
  checkpoint, step by step, and a few lines of JavaScript that recompute it in the browser
  (WebCrypto SHA-256, RFC 9162 section 2.1.3.2) and say whether it reaches the
  checkpoint's root. The checkpoint's signature is for ``fleet verify-proof`` to check;
- ``/ui/job/<job>``: a job's progress, energy by source and provenance, wait-proof verdicts,
  receipt, item runs and missing items (:mod:`ledger.explorer_jobs`).

Everything is read through the log reader's read-only connection, like the tiles.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from fleet_ledger.fleet.audit import format_uj as _uj
from fleet_ledger.fleet.audit import format_when as _when
from fleet_ledger.fleet.audit import park_form
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.merkle import leaf_hash
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.record.run_codec import state_from_json
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.fleet.record.wait_proof import verdict_json, waited_inside, why
from fleet_ledger.fleet.record.wire import (
    ClaimedWire,
    ClosedWire,
    EvictedWire,
    ExecutedWire,
    ResumedWire,
    SuspendedWire,
    envelope_wire,
)
from fleet_ledger.fleet.runtime.runtime_journal import account_marks
from fleet_ledger.ledger import job_store, job_views
from fleet_ledger.ledger.log_reader import LogReader, decimal

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2430;background:#fafbfc}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .7em;text-align:left;
border-bottom:1px solid #dde2ea}th{background:#eef1f6}code{font-size:12px}
a{color:#1f5fbf;text-decoration:none}a:hover{text-decoration:underline}
.v-NonBlocking{color:#17803d}.v-Blocked,.v-Malformed{color:#b3261e;font-weight:600}
.v-Unproved{color:#8a6d00}
ol.timeline{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px}
ol.timeline li{padding:.4em .6em;border-radius:4px;min-width:7em;font-size:12px}
.kind-executed{background:#d8ecff}.kind-suspended{background:#ffe7c2}
.kind-resumed{background:#e1f5d8}.kind-closed{background:#e4e4e4}
.host-change{outline:2px solid #b3261e}
form.filters{display:flex;gap:.6em;align-items:end}form.filters label{display:block}
#verdict{font-weight:600;padding:.4em .7em;display:inline-block;border-radius:4px}
#verdict.ok{background:#d5f3dc;color:#17803d}#verdict.bad{background:#fbd9d6;color:#b3261e}
nav a{margin-right:1em}
"""

_VERIFY_JS = """
const hex = s => new Uint8Array(s.match(/../g).map(b => parseInt(b, 16)));
const toHex = a => Array.from(a, b => b.toString(16).padStart(2, '0')).join('');
async function sha(...parts) {
  const n = parts.reduce((k, p) => k + p.length, 0), buf = new Uint8Array(n);
  let o = 0; for (const p of parts) { buf.set(p, o); o += p.length; }
  return new Uint8Array(await crypto.subtle.digest('SHA-256', buf));
}
async function verify() {
  const d = document.getElementById('proof').dataset, out = document.getElementById('verdict');
  try {
    let fn = BigInt(d.index), sn = BigInt(d.size) - 1n;
    let r = await sha(new Uint8Array([0]), hex(d.leaf));
    const steps = document.querySelectorAll('#path tr[data-hash]');
    for (const row of steps) {
      const p = hex(row.dataset.hash);
      if (sn === 0n) throw new Error('proof too long');
      if ((fn & 1n) === 1n || fn === sn) {
        r = await sha(new Uint8Array([1]), p, r);
        if ((fn & 1n) === 0n) { while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; } }
      } else {
        r = await sha(new Uint8Array([1]), r, p);
      }
      row.querySelector('.computed').textContent = toHex(r);
      fn >>= 1n; sn >>= 1n;
    }
    const ok = sn === 0n && toHex(r) === d.root;
    out.textContent = ok ? 'verified in your browser: the path reaches the checkpoint root'
                         : 'NOT verified: the path does not reach the checkpoint root';
    out.className = ok ? 'ok' : 'bad';
  } catch (e) { out.textContent = 'NOT verified: ' + e.message; out.className = 'bad'; }
}
verify();
"""


def _page(title: str, body: str) -> web.Response:
    doc = (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}"
           f"</title><style>{_STYLE}</style></head><body><nav><a href=/ui/>fleet explorer</a>"
           f"<a href=/checkpoint>checkpoint</a></nav>{body}</body></html>")
    return web.Response(text=doc, content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-store"})


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], ident: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table id={ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# A runtime run's journal as JetStream holds it (ledger.runtime_journals), if wired.
JournalSource = Callable[[str], Awaitable[dict[str, Any] | None]]


class Explorer:
    """The explorer's handlers over a :class:`LogReader` (and, for runtime runs, where
    their journals are published)."""

    def __init__(self, reader: LogReader, journals: JournalSource | None = None) -> None:
        self.reader = reader
        self.journals = journals

    def _runs(self) -> list[dict[str, Any]]:
        out = []
        for r in self.reader.store.run_rows(newest_first=True):
            verdict = verdict_json(r.state.wait_proof())
            out.append({"run": r.run, "host": r.host, "segments": r.segments, "phase": r.phase,
                        "verdict": verdict["verdict"], "segment": verdict.get("segment")})
        return out

    async def index(self, request: web.Request) -> web.Response:
        q = request.query
        wanted = {k: q.get(k, "") for k in ("host", "verdict", "phase")}
        limit = int(q["limit"]) if decimal(q.get("limit", "")) else 500
        checkpoints = self.reader.store.newest_checkpoints(10)
        runs = self._runs()
        options = {k: sorted({str(r[k]) for r in runs}) for k in wanted}
        shown = [r for r in runs if all(not v or str(r[k]) == v for k, v in wanted.items())]
        selects = "".join(
            f"<label>{k}<select name={k}><option value=''>any</option>" + "".join(
                f"<option{' selected' if v == wanted[k] else ''}>{_e(v)}</option>"
                for v in vals) + "</select></label>" for k, vals in options.items())
        cp_rows = [(str(cp.size), f"<code>{cp.root.hex()[:16]}…</code>", _when(cp.at))
                   for cp in checkpoints]
        run_rows = [(f"<a class=run href='/ui/run/{quote(r['run'])}'><code>{_e(r['run'])}"
                     "</code></a>", _e(r["host"]), str(r["segments"]), _e(r["phase"]),
                     f"<span class=v-{r['verdict']}>{r['verdict']}"
                     + (f" (segment {r['segment']})" if r["segment"] else "") + "</span>")
                    for r in shown[:limit]]
        jobs = job_views.jobs(self.reader.store)
        job_rows = [(f"<a class=job href='/ui/job/{quote(j['job'])}'><code>{_e(j['job'])}"
                     "</code></a>", _e(j["name"]), str(j["items"]), str(j["bound"]),
                     str(j["closed"]), "sealed" if j["sealed"] else "open")
                    for j in jobs[:limit]]
        body = ("<h1>Fleet log</h1><h2>Checkpoints</h2>"
                + _table(("size", "root", "signed (UTC)"), cp_rows, "checkpoints")
                + (f"<h2>Jobs <small>({len(jobs)})</small></h2>" + _table(
                    ("job", "name", "items", "started", "closed", "state"), job_rows, "jobs")
                   if jobs else "")
                + f"<h2>Runs <small>({len(shown)} of {len(runs)})</small></h2>"
                f"<form class=filters method=get action=/ui/>{selects}"
                "<button type=submit>filter</button></form>"
                + _table(("run", "host", "segments", "phase", "wait proof"), run_rows, "runs"))
        return _page("fleet explorer", body)

    async def run(self, request: web.Request) -> web.Response:
        run = request.match_info["run"]
        store = self.reader.store
        row = store.run_row(run)
        if row is None:
            raise web.HTTPNotFound(text=f"no run {run}\n")
        state = state_from_json(row["state"])
        verdict = verdict_json(state.wait_proof())
        energy = state.energy.as_json()
        items, host = [], None
        intervals: list[tuple[str, ...]] = []
        accounts: list[tuple[int, CallAccount | None]] = []
        for _run, idx, kind, at, payload, leaf_index in store.run_segments(run):
            wire = envelope_wire(payload)
            seg_host = None if wire is None else wire.host
            seg = None if wire is None else wire.segment
            detail = ""
            if isinstance(seg, ExecutedWire):
                rec = seg.attestation_object.receipt
                detail = f"{_uj(rec.uj)} {rec.provenance}"
                calls = None if seg.calls is None else CallAccount(
                    tuple(seg.calls.dispatched), tuple(seg.calls.resolved))
                accounts.append((idx, calls))
                intervals.append(_interval_row(idx, seg_host, seg, calls))
            elif isinstance(seg, SuspendedWire):
                detail = park_form(seg.snapshot)
            elif isinstance(seg, ResumedWire):
                detail = f"idle {_uj(seg.idle_uj)} {seg.idle_provenance}"
            elif isinstance(seg, ClosedWire) and seg.idle_uj is not None:
                detail = f"park's idle {_uj(seg.idle_uj)} {seg.idle_provenance}"
            elif isinstance(seg, ClaimedWire | EvictedWire):
                what = "claim" if isinstance(seg, ClaimedWire) else "overhead"
                detail = f"{what} {_uj(seg.warm_uj + seg.idle_uj)} (warm-up + idle)"
            change = host is not None and seg_host != host
            host = seg_host
            items.append(
                f"<li class='segment kind-{kind}{' host-change' if change else ''}'"
                f" data-index={idx}><b>#{idx} {kind}</b><br>{_e(detail)}<br>"
                f"host {_e(seg_host)}<br>{_when(at)}<br>"
                f"<a class=proof href='/ui/proof/{quote(run)}/{idx}'>leaf {leaf_index}</a></li>")
        summary = _table(("host", "phase", "segments", "wait proof", "energy", "idle"), [(
            _e(row["host"]), _e(row["phase"]), str(row["segments"]),
            f"<span class=v-{verdict['verdict']}>{verdict['verdict']}</span>"
            + (f" (segment {verdict['segment']})" if "segment" in verdict else ""),
            f"{_uj(energy['total_uj'])} (measured {_uj(energy['by_provenance_uj']['measured'])})",
            _uj(sum(energy["idle_uj"].values())))], "summary")
        reason = why(state.wait_proof(), accounts)
        body = (f"<h1>Run <code>{_e(run)}</code></h1>{self._job_item(state.unit_id, run)}{summary}"
                f"<p id=why>{_e(verdict['verdict'])}: {_e(reason)}</p><h2>Timeline</h2>"
                f"<ol class=timeline id=timeline>{''.join(items)}</ol>"
                "<h2>Executed intervals</h2>"
                + _table(("segment", "host", "outcome", "journal root", "dispatched",
                          "resolved", "waited inside", "effects"), intervals, "intervals")
                + await self._journal(run))
        return _page(f"run {run}", body)

    def _job_item(self, unit_id: bytes, run: str) -> str:
        """The job a run of ``unit_id`` is an item of, as a link to its page (nothing for
        other runs; :func:`ledger.job_store.item_of_unit`)."""
        item = job_store.item_of_unit(self.reader.store.conn, unit_id, run)
        if item is None or item["job"] is None:
            return ""
        job = item["job"]
        return (f"<p id=job-item>item {item['index']} of job <a class=job href='/ui/job/"
                f"{quote(job)}'><code>{_e(job)}</code></a></p>")

    async def _journal(self, run: str) -> str:
        """The runtime journal section of a run's page: its entries with their values
        (``shredded`` where the key is gone), or why there is none."""
        if self.journals is None:
            return ""
        try:
            doc = await self.journals(run)
        except Exception as exc:  # JetStream unreachable: the page still shows the record
            return f"<h2>Runtime journal</h2><p id=journal-note>not read: {_e(exc)}</p>"
        if doc is None:
            return ""
        head = f"<h2>Runtime journal</h2><p>status {_e(doc['status'])}, head <code>" \
               f"{_e(doc['head'])}</code></p>"
        if doc["entries"] is None:
            return head + f"<p id=journal-note>{_e(doc['note'])}</p>"
        rows = [(str(e["seq"]), _e(e["kind"]), _e(e["call"]), f"<code>{_e(e['body'])}</code>",
                 "<br>".join(f"<code>{_e(a)}</code> = <span class=value>{_e(v)}</span>"
                             for a, v in e["values"].items()))
                for e in doc["entries"]]
        return head + _table(("seq", "kind", "call", "body", "values"), rows, "journal")

    async def proof(self, request: web.Request) -> web.Response:
        run, index_text = request.match_info["run"], request.match_info["index"]
        if not decimal(index_text):
            raise web.HTTPBadRequest(text="a segment index is a decimal\n")
        index = int(index_text)
        found = self.reader.inclusion(run, index)
        if found is None:
            raise web.HTTPNotFound(text="no such segment in the newest checkpoint\n")
        size, note, leaf_index, leaf, proof = (found.size, found.note, found.leaf_index,
                                               found.leaf, found.proof)
        root = parse_checkpoint(parse_note(note)[0]).root
        steps, fn, sn = [], leaf_index, size - 1
        for n, sibling in enumerate(proof):
            side = "left" if fn & 1 or fn == sn else "right"
            if side == "left" and not fn & 1:
                while not fn & 1 and fn:
                    fn, sn = fn >> 1, sn >> 1
            fn, sn = fn >> 1, sn >> 1
            steps.append(f"<tr data-hash={sibling.hex()}><td>{n + 1}</td><td>{side}</td>"
                         f"<td><code>{sibling.hex()}</code></td><td><code class=computed>"
                         "</code></td></tr>")
        body = (
            f"<h1>Inclusion of segment {index} of <code>{_e(run)}</code></h1>"
            f"<div id=proof data-leaf={leaf.hex()} data-index={leaf_index} data-size={size}"
            f" data-root={root.hex()}>"
            f"<p>leaf {leaf_index} of {size}; leaf hash <code>{leaf_hash(leaf).hex()}</code></p>"
            f"<p>checkpoint root <code>{root.hex()}</code></p></div>"
            "<p id=verdict>verifying…</p>"
            "<table id=path><thead><tr><th>step</th><th>sibling side</th><th>sibling hash</th>"
            f"<th>node computed in your browser</th></tr></thead><tbody>{''.join(steps)}"
            f"</tbody></table><h2>Signed checkpoint</h2><pre id=checkpoint>{_e(note)}</pre>"
            f"<p><a href='/proof/{quote(run)}/{index}'>as a c2sp.org/tlog-proof</a> · leaf"
            f" base64 <code>{base64.b64encode(leaf).decode()}</code></p>"
            f"<script>{_VERIFY_JS}</script>")
        return _page(f"proof {run} #{index}", body)

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/?" + urlencode(request.query) if request.query else "/ui/")


def _interval_row(idx: int, host: str | None, seg: ExecutedWire,
                  calls: CallAccount | None) -> tuple[str, ...]:
    """One executed segment as the run page's intervals table shows it: its attestation's
    outcome and journal root, its call account, the calls it waited inside (the wait
    proof's Blocked rule) and its effect marks (a runtime step without a key, a possible
    duplicate effect)."""
    att = seg.attestation_object
    if calls is None:
        return (str(idx), _e(host), _e(att.outcome), f"<code>{_e(att.journal_root)}</code>",
                "no account", "", "", "")
    ids = dict.fromkeys([*calls.dispatched, *calls.resolved])
    flags = [("possible duplicate effect " if account_marks(c)[1] else "no idempotency key ")
             + c for c in ids if any(account_marks(c))]
    return (str(idx), _e(host), _e(att.outcome), f"<code>{_e(att.journal_root)}</code>",
            _e(" ".join(calls.dispatched)), _e(" ".join(calls.resolved)),
            _e(" ".join(waited_inside(calls))), _e("; ".join(flags)))


def add_explorer(app: web.Application, reader: LogReader,
                 journals: JournalSource | None = None) -> None:
    """Mount the explorer at ``/ui/`` on ``app`` (``journals``: where a runtime run's
    journal is read from, for its page)."""
    explorer = Explorer(reader, journals)
    app.router.add_get("/ui", explorer.redirect)
    app.router.add_get("/ui/", explorer.index)
    app.router.add_get("/ui/run/{run}", explorer.run)
    app.router.add_get("/ui/proof/{run}/{index}", explorer.proof)
    # Imported here: the job pages are drawn with this module's page helpers.
    from fleet_ledger.ledger.explorer_jobs import add_job_pages

    add_job_pages(app, reader)
