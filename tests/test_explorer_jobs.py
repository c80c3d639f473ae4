"""The explorer's job pages through the real HTTP server of `fleet ledger serve`: the jobs
on the index, a sealed job's progress, energy totals by source and provenance, verdict counts,
receipt, items linking to their run pages and missing items; an open job's page; an item
run's page naming its job."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from http_helpers import enroll_h1, http_get, publish, serving
from test_explorer import Dom

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.jobs.job_id import item_unit
from fleet_ledger.fleet.jobs.sum_tree import PROVENANCES, SOURCES
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.segment import CallAccount

from fault_helpers import GRANTS, SealedRun, host_key
from pipeline_helpers import cli, cli_json, wait_for


def _item(job: str, index: int) -> SealedRun:
    """Item ``index`` of ``job`` as host h1 records it (its unit binds the job and index)."""
    unit = item_unit(parse_address(job), index)
    return SealedRun("h1", RecordBuilder(host_key("h1"), unit, GRANTS))


def _page(url: str) -> tuple[int, Dom]:
    status, _headers, body = http_get(url)
    return status, Dom(body.decode())


def _uj(dom: Dom, table: str) -> list[int]:
    """The exact microjoules (``data-uj``) in table ``table``, in document order."""
    start = dom.elements.index(dom.by_id(table))
    out = []
    for el in dom.elements[start + 1:]:
        if el["tag"] == "table":
            break
        if "data-uj" in el:
            out.append(int(el["data-uj"]))
    return out


def test_job_pages_show_progress_totals_verdicts_items_and_missing(nats_server,
                                                                    tmp_path: Path) -> None:
    """A job of 3 items (one parked and resumed, one Blocked, one never started) sealed
    early, and an open job of 3 with one item running: /ui/ lists both; the sealed
    job's page gives its progress, energy totals equal to its items' records' sums, source
    by source and provenance by provenance, its verdict counts, the receipt `fleet job show`
    reports, its items linking to their run pages (which link back) and item 2 missing; the
    open job's page says it has no receipt yet and what is not closed; an unknown job is
    404."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    cli("grant", "keygen", "--out", str(tmp_path), "--name", "owner")
    key = str(tmp_path / "owner.key")
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served:
        url, base = nats_server.url, served.log_url

        def open_job(name: str) -> str:
            return cli_json("job", "open", name, "--items", "3", "--key", key, "--nats", url,
                            "--json")["job"]

        sealed, running = open_job("eval"), open_job("batch")
        parked = _item(sealed, 0)
        parked.execute(0)
        parked.park(1)
        parked.resume(idle_uj=7000)
        parked.close()
        blocked = _item(sealed, 1)
        blocked.execute(2, calls=CallAccount(("x",), ("x",)))
        blocked.close()
        started = _item(running, 1)
        started.execute(3, provenance="estimated", meter="estimate:test")
        publish(url, [*parked.messages, *blocked.messages, *started.messages])

        def show(job: str) -> dict:
            return cli_json("job", "show", job, "--json", "--nats", url)

        wait_for(lambda: show(sealed)["progress"]["closed"] == 2, 60, "both items closed")
        cli("job", "seal", sealed, "--key", key, "--nats", url)
        shown = wait_for(lambda: (d := show(sealed))["sealed"] and d, 60, "the job sealed")

        status, index = _page(f"{base}/ui/")
        assert status == 200
        assert [a["text"] for a in index.by_class("job")] == [running, sealed]  # newest first
        assert index.cells("jobs")[1:6] == ["batch", "3", "1", "0", "open"]
        assert index.cells("jobs")[7:12] == ["eval", "3", "2", "2", "sealed"]

        status, page = _page(f"{base}/ui/job/{quote(sealed)}")
        assert status == 200
        assert page.by_id("progress")["text"] == "3 items: 2 closed, 2 started, 1 not started;" \
            " sealed"
        assert page.cells("summary")[:4] == ["eval", "3", " 2 of 3 closed", "sealed"]
        # The totals, as the items' own records count them.
        energies = [parked.builder.state.energy, blocked.builder.state.energy]
        expected = []
        for source in SOURCES:
            row = [sum(getattr(e, source)[p] for e in energies) for p in PROVENANCES]
            expected += [*row, sum(row)]
        by = [sum(expected[k * 3 + j] for k in range(len(SOURCES))) for j in range(2)]
        expected += [*by, sum(by)]
        assert _uj(page, "energy") == expected
        assert expected[2] == 2 * 1000 + 2 and expected[5] == 7000  # receipts, idle
        counts = {e["data-verdict"]: int(e["text"]) for e in page.by_class("count")}
        assert counts == {"NonBlocking": 1, "Blocked": 1, "Malformed": 0, "Unproved": 0,
                          "missing": 1}
        receipt = page.cells("receipt")
        assert receipt[:3] == [shown["receipt"]["root"], str(shown["receipt"]["log_size"]),
                               str(shown["receipt"]["leaf_index"])]
        runs = [format_address(r.run) for r in (parked, blocked)]
        links = page.by_class("run")
        assert [a["text"] for a in links] == runs
        assert [a["href"] for a in links] == [f"/ui/run/{quote(r)}" for r in runs]
        assert page.cells("items")[2:5] == ["h1", "4", "closed"]
        assert page.by_id("missing")["text"] == "2"

        status, run_page = _page(base + links[1]["href"])
        assert status == 200
        assert run_page.by_id("job-item")["text"] == f"item 1 of job {sealed}"
        assert run_page.by_class("job")[0]["href"] == f"/ui/job/{quote(sealed)}"

        status, later = _page(f"{base}/ui/job/{quote(sealed)}?from=1")
        assert [a["text"] for a in later.by_class("run")] == runs[1:]
        assert later.by_id("prev")["href"] == "?from=0"

        status, open_page = _page(f"{base}/ui/job/{quote(running)}")
        assert status == 200
        assert open_page.by_id("progress")["text"] == "3 items: 0 closed, 1 started, 2 not" \
            " started; open"
        assert open_page.cells("summary")[:4] == ["batch", "3", " 0 of 3 closed", "open"]
        assert open_page.by_id("receipt")["text"].startswith("none yet")
        assert open_page.cells("items")[4] == "running"
        assert open_page.by_id("missing")["text"] == "0, 1, 2"
        assert _uj(open_page, "energy")[-1] == 0  # nothing closed: nothing summed yet

        unknown = format_address(digest(b"no such job"))
        assert http_get(f"{base}/ui/job/{quote(unknown)}")[0] == 404
        assert http_get(f"{base}/ui/job/nonsense")[0] == 404
