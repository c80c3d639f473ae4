"""``fleet grant`` end to end: keys and grants made by the CLI, events published through a
real broker, folded by a ledger process holding a host's run to them, and shown by
``fleet run show``, ``fleet grant show``, ``fleet audit`` and ``fleet status``."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

from http_helpers import enroll_h1, publish

from fleet_ledger.cli.grant_cmds import load_key
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.grants.grant import decode_grant, make_terms, sign_grant
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import FLEET, LedgerProc, fleet, store_summary, wait_until
from grant_helpers import run_under


def _json(*args: str) -> Any:
    return json.loads(fleet(*args, "--json").stdout)


def _rules(data: Path) -> list[str]:
    return [rule for _, rule in store_summary(data).rejections]


def _folded_to(data: Path, seq: int) -> None:
    wait_until(lambda: store_summary(data).watermark >= seq, 30, f"stream seq {seq} folded")


def test_issue_amend_checkpoint_revoke_through_the_cli(nats_server: NatsServer,
                                                       tmp_path: Path) -> None:
    """A grant issued by the CLI holds a host's run: an amendment tightening the budget
    refuses the next over-budget segment (OverBudget), the run's document shows the
    effective grant, its history and a checkpoint, the audit counts the refusal, and after
    a revoke the run's next segment is GrantRevoked."""
    url = nats_server.url
    keys = tmp_path / "keys"
    issuer_hex = fleet("grant", "keygen", "--out", str(keys)).stdout.strip()
    agent = _json("grant", "keygen", "--out", str(keys), "--name", "agent")
    assert len(issuer_hex) == 64 and (keys / "agent.vkey").read_text().strip() == \
        agent["public_key"]
    issuer = ("--key", str(keys / "issuer.key"), "--nats", url)
    gfile = tmp_path / "run.grant"
    data = tmp_path / "ledger"
    enroll_h1(data)
    with LedgerProc(url, data) as ledger:
        ledger.start()  # it makes the stream the events go to
        issued = _json("grant", "issue", *issuer, "--subject", str(keys / "agent.vkey"),
                       "--scope", "/fs/work", "--budget-uj", "10000", "--expires-in", "1h",
                       "--host", "h1", "--out", str(gfile))
        gid = issued["address"]
        assert issued["published"]["stream_seq"] == 1
        assert issued["published"]["event"] == "issue"
        assert format_address(digest(gfile.read_bytes())) == gid
        assert decode_grant(gfile.read_bytes()).subject.hex() == agent["public_key"]
        run = run_under(digest(gfile.read_bytes()))
        run.execute(0, uj=3_000)
        publish(url, run.messages[-1:])
        _folded_to(data, 2)
        assert store_summary(data).size == 1

        amended = _json("grant", "amend", gid, *issuer, "--budget-uj", "4000")
        assert amended["published"]["seq"] == 1
        _folded_to(data, 3)
        run_id = format_address(run.run)
        cp = _json("grant", "checkpoint", "--key", str(keys / "agent.key"), "--run", run_id,
                   "--state", format_address(digest(b"agent state")), "--note", "halfway",
                   "--nats", url)
        assert cp["index"] == 1
        held = copy.deepcopy(run.builder.state)
        run.execute(1, uj=1_001)
        publish(url, run.messages[-1:])
        _folded_to(data, 5)
        assert _rules(data) == ["OverBudget"]
        run.builder.state = held  # the host's next segment follows the last folded one

        doc = _json("run", "show", run_id, "--nats", url)
        g = doc["grant"]
        assert (g["id"], g["chain"], g["used_uj"]) == (gid, [gid], 3_000)
        assert g["effective"]["budget_uj"] == 4_000 and g["effective"]["hosts"] == ["h1"]
        assert [(e["kind"], e["stream_seq"]) for e in g["history"]] == [("issue", 1),
                                                                          ("amend", 3)]
        assert [(c["kind"], c["note"], c["index"]) for c in g["checkpoints"]] == [
            ("checkpoint", "halfway", 1)]
        text = fleet("run", "show", run_id, "--nats", url).stdout
        assert "budget 3000 of 4000 uJ used" in text and "amend" in text

        audit = _json("audit", "--nats", url)
        assert audit["grant_refusals"]["by_rule"] == {"OverBudget": 1}
        assert audit["grant_refusals"]["segments"] == 1
        status = _json("status", "--nats", url)
        assert status["grants"] == {"mode": "enforce", "folded": 1}

        # An auditor recomputes the grant's decisions offline from the record and the
        # evidence; evidence placing the segment after the grant's expiry fails by name.
        record, evidence = tmp_path / "run.json", tmp_path / "evidence.json"
        fleet("run", "export", run_id, "--out", str(record), "--nats", url)
        fleet("run", "grant-evidence", run_id, "--out", str(evidence), "--nats", url)
        checked = _json("verify", str(record), "--grants", str(evidence))
        assert checked["grant"]["events"] == 3 and checked["grant"]["used_uj"] == 3_000
        late = json.loads(evidence.read_text())
        late["segments"][0]["at_ms"] = g["effective"]["expires_ms"]
        evidence.write_text(json.dumps(late))
        failed = fleet("verify", str(record), "--grants", str(evidence), check=False)
        assert failed.returncode == 1 and "GrantExpired" in failed.stderr
        assert "Traceback" not in failed.stderr

        fleet("grant", "revoke", gid, *issuer)
        _folded_to(data, 6)
        run.execute(1, uj=10)
        publish(url, run.messages[-1:])
        _folded_to(data, 7)
        assert _rules(data) == ["OverBudget", "GrantRevoked"]
        shown = _json("grant", "show", gid, "--nats", url)
        assert (shown["amended"], shown["effective"]["scopes"]) == (2, [])
        assert [e["kind"] for e in shown["history"]] == ["issue", "amend", "amend"]


def test_a_standing_grant_mints_a_child_on_a_trigger(nats_server: NatsServer,
                                                     tmp_path: Path) -> None:
    """``fleet grant trigger`` then ``fleet grant mint`` from a standing grant: the ledger
    folds the child under it (its chain names the standing grant); a second mint on the
    same trigger is refused ReplayedTrigger; under ``--grants require`` a run whose grant
    was never presented is UnknownGrant; the audit counts both."""
    url = nats_server.url
    keys = tmp_path / "keys"
    for name in ("issuer", "agent", "trigger", "sub"):
        fleet("grant", "keygen", "--out", str(keys), "--name", name)
    standing = tmp_path / "standing.grant"
    policy = f"3/2/60000/{keys / 'trigger.vkey'}"
    data = tmp_path / "ledger"
    enroll_h1(data)
    with LedgerProc(url, data, "--grants", "require") as ledger:
        ledger.start()
        sid = _json("grant", "issue", "--key", str(keys / "issuer.key"), "--subject",
                    str(keys / "agent.vkey"), "--scope", "/fs", "--budget-uj", "50000",
                    "--expires-in", "1h", "--mint", policy, "--out", str(standing),
                    "--nats", url)["address"]
        fleet("grant", "trigger", "go", "--key", str(keys / "trigger.key"), "--nats", url)
        holder = ("--key", str(keys / "agent.key"), "--standing", str(standing),
                  "--trigger", "go", "--subject", str(keys / "sub.vkey"), "--nats", url)
        child = _json("grant", "mint", *holder, "--scope", "/fs/job", "--budget-uj", "700",
                      "--out", str(tmp_path / "child.grant"))
        _folded_to(data, 3)
        shown = _json("grant", "show", child["address"], "--nats", url)
        assert shown["chain"] == [child["address"], sid]
        assert shown["effective"]["budget_uj"] == 700 and shown["parent"] == sid
        assert [e["kind"] for e in shown["history"]] == ["mint"]
        fleet("grant", "verify", str(tmp_path / "child.grant"), "--parent", str(standing))
        again = fleet("grant", "mint", *holder, "--budget-uj", "600",
                      "--out", str(tmp_path / "again.grant"), check=False)
        # The ledger's decision is read back: refused, exit 1, the rule named.
        assert again.returncode == 1 and "ReplayedTrigger" in again.stderr, again
        assert "the ledger refused it: ReplayedTrigger" in again.stdout
        _folded_to(data, 4)
        assert _rules(data) == ["ReplayedTrigger"]
        stranger = run_under(digest(b"a grant never presented"))
        publish(url, [(stranger.subject, stranger.execute(0))])
        _folded_to(data, 5)
        assert _rules(data) == ["ReplayedTrigger", "UnknownGrant"]
        assert _json("audit", "--nats", url)["grant_refusals"] == {
            "total": 2, "segments": 1, "events": 1,
            "by_rule": {"ReplayedTrigger": 1, "UnknownGrant": 1}}
        assert _json("status", "--nats", url)["grants"] == {"mode": "require", "folded": 2}


def _keys(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    for name in ("issuer", "agent"):
        fleet("grant", "keygen", "--out", str(keys), "--name", name)
    return keys


def _issue(keys: Path, out: Path, *more: str, key: str = "issuer", subject: str = "agent"
           ) -> str:
    return fleet("grant", "issue", "--key", str(keys / f"{key}.key"), "--subject",
                 str(keys / f"{subject}.vkey"), "--scope", "/fs/work", "--budget-uj", "1000",
                 "--expires-in", "1h", "--out", str(out), *more).stdout.strip()


def _fails(code: int, *args: str) -> str:
    r = fleet(*args, check=False)
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def test_user_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """A missing key file, terms that are not JSON or not terms, a self-grant and an
    amendment that widens are each refused before anything is published: one line, exit 2."""
    keys = _keys(tmp_path)
    gfile = tmp_path / "g.grant"
    _issue(keys, gfile)
    assert "no such key file" in _fails(
        2, "grant", "issue", "--key", str(tmp_path / "nope.key"), "--subject",
        str(keys / "agent.vkey"), "--scope", "/a", "--budget-uj", "1", "--expires-in", "1h",
        "--out", str(tmp_path / "x"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not JSON" in _fails(2, "grant", "issue", "--key", str(keys / "issuer.key"),
                                "--subject", str(keys / "agent.vkey"), "--terms", str(bad),
                                "--out", str(tmp_path / "x"))
    bad.write_text(json.dumps({"scopes": ["/a"], "budget_uj": 1, "expires_ms": 5,
                               "colour": "red"}))
    assert "MalformedGrant" in _fails(2, "grant", "issue", "--key", str(keys / "issuer.key"),
                                      "--subject", str(keys / "agent.vkey"), "--terms",
                                      str(bad), "--out", str(tmp_path / "x"))
    assert "IssuerIsSubject" in _fails(2, "grant", "issue", "--key", str(keys / "agent.key"),
                                       "--subject", str(keys / "agent.vkey"), "--scope", "/a",
                                       "--budget-uj", "1", "--expires-in", "1h",
                                       "--out", str(tmp_path / "x"))
    offline = ("--key", str(keys / "issuer.key"), "--seq", "1", "--previous", "none",
               "--nats", "nats://127.0.0.1:1")
    assert "GrantWidens: budget_uj" in _fails(2, "grant", "amend", str(gfile), *offline,
                                              "--budget-uj", "1001")
    assert "GrantWidens: scopes" in _fails(2, "grant", "amend", str(gfile), *offline,
                                           "--scope", "/fsx")
    assert not (tmp_path / "x").exists()


def test_terms_are_read_from_stdin(tmp_path: Path) -> None:
    """``--terms -`` reads the terms document from stdin: the grant carries them."""
    keys = _keys(tmp_path)
    out = tmp_path / "g.grant"
    r = subprocess.run([*FLEET, "grant", "issue", "--key", str(keys / "issuer.key"),
                        "--subject", str(keys / "agent.vkey"), "--terms", "-",
                        "--out", str(out)], capture_output=True, text=True, timeout=60,
                       check=False, input=json.dumps({"scopes": ["/from/stdin"],
                                                      "budget_uj": 7, "expires_ms": 10**13}))
    assert r.returncode == 0, r.stderr
    terms = decode_grant(out.read_bytes()).terms
    assert (terms.scopes, terms.budget_uj) == (("/from/stdin",), 7)


def test_verify_exit_codes(tmp_path: Path) -> None:
    """``fleet grant verify`` exits 0 on a good grant and 1 with the rule named on a bad
    signature, bytes that are not one grant, an expired grant, a grant that is not the
    parent's child and a child that widens."""
    keys = _keys(tmp_path)
    fleet("grant", "keygen", "--out", str(keys), "--name", "sub")
    parent, child = tmp_path / "p.grant", tmp_path / "c.grant"
    address = _issue(keys, parent)
    assert fleet("grant", "verify", str(parent)).stdout.strip() == f"OK {address}"
    data = parent.read_bytes()
    tampered = tmp_path / "t.grant"
    tampered.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert "BadGrantSignature" in _fails(1, "grant", "verify", str(tampered))
    tampered.write_bytes(data + b"\0")
    assert "MalformedGrant" in _fails(1, "grant", "verify", str(tampered))
    assert "GrantExpired" in _fails(1, "grant", "verify", str(parent), "--at-ms",
                                    str(2**62))
    ends = decode_grant(data).terms.expires_ms
    agent, sub = load_key(keys / "agent.key"), bytes.fromhex(
        (keys / "sub.vkey").read_text().strip())
    child.write_bytes(sign_grant(agent, sub, make_terms(["/fs/work/job"], 500, 0, ends),
                                 parent=digest(data)))
    assert fleet("grant", "verify", str(child), "--parent", str(parent)).returncode == 0
    wide = tmp_path / "w.grant"
    _issue(keys, wide, key="agent", subject="sub")
    assert "ChildMismatch" in _fails(1, "grant", "verify", str(wide), "--parent",
                                     str(parent))
    wide.write_bytes(sign_grant(agent, sub, make_terms(["/fs/work"], 5_000, 0, ends),
                                parent=digest(data)))
    assert "GrantWidens: budget_uj" in _fails(1, "grant", "verify", str(wide), "--parent",
                                              str(parent))
    assert "no such grant file" in _fails(2, "grant", "verify", str(tmp_path / "none"))
