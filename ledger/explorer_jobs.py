"""The explorer's job page (``docs/jobs.md``), beside the run pages of :mod:`ledger.explorer`
(whose index lists the jobs): ``/ui/job/<job>`` gives one job's progress, its energy totals
by source and provenance, its wait-proof verdict counts, its receipt once sealed (root, the
log size it was sealed at, its own leaf), its items (``?from=N``: from the N-th started item
on, :data:`ledger.job_views.SHOWN_ITEMS` a page), each linking to its run's page, and the
items missing from the receipt (sealed) or not closed yet (open).

The sums are :func:`ledger.job_views.job_status`'s, the ones ``fleet job show`` prints: a
sealed job's are its receipt's, an open job's those of the items closed so far.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from fleet_ledger.fleet.audit import format_uj as _uj
from fleet_ledger.fleet.jobs.sum_tree import PROVENANCES, SOURCES
from fleet_ledger.fleet.record.run_codec import state_from_json
from fleet_ledger.fleet.record.wait_proof import verdict_json
from fleet_ledger.ledger import job_views
from fleet_ledger.ledger.explorer import _e, _page, _table
from fleet_ledger.ledger.log_reader import LogReader, decimal
from fleet_ledger.ledger.views import NotFound

# Missing items listed on a job's page (a job may miss 2**32 - 1): the first ones, then a count.
SHOWN_MISSING = 500


def _uj_cell(value: int) -> str:
    """Energy for a person, with the exact microjoules in ``data-uj`` (for a script)."""
    return f"<span class=uj data-uj={value}>{_uj(value)}</span>"


class JobPages:
    """The job page's handler over a :class:`LogReader`'s read-only store."""

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader

    async def job(self, request: web.Request) -> web.Response:
        job = request.match_info["job"]
        first_text = request.query.get("from", "0")
        first = int(first_text) if decimal(first_text) else 0
        try:
            doc = job_views.job_status(self.reader.store, job, with_items=True, first=first)
        except NotFound as exc:
            raise web.HTTPNotFound(text=f"{exc}\n") from None
        p = doc["progress"]
        state = "sealed" if doc["sealed"] else "open"
        summary = _table(("name", "items", "progress", "state", "issuer", "grant",
                          "opened at"), [(
            _e(doc["name"]), str(doc["items"]),
            f"<progress max={p['items']} value={p['closed']}></progress> {p['closed']} of "
            f"{p['items']} closed", state, f"<code>{_e(doc['issuer'])}</code>",
            "none" if doc["grant"] is None else f"<code>{_e(doc['grant'])}</code>",
            f"stream seq {doc['opened_seq']}")], "summary")
        body = (f"<h1>Job <code>{_e(doc['job'])}</code></h1>"
                f"<p id=progress>{p['items']} items: {p['closed']} closed, {p['bound']} "
                f"started, {p['unstarted']} not started; {state}</p>{summary}"
                + self._totals(doc) + self._receipt(doc) + self._items(doc, first)
                + self._missing(doc))
        return _page(f"job {doc['name']}", body)

    def _totals(self, doc: dict[str, Any]) -> str:
        energy = doc["energy"]
        rows = [(s, *(_uj_cell(energy[f"{s}_uj"][p]) for p in PROVENANCES),
                 _uj_cell(sum(energy[f"{s}_uj"].values()))) for s in SOURCES]
        by = energy["by_provenance_uj"]
        rows.append(("<b>total</b>", *(_uj_cell(by[p]) for p in PROVENANCES),
                     _uj_cell(energy["total_uj"])))
        counts = {**doc["verdicts"], "missing": len(doc["missing"])}
        verdicts = [(f"<span class=v-{k}>{k}</span>", f"<span class=count data-verdict={k}>"
                     f"{n}</span>") for k, n in counts.items()]
        what = ("the receipt's" if doc["sealed"] else
                "over the items closed so far (the job is open)")
        return (f"<h2>Energy <small>({what})</small></h2>"
                + _table(("source", *PROVENANCES, "total"), rows, "energy")
                + "<h2>Wait proofs</h2>" + _table(("verdict", "items"), verdicts, "verdicts"))

    def _receipt(self, doc: dict[str, Any]) -> str:
        r = doc["receipt"]
        if r is None:
            return ("<h2>Receipt</h2><p id=receipt>none yet: the ledger seals the job when "
                    "its last item closes, or on <code>fleet job seal</code></p>")
        return ("<h2>Receipt</h2>" + _table(("root", "sealed at log size", "its leaf",
                                             "sealed at"), [(
                    f"<code>{_e(r['root'])}</code>", str(r["log_size"]), str(r["leaf_index"]),
                    f"stream seq {doc['sealed_seq']}")], "receipt")
                + f"<p>prove an item: <code>fleet job prove {_e(doc['job'])} --item I</code>"
                  "; check it offline: <code>fleet job verify-proof</code></p>")

    def _items(self, doc: dict[str, Any], first: int) -> str:
        store = self.reader.store
        rows = []
        for item in doc["item_runs"]:
            run = item["run"]
            found = store.run_row(run)
            if found is None:  # pragma: no cover - an item is bound by its run's first fold
                continue
            state = state_from_json(found["state"])
            verdict = verdict_json(state.wait_proof())["verdict"]
            energy = state.energy.as_json()["total_uj"]
            rows.append((str(item["index"]), f"<a class=run href='/ui/run/{quote(run)}'>"
                         f"<code>{_e(run)}</code></a>", _e(found["host"]),
                         str(found["segments"]), "closed" if item["closed"] else "running",
                         f"<span class=v-{verdict}>{verdict}</span>", _uj_cell(energy)))
        shown = len(doc["item_runs"])
        more = doc["item_runs_more"]
        nav = []
        if first > 0:
            nav.append(f"<a id=prev href='?from={max(0, first - job_views.SHOWN_ITEMS)}'>"
                       "earlier items</a>")
        if more:
            nav.append(f"<a id=next href='?from={first + shown}'>{more} more</a>")
        return (f"<h2>Items <small>(started: {doc['progress']['bound']})</small></h2>"
                + _table(("item", "run", "host", "segments", "state", "wait proof", "energy"),
                         rows, "items") + (f"<p>{' · '.join(nav)}</p>" if nav else ""))

    def _missing(self, doc: dict[str, Any]) -> str:
        missing = doc["missing"]
        title = ("Missing from the receipt" if doc["sealed"] else "Not closed yet")
        if not missing:
            return f"<h2>{title}</h2><p id=missing>none</p>"
        listed = ", ".join(str(i) for i in missing[:SHOWN_MISSING])
        rest = len(missing) - SHOWN_MISSING
        return (f"<h2>{title} <small>({len(missing)})</small></h2><p id=missing>{listed}"
                + (f" … and {rest} more" if rest > 0 else "") + "</p>")


def add_job_pages(app: web.Application, reader: LogReader) -> None:
    """Mount the job page on ``app`` (:func:`ledger.explorer.add_explorer` does)."""
    app.router.add_get("/ui/job/{job}", JobPages(reader).job)
