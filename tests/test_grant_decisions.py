"""What the grant CLI says is the ledger's: a refused event retried inside the broker's
duplicate window is answered with the earlier decision (not "published"), a deliberate
``--retry`` is stored and decided again, and an amendment is checked against the terms the
ledger holds (amended), whether the grant is named by its file or its address."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from http_helpers import enroll_h1

from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, fleet, store_summary, wait_until


def _json(*args: str) -> Any:
    return json.loads(fleet(*args, "--json").stdout)


def _rules(data: Path) -> list[tuple[int, str]]:
    return store_summary(data).rejections


def _folded_to(data: Path, seq: int) -> None:
    wait_until(lambda: store_summary(data).watermark >= seq, 30, f"stream seq {seq} folded")


def _keys(tmp_path: Path, *names: str) -> Path:
    keys = tmp_path / "keys"
    for name in names:
        fleet("grant", "keygen", "--out", str(keys), "--name", name)
    return keys


def test_a_refused_mint_retried_is_answered_with_its_decision(nats_server: NatsServer,
                                                              tmp_path: Path) -> None:
    """A mint refused ReplayedTrigger, sent again byte for byte inside the duplicate window:
    the CLI says it was not published again, names the earlier refusal (rule and stream
    sequence) and exits 1; with ``--retry`` the copy is stored at a new sequence and the
    ledger decides it again."""
    url = nats_server.url
    keys = _keys(tmp_path, "issuer", "agent", "trigger", "sub")
    standing = tmp_path / "standing.grant"
    data = tmp_path / "ledger"
    enroll_h1(data)
    with LedgerProc(url, data) as ledger:
        ledger.start()
        sid = _json("grant", "issue", "--key", str(keys / "issuer.key"), "--subject",
                    str(keys / "agent.vkey"), "--scope", "/fs", "--budget-uj", "50000",
                    "--expires-in", "1h", "--mint", f"3/2/60000/{keys / 'trigger.vkey'}",
                    "--out", str(standing), "--nats", url)["address"]
        fleet("grant", "trigger", "go", "--key", str(keys / "trigger.key"), "--nats", url)
        holder = ("--key", str(keys / "agent.key"), "--standing", str(standing),
                  "--trigger", "go", "--subject", str(keys / "sub.vkey"), "--nats", url)
        first = _json("grant", "mint", *holder, "--budget-uj", "700",
                      "--out", str(tmp_path / "child.grant"))["published"]
        assert (first["stream_seq"], first["duplicate"], first["decision"]) == (
            3, False, {"decision": "accepted"})
        # The standing grant's history lists the mint (kept under the child it made).
        shown = _json("grant", "show", sid, "--nats", url)
        assert [(e["kind"], e["stream_seq"]) for e in shown["history"]] == [
            ("issue", 1), ("mint", 3)]
        assert "mint" in fleet("grant", "show", sid, "--nats", url).stdout
        again = ("grant", "mint", *holder, "--budget-uj", "600",
                 "--out", str(tmp_path / "again.grant"))
        refused = fleet(*again, check=False)
        assert refused.returncode == 1 and "ReplayedTrigger" in refused.stderr
        assert "published mint" in refused.stdout and "at stream sequence 4" in refused.stdout
        _folded_to(data, 4)
        # The same bytes again, inside the duplicate window: the broker drops them.
        retried = fleet(*again, "--json", check=False)
        report = json.loads(retried.stdout)["published"]
        assert retried.returncode == 1, retried
        assert report["duplicate"] is True and report["stream_seq"] == 4
        assert report["decision"]["decision"] == "refused"
        assert report["decision"]["rule"] == "ReplayedTrigger"
        said = fleet(*again, check=False)
        assert said.returncode == 1 and said.stdout.startswith(
            "b3:") and "not published again" in said.stdout, said
        assert "already at stream sequence 4" in said.stdout and "--retry" in said.stdout
        assert "published mint" not in said.stdout
        assert _rules(data) == [(4, "ReplayedTrigger")]  # nothing new was decided
        # A deliberate retry: a fresh id, a new copy in the stream, decided there.
        fresh = fleet(*again, "--retry", "--json", check=False)
        report = json.loads(fresh.stdout)["published"]
        assert report["duplicate"] is False and report["stream_seq"] == 5
        assert report["id"].startswith(first["id"][:4]) and "." in report["id"]
        assert report["decision"]["rule"] == "ReplayedTrigger" and fresh.returncode == 1
        _folded_to(data, 5)
        assert _rules(data) == [(4, "ReplayedTrigger"), (5, "ReplayedTrigger")]


def test_an_amendment_widening_the_amended_terms_is_refused_by_the_cli(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """After an amendment tightens a grant's budget to 500, one raising it to 800 (still
    under the file's issued 1,000) is refused here with exit 2, whether the grant is named
    by its file or its b3: address, with or without --seq/--previous: the check reads the
    ledger's amended terms. Nothing is published."""
    url = nats_server.url
    keys = _keys(tmp_path, "issuer", "agent")
    gfile = tmp_path / "g.grant"
    data = tmp_path / "ledger"
    enroll_h1(data)
    issuer = ("--key", str(keys / "issuer.key"), "--nats", url)
    with LedgerProc(url, data) as ledger:
        ledger.start()
        gid = _json("grant", "issue", *issuer, "--subject", str(keys / "agent.vkey"),
                    "--scope", "/fs/work", "--budget-uj", "1000", "--expires-in", "1h",
                    "--out", str(gfile))["address"]
        tightened = _json("grant", "amend", gid, *issuer, "--budget-uj", "500")["published"]
        assert tightened["checked"] == "ledger"
        assert tightened["decision"] == {"decision": "accepted"}
        _folded_to(data, 2)
        shown = _json("grant", "show", gid, "--nats", url)
        numbered = ("--seq", "2", "--previous", shown["last_amendment"])
        for form in (str(gfile), gid):
            for more in ((), numbered):
                r = fleet("grant", "amend", form, *issuer, *more, "--budget-uj", "800",
                          check=False)
                assert r.returncode == 2, (form, more, r.stdout, r.stderr)
                assert "GrantWidens: budget_uj" in r.stderr
                assert "the terms the ledger holds" in r.stderr
                assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert store_summary(data).watermark == 2  # nothing was published
        assert _json("grant", "show", gid, "--nats", url)["amended"] == 1
