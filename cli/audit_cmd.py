"""``fleet audit``: the fleet-wide view of the record's honesty claims (:mod:`fleet.audit`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import UserError, cli
from fleet_ledger.cli._common import api, emit_json, nats_options, span_s
from fleet_ledger.fleet.audit import format_uj as _uj
from fleet_ledger.fleet.audit import format_when as _when


def parse_since(value: str, now: float) -> float:
    """A duration back from now (``90s``, ``30m``, ``6h``, ``2d``, ``1w``), an ISO 8601
    time (UTC unless it says), or Unix seconds; as Unix seconds."""
    span = span_s(value)
    if span is not None:
        return now - span
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"--since {value!r} is not a duration (30m, 6h, 2d), an ISO time or"
                        " Unix seconds") from None
    if when.tzinfo is None:

        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def show(doc: dict[str, Any]) -> None:
    """The audit as text tables."""
    window = "" if doc["since"] is None else f" since {_when(doc['since'])} UTC"
    click.echo(f"{doc['runs']} runs{window}")
    click.echo("\nwait proofs")
    for verdict, count in doc["verdicts"].items():
        click.echo(f"  {verdict:<12} {count:>6}")
    for row in doc["blocked_or_malformed"]:
        click.echo(f"  {row['verdict']:<12} {row['run']}  host {row['host']}  segment "
                   f"{row['segment']}")
    click.echo("\nenergy by host        active measured  active estimated   idle measured"
               "  idle estimated  parks")
    for h in doc["hosts"]:
        a, i = h["active_uj"], h["idle_uj"]
        click.echo(f"  {h['host']:<18} {_uj(a['measured']):>16} {_uj(a['estimated']):>17}"
                   f" {_uj(i['measured']):>15} {_uj(i['estimated']):>15} {h['parks']:>6}")
    pooled = [h for h in doc["hosts"]
               if any(h["claim_uj"].values()) or any(h["overhead_uj"].values())]
    if pooled:
        click.echo("\nwarm pools by host   claim measured   claim estimated  overhead measured"
                   "  overhead estimated")
        for h in pooled:
            c, o = h["claim_uj"], h["overhead_uj"]
            click.echo(f"  {h['host']:<18} {_uj(c['measured']):>14} {_uj(c['estimated']):>17}"
                       f" {_uj(o['measured']):>18} {_uj(o['estimated']):>19}")
    click.echo("\nparks by form       parks      idle energy   hours parked   idle per hour"
               "  estimated")
    for p in doc["parks"]:
        rate = "-" if p["idle_uj_per_hour"] is None else _uj(int(p["idle_uj_per_hour"]))
        click.echo(f"  {p['form']:<16} {p['parks']:>6} {_uj(p['idle_uj']):>16}"
                   f" {p['hours_parked']:>14.4f} {rate:>15} {p['estimated']:>10}")
    click.echo(f"\nparked now: {len(doc['parked'])}")
    for p in doc["parked"]:
        dur = "-" if p["parked_s"] is None else f"{p['parked_s']:.0f}s"
        click.echo(f"  {p['run']}  host {p['host']}  {p['form']}  since {_when(p['since'])}"
                   f"  ({dur})")
    if doc.get("closed_without_idle"):
        click.echo(f"\nparks closed without their idle energy: {len(doc['closed_without_idle'])}")
        for u in doc["closed_without_idle"]:
            click.echo(f"  {u['run']}  host {u['host']}  {u['form']}  segment {u['segment']}")
    if doc["reused_slots"]:
        click.echo(f"\nwarm slots counted more than once: {len(doc['reused_slots'])}")
        for r in doc["reused_slots"]:
            uses = ", ".join(f"{u['kind']} in {u['run']} (host {u['host']}, segment "
                             f"{u['segment']})" for u in r["uses"])
            click.echo(f"  {r['slot']}: {uses}")
    click.echo(f"\nsuspicious hosts: {len(doc['suspicious_hosts'])}")
    for s in doc["suspicious_hosts"]:
        for reason in s["reasons"]:
            click.echo(f"  {s['host']}: {reason}")
    g = doc.get("grant_refusals")
    if g is not None:
        click.echo(f"\ngrant refusals: {g['total']} ({g['segments']} segments, "
                   f"{g['events']} grant events)")
        for rule, count in g["by_rule"].items():
            click.echo(f"  {rule:<20} {count:>6}")
    fx = doc.get("effects") or {}
    if fx.get("unkeyed") or fx.get("possible_duplicates"):
        click.echo(f"\neffectful steps without an idempotency key: {len(fx['unkeyed'])};"
                   f" possible duplicate effects: {len(fx['possible_duplicates'])}")
        for label, key in (("possible duplicate effect", "possible_duplicates"),
                           ("no idempotency key", "unkeyed")):
            for r in fx[key]:
                click.echo(f"  {label}: {r['run']}  host {r['host']}  segment"
                           f" {r['segment']}  call {r['call']}")


@cli.command("audit")
@click.option("--since", help="Only runs active (and parks ended) since then: 30m, 6h, 2d, "
              "an ISO time, or Unix seconds.")
@click.option("--cheap-factor", type=click.FloatRange(0, 1, min_open=True), default=0.1,
              show_default=True, help="Flag a host whose parks of a form cost less than this "
              "share of the other hosts' idle energy per hour.")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path),
              help="Read a ledger's data folder offline instead of asking it over NATS.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def audit_command(since: str | None, cheap_factor: float, data: Path | None, as_json: bool,
                  url: str, nkey: Path | None) -> None:
    """Runs by wait-proof verdict, energy per host, parks by form, runs still parked and
    hosts whose parks look too cheap or are all estimated."""
    now = time.time()
    since_ts = None if since is None else parse_since(since, now)
    if data is not None:
        from fleet_ledger.cli.ledger_cmds import _offline_store
        from fleet_ledger.ledger.audit_rows import audit_store

        store = _offline_store(data)
        try:
            doc = audit_store(store, since_ts, cheap_factor, now)
        finally:
            store.close()
    else:
        body: dict[str, Any] = {"cheap_factor": cheap_factor}
        if since_ts is not None:
            body["since"] = since_ts
        doc = api(url, "audit", body, nkey=nkey)
    if as_json:
        emit_json(doc)
    else:
        show(doc)
