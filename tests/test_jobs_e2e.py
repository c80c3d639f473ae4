"""Jobs end to end, with a real nats-server and `fleet ledger serve` processes: a job of 200
items fanned out over three simulated hosts, sealed by its last close and proved; its
receipt recomputed offline from the exported item records, and forged receipts refused; a
second run of an item refused by name while the ledger goes on; a job sealed early listing
its missing items; a second ledger folding the same stream to the same receipt bytes; a
ledger SIGKILLed while the job is sealed ending with a fault-free fold's receipt."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import struct
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from blake3 import blake3

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.fleet.address import digest, parse_address
from fleet_ledger.fleet.jobs.receipt import decode_receipt, encode_receipt
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer
from fleet_ledger.plumbing.testing import running_server

from fault_helpers import LedgerProc, store_summary
from pipeline_helpers import api, cli, cli_json, wait_folded, wait_for, watermark

pytestmark = pytest.mark.timeout(300)
ITEMS = 200


@dataclass
class Stack:
    url: str
    data: Path
    hosts: Path
    tmp: Path
    job: str
    sim: dict
    log_url: str  # the ledger's HTTP log server (the explorer at /ui/)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A nats-server, a ledger, and a job of 200 items simulated over three hosts."""
    tmp = tmp_path_factory.mktemp("jobs")
    data, hosts = tmp / "ledger", tmp / "hosts"
    with running_server(tmp / "nats") as server, \
            LedgerProc(server.url, data, "--name", "jobs", "--http", "127.0.0.1:0",
                       log=tmp / "ledger.log") as ledger:
        ledger.start()
        sim = cli_json("host", "simulate", "--hosts", "3", "--job", str(ITEMS), "--nats",
                       server.url, "--data", str(hosts), "--enroll-into", str(data), "--json",
                       timeout=240)
        assert sim["failed"] == [], sim
        wait_folded(server.url, data)
        log_url = re.findall(r"log http: (http://\S+)/", (tmp / "ledger.log").read_text())[-1]
        yield Stack(server.url, data, hosts, tmp, sim["job"]["job"], sim, log_url)
        assert ledger.alive()


def _show(stack: Stack, job: str | None = None) -> dict:
    return cli_json("job", "show", job or stack.job, "--json", "--nats", stack.url)


def _one_line_failure(*args: str) -> str:
    """Run a command that must fail: exit 1, one line on stderr, no traceback."""
    r = cli(*args, check=False)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_job_of_200_items_over_3_hosts_is_sealed_and_proved(stack: Stack) -> None:
    """Every item ran (on three hosts) and closed: the job is sealed by the last close with
    nothing missing, and an item's proof bundle verifies offline under the ledger's key."""
    per_host = [h["runs"] for h in stack.sim["hosts"]]
    assert sorted(per_host) == [66, 67, 67]
    doc = _show(stack)
    assert doc["sealed"] and doc["missing"] == []
    assert doc["progress"] == {"items": ITEMS, "bound": ITEMS, "closed": ITEMS,
                               "running": None, "unstarted": 0}
    assert sum(doc["verdicts"].values()) == ITEMS
    # One key, one spelling in the document: the job's issuer as its receipt states it.
    assert doc["issuer"] == doc["receipt"]["issuer"] and len(bytes.fromhex(doc["issuer"])) == 32
    bundle = stack.tmp / "item-123.json"
    cli("job", "prove", stack.job, "--item", "123", "--out", str(bundle), "--nats", stack.url)
    proved = cli_json("job", "verify-proof", str(bundle), "--vkey",
                      str(stack.data / "ledger.vkey"), "--json")
    assert proved["item"]["index"] == 123 and not proved["item"]["missing"]
    assert proved["receipt"]["energy"] == doc["energy"]
    run = proved["item"]["run"]
    shown = api(stack.url, "run", {"run": run})
    assert shown["phase"] == "closed"
    assert shown["job"] == {"job": stack.job, "index": 123, "holds": True, "closed": True,
                            "sealed": True}
    text = cli("run", "show", run, "--nats", stack.url).stdout
    assert f"item 123 of job {stack.job} (sealed): closed" in text, text


def test_the_explorer_lists_the_job_and_shows_its_receipt(stack: Stack) -> None:
    """/ui/ lists the job; its page shows the progress, no missing item, the receipt's root
    and links to the item runs."""
    def get(path: str) -> str:
        with urllib.request.urlopen(stack.log_url + path, timeout=30) as resp:
            return resp.read().decode()

    from urllib.parse import quote

    assert f"/ui/job/{quote(stack.job)}" in get("/ui/")
    page = get(f"/ui/job/{quote(stack.job)}")
    doc = _show(stack)
    assert f"{ITEMS} items: {ITEMS} closed" in page and "sealed" in page
    assert "<p id=missing>none</p>" in page and doc["receipt"]["root"] in page
    assert page.count("class=run href='/ui/run/") == ITEMS


def test_a_tampered_bundle_fails_with_one_line(stack: Stack, tmp_path: Path) -> None:
    """A bundle whose receipt under-reports the job's energy, or whose item is another
    item, fails verification by name."""
    bundle = tmp_path / "b.json"
    cli("job", "prove", stack.job, "--item", "5", "--out", str(bundle), "--nats", stack.url)
    doc = json.loads(bundle.read_text())
    r = decode_receipt(bytes.fromhex(doc["receipt"]))
    n = next(i for i, v in enumerate(r.sums[:8]) if v)  # the first energy it reports
    lowered = r.__class__(r.terms, r.root, (*r.sums[:n], r.sums[n] - 1, *r.sums[n + 1:]),
                          r.log_size, r.missing)
    forged = dict(doc, receipt=encode_receipt(lowered).hex())
    bundle.write_text(json.dumps(forged))
    line = _one_line_failure("job", "verify-proof", str(bundle), "--vkey",
                             str(stack.data / "ledger.vkey"))
    assert line.startswith("LeafMismatch"), line
    bundle.write_text(json.dumps(dict(doc, item=6)))
    line = _one_line_failure("job", "verify-proof", str(bundle), "--vkey",
                             str(stack.data / "ledger.vkey"))
    assert line.startswith("ItemIndexMismatch"), line


def test_the_receipt_is_recomputed_from_the_exported_records(stack: Stack,
                                                             tmp_path: Path) -> None:
    """`fleet job export` then `fleet job verify`: the receipt is recomputed from the 200
    records; a receipt that lowers one energy total, a folder missing one item's record
    and one holding an item twice are each refused by name."""
    records = tmp_path / "records"
    cli("job", "export", stack.job, "--out", str(records), "--nats", stack.url, timeout=180)
    assert len(list(records.iterdir())) == ITEMS
    receipt = tmp_path / "receipt.hex"
    receipt.write_text(_show(stack)["receipt"]["hex"])
    ok = cli_json("job", "verify", str(receipt), "--records", str(records), "--json")
    assert ok["verdict"] == "valid" and ok["records"] == ITEMS and ok["missing"] == []

    r = decode_receipt(bytes.fromhex(receipt.read_text()))
    idle = r.sums[3]  # idle.estimated: the simulated parks'
    forged = tmp_path / "forged.hex"
    forged.write_text(encode_receipt(r.__class__(r.terms, r.root, (*r.sums[:3], idle - 1,
                                                                   *r.sums[4:]),
                                                 r.log_size, r.missing)).hex())
    line = _one_line_failure("job", "verify", str(forged), "--records", str(records))
    assert "JobTotalsMismatch" in line, line

    dropped = tmp_path / "dropped"
    shutil.copytree(records, dropped)
    (dropped / "item-42.json").unlink()
    line = _one_line_failure("job", "verify", str(receipt), "--records", str(dropped))
    assert "MissingItemsMismatch" in line, line

    twice = tmp_path / "twice"
    shutil.copytree(records, twice)
    shutil.copy(twice / "item-7.json", twice / "item-7-again.json")
    line = _one_line_failure("job", "verify", str(receipt), "--records", str(twice))
    assert "DuplicateItem" in line, line


async def _publish_item(url: str, host_dir: Path, name: str, job: bytes, index: int,
                        grants: bytes, close: bool) -> str:
    """Record item ``index`` of ``job`` on simulated host ``name`` and publish it."""
    host = Host(name, host_dir)
    try:
        run = host.open_item_run(job, index, grants)
        run.execute(uj=1000, provenance="measured", meter="rapl:package-0",
                    journal_root=digest(b"j%d" % index), calls=CallAccount(("c",), ("c",)))
        if close:
            run.close()
        nc = await connect([url], None)
        try:
            report = await Publisher(host.outbox, nc.jetstream(timeout=5.0)).drain(timeout=20)
            assert report.remaining == 0
        finally:
            await nc.close()
        return run.run
    finally:
        host.close()


def test_a_second_run_of_an_item_is_refused_and_the_ledger_goes_on(stack: Stack,
                                                                    tmp_path: Path) -> None:
    """In an open job, another host starts item 0 again under another grant set: the
    ledger refuses its segment as DuplicateItem (an index past the job's items as
    ItemOutOfRange, a new run of an item of the sealed job as JobSealed), keeps each
    refusal and keeps folding; sealing the sealed job again is one line and exit 1."""
    cli("grant", "keygen", "--out", str(tmp_path), "--name", "owner")
    key = str(tmp_path / "owner.key")
    opened = cli_json("job", "open", "twins", "--items", "3", "--key", key, "--nats",
                      stack.url, "--json")
    job = parse_address(opened["job"])
    hosts = stack.hosts
    first = asyncio.run(_publish_item(stack.url, hosts / "host1", "host1", job, 0,
                                      digest(b"first"), False))
    twin = asyncio.run(_publish_item(stack.url, hosts / "host2", "host2", job, 0,
                                     digest(b"another"), False))
    past = asyncio.run(_publish_item(stack.url, hosts / "host2", "host2", job, 3,
                                     digest(b"first"), False))
    sealed = asyncio.run(_publish_item(stack.url, hosts / "host3", "host3",
                                       parse_address(stack.job), 9, digest(b"another"), False))
    wait_folded(stack.url, stack.data)
    for run, rule in ((twin, "DuplicateItem"), (past, "ItemOutOfRange"),
                      (sealed, "JobSealed")):
        assert [r["rule"] for r in api(stack.url, "rejections", {"run": run})["rejections"]] \
            == [rule]
    assert api(stack.url, "run", {"run": first})["segments"] == 1
    assert api(stack.url, "status")["healthy"]
    line = _one_line_failure("job", "seal", stack.job, "--key", key, "--nats", stack.url)
    assert "JobSealed" in line, line


def test_a_job_sealed_early_lists_its_missing_items(stack: Stack, tmp_path: Path) -> None:
    """A job of five items, item 0 closed and item 1 still running when it is sealed: the
    receipt lists items 1-4 as missing, and a later item of it is refused (JobSealed)."""
    cli("grant", "keygen", "--out", str(tmp_path), "--name", "owner")
    key = str(tmp_path / "owner.key")
    opened = cli_json("job", "open", "early", "--items", "5", "--key", key, "--nats",
                      stack.url, "--json")
    job = parse_address(opened["job"])
    grants = digest(b"early grants")
    asyncio.run(_publish_item(stack.url, stack.hosts / "host2", "host2", job, 0, grants, True))
    running = asyncio.run(_publish_item(stack.url, stack.hosts / "host2", "host2", job, 1,
                                        grants, False))
    wait_folded(stack.url, stack.data)
    assert not _show(stack, opened["job"])["sealed"]
    assert api(stack.url, "run", {"run": running})["job"]["sealed"] is False
    cli("job", "seal", opened["job"], "--key", key, "--nats", stack.url)
    doc = _show(stack, opened["job"])
    assert doc["sealed"] and doc["missing"] == [1, 2, 3, 4]
    assert api(stack.url, "run", {"run": running})["job"] == {
        "job": opened["job"], "index": 1, "holds": True, "closed": False, "sealed": True}
    assert "sealed before the run closed, listed missing" in cli(
        "run", "show", running, "--nats", stack.url).stdout
    assert doc["receipt"]["missing"] == [1, 2, 3, 4]
    late = asyncio.run(_publish_item(stack.url, stack.hosts / "host3", "host3", job, 3,
                                     grants, False))
    wait_folded(stack.url, stack.data)
    assert [r["rule"] for r in api(stack.url, "rejections", {"run": late})["rejections"]] \
        == ["JobSealed"]


def _receipts(data: Path) -> list[tuple[str, bytes | None, int | None]]:
    import sqlite3

    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True)
    try:
        return [(j, None if r is None else bytes(r), i) for j, r, i in db.execute(
            "SELECT job, receipt, leaf_index FROM jobs ORDER BY job")]
    finally:
        db.close()


def _fresh_replica(url: str, data: Path, name: str, tmp: Path) -> Path:
    """A second ledger, new folder (the same offline enrolments), folding the whole stream."""
    fresh = tmp / name
    fresh.mkdir()
    shutil.copy(data / "hosts.json", fresh / "hosts.json")
    with LedgerProc(url, fresh, "--name", name, log=tmp / f"{name}.log") as ledger:
        ledger.start()
        wait_folded(url, fresh)
    return fresh


def test_replicas_agree_on_every_receipt_byte(stack: Stack, tmp_path: Path) -> None:
    """A second ledger folding the same stream from its start makes the same receipts,
    byte for byte, at the same leaves, and the same tree."""
    wait_folded(stack.url, stack.data)
    fresh = _fresh_replica(stack.url, stack.data, "replica", tmp_path)
    mine, theirs = _receipts(stack.data), _receipts(fresh)
    assert mine == theirs and dict((j, r) for j, r, _i in mine)[stack.job] is not None
    a, b = store_summary(stack.data), store_summary(fresh)
    assert (a.size, a.root) == (b.size, b.root)


@pytest.mark.slow
def test_a_ledger_killed_while_sealing_ends_with_a_fault_free_receipt(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """A job of 10^5 items, 30 of them run on three hosts, sealed early while no ledger
    runs; a ledger then folds the stream and is SIGKILLed at random moments of the fold
    (its one batch ends in the seal: the receipt over 10^5 leaves is most of its work)
    until one start completes: it ends with the receipt, tree and root a fault-free fold of
    the same stream makes."""
    url, data = nats_server.url, tmp_path / "ledger"
    data.mkdir()
    asyncio.run(_make_stream(url))  # the hosts publish before any ledger runs
    cli("grant", "keygen", "--out", str(tmp_path), "--name", "owner")
    key = str(tmp_path / "owner.key")
    opened = cli_json("job", "open", "big", "--items", "100000", "--key", key, "--nats", url,
                      "--json")
    job = parse_address(opened["job"])
    for i in range(30):
        name = f"host{1 + i % 3}"
        asyncio.run(_publish_item(url, tmp_path / name, name, job, i, digest(b"g"), i % 5 > 0))
    for name in ("host1", "host2", "host3"):
        host = Host(name, tmp_path / name)
        cli("host", "enroll", name, "--pubkey", host.public_key, "--data", str(data))
        host.close()
    cli("job", "seal", opened["job"], "--key", key, "--nats", url)
    rng = random.Random(27)
    top = api_last_seq(url)
    kills = 0
    with LedgerProc(url, data, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        for _round in range(12):
            # Not waiting for "serving": by then a fast machine may have folded and sealed,
            # leaving nothing to kill. From the spawn, the kill falls in the start, the fold
            # or the receipt's making (about 1.5 s together where this was measured).
            ledger.start(wait=False)
            time.sleep(rng.uniform(0.2, 1.0))
            if watermark(data) >= top:
                break
            ledger.kill()
            kills += 1
        assert kills >= 2, "the ledger sealed before two kills: nothing tested"
        if not ledger.alive():
            ledger.start()
        wait_folded(url, data)
        assert ledger.alive()
    fresh = _fresh_replica(url, data, "fresh", tmp_path)
    mine = _receipts(data)
    assert mine == _receipts(fresh) and mine[0][1] is not None
    assert decode_receipt(mine[0][1]).missing[:6] == (0, 5, 10, 15, 20, 25)
    a, b = store_summary(data), store_summary(fresh)
    assert (a.size, a.root, a.rejections) == (b.size, b.root, b.rejections)


async def _make_stream(url: str) -> None:
    from fleet_ledger.fleet.subjects import DEFAULT_FLEET
    from fleet_ledger.ledger.stream import ensure_stream

    nc = await connect([url], None)
    try:
        await ensure_stream(nc.jetstream(), 1, 120.0, DEFAULT_FLEET)
    finally:
        await nc.close()


def api_last_seq(url: str) -> int:
    from pipeline_helpers import last_seq

    wait_for(lambda: last_seq(url) > 0, 10, "the stream to hold the job")
    return last_seq(url)


# -- a verifier written from the spec's text alone (docs/spec/jobs.md, fleet-log.md, C2SP
# signed-note), with hashlib, blake3 and nacl: no encoder or decoder of the project ----------


def _spec_sums(data: bytes) -> list[int]:
    return list(struct.unpack(">8Q5I", data))


def _spec_node(left: tuple[bytes, bytes], right: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    sums = [a + b for a, b in zip(_spec_sums(left[1]), _spec_sums(right[1]), strict=True)]
    return (blake3(b"fleet.jobnode/1" + left[0] + left[1] + right[0] + right[1]).digest(),
            struct.pack(">8Q5I", *sums))


def _spec_fold(node: tuple[bytes, bytes], index: int, size: int,
               path: list[tuple[bytes, bytes]], join: object) -> tuple[bytes, bytes]:
    """RFC 9162 section 2.1.3.2, with ``join(left, right)`` for the hash of two nodes."""
    fn, sn = index, size - 1
    for sibling in path:
        assert sn != 0, "the path is too long"
        if fn & 1 or fn == sn:
            node = join(sibling, node)  # type: ignore[operator]
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = join(node, sibling)  # type: ignore[operator]
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0, "the path is too short"
    return node


def _spec_verify(bundle: dict, vkey_text: str) -> dict:
    """Check a job proof bundle as the spec's text says, returning what the item's leaf
    states; any failed check is an AssertionError."""
    import base64
    import hashlib

    from nacl.signing import VerifyKey

    receipt = bytes.fromhex(bundle["receipt"])
    proof = bytes.fromhex(bundle["item_proof"])
    # The receipt: domain, terms (issuer, nonce, items, grant flag [grant], text(name)),
    # root, 84 bytes of sums, log_size, missing indexes.
    assert receipt.startswith(b"fleet.jobreceipt/1")
    at = len(b"fleet.jobreceipt/1")
    items, flag = struct.unpack_from(">IB", receipt, at + 48)
    end = at + 53 + (32 if flag == 1 else 0)
    end += 2 + struct.unpack_from(">H", receipt, end)[0]
    terms = receipt[at:end]
    job = blake3(b"fleet.job/1" + terms).digest()
    root, sums = receipt[end:end + 32], receipt[end + 32:end + 116]
    missing = [i for (i,) in struct.iter_unpack(">I", receipt[end + 124:])]
    assert len(missing) == _spec_sums(sums)[12]
    assert bundle["job"] == "b3:" + base64.urlsafe_b64encode(job).decode().rstrip("=")
    # The item proof: domain, job, items, index, leaf, count, (hash, sums) x count.
    assert proof.startswith(b"fleet.jobproof/1")
    at = len(b"fleet.jobproof/1")
    p_job, p_items, index = struct.unpack_from(">32sII", proof, at)
    assert (p_job, p_items, index) == (job, items, bundle["item"])
    at += 40
    leaf = proof[at:at + (174 if proof[at] == 1 else 5)]
    count = proof[at + len(leaf)]
    body = proof[at + len(leaf) + 1:]
    assert len(body) == 116 * count
    path = [(body[i:i + 32], body[i + 32:i + 116]) for i in range(0, len(body), 116)]
    if leaf[0] == 1:
        energy = list(struct.unpack_from(">8Q", leaf, 101))
        verdict = leaf[165]
        counts = [int(verdict == c) for c in (1, 2, 3, 4)] + [0]
        assert index not in missing
    else:
        energy, counts = [0] * 8, [0, 0, 0, 0, 1]
        assert index in missing
    assert struct.unpack_from(">I", leaf, 1)[0] == index
    node = (blake3(b"fleet.jobleaf/1" + leaf).digest(), struct.pack(">8Q5I", *energy, *counts))
    assert _spec_fold(node, index, items, path, _spec_node) == (root, sums)
    # The receipt's job leaf in the fleet log, RFC 9162 with SHA-256, to the checkpoint.
    job_leaf = b"fleet.jobr/1" + job + blake3(receipt).digest()
    assert bytes.fromhex(bundle["leaf"]) == job_leaf
    note = bundle["checkpoint"]
    text, _, signatures = note.partition("\n\n")
    origin, size, root_b64 = text.split("\n")[:3]
    assert (origin, int(size)) == (bundle["origin"], bundle["tree_size"])

    def join(left: bytes, right: bytes) -> bytes:
        return hashlib.sha256(b"\x01" + left + right).digest()

    log_root = _spec_fold(hashlib.sha256(b"\x00" + job_leaf).digest(), bundle["leaf_index"],
                          bundle["tree_size"], [bytes.fromhex(h) for h in bundle["inclusion"]],
                          join)
    assert log_root == base64.b64decode(root_b64)
    # The signed note: the verifier key "name+keyid+base64(0x01 || key)"; a signature line
    # "— name base64(keyid || signature)" over the text before the blank line.
    name, key_id, key_b64 = vkey_text.strip().split("+", 2)  # base64 may hold "+"
    key = base64.b64decode(key_b64)
    assert key[0] == 1 and hashlib.sha256(name.encode() + b"\n" + key).digest()[:4].hex() \
        == key_id
    for line in signatures.strip().split("\n"):
        who, sig = line.removeprefix("— ").split(" ")
        raw = base64.b64decode(sig)
        if who == name and raw[:4].hex() == key_id:
            VerifyKey(key[1:]).verify((text + "\n").encode(), raw[4:])
            break
    else:
        raise AssertionError("no signature by the ledger's key")
    return {"index": index, "energy": energy, "counts": counts}


def test_an_item_proof_verifies_by_the_spec_text_alone(stack: Stack, tmp_path: Path) -> None:
    """The bundle of item 77, checked by a verifier written from the spec's text (hashlib,
    blake3, nacl; nothing of the project): the leaf's path to the receipt's root and sums,
    the receipt's leaf in the log to the signed checkpoint, the note's signature; a bundle
    whose receipt lowers one total fails it."""
    out = tmp_path / "b.json"
    cli("job", "prove", stack.job, "--item", "77", "--out", str(out), "--nats", stack.url)
    bundle = json.loads(out.read_text())
    vkey = (stack.data / "ledger.vkey").read_text()
    stated = _spec_verify(bundle, vkey)
    assert stated["index"] == 77 and sum(stated["counts"]) == 1
    r = decode_receipt(bytes.fromhex(bundle["receipt"]))
    n = next(i for i, v in enumerate(r.sums[:8]) if v)
    lowered = encode_receipt(r.__class__(r.terms, r.root, (*r.sums[:n], r.sums[n] - 1,
                                                           *r.sums[n + 1:]),
                                         r.log_size, r.missing))
    with pytest.raises(AssertionError):
        _spec_verify(dict(bundle, receipt=lowered.hex()), vkey)


FLOW = '''
from typing import Any


def double(x: int) -> int:
    return 2 * x


async def item(ctx: Any, inp: dict) -> int:
    return await ctx.step("double", double, inp["n"])
'''


def test_runtime_runs_started_as_a_jobs_items_seal_it(stack: Stack, tmp_path: Path) -> None:
    """`fleet runtime start ... --job J --item I` runs a durable workflow as item I of J: two
    such runs on two hosts close, and their closes seal the job with nothing missing; the
    same item started again (another name, another host: the same unit and grant set, so
    the same run) is refused as a run that exists."""
    (tmp_path / "job_flow.py").write_text(FLOW)
    cli("grant", "keygen", "--out", str(tmp_path), "--name", "owner")
    opened = cli_json("job", "open", "runtime", "--items", "2", "--key",
                      str(tmp_path / "owner.key"), "--nats", stack.url, "--json")
    def start(index: int, host: str) -> list[str]:
        return ["runtime", "start", "job_flow:item", f"item-{index}-{host}", "--input",
                json.dumps({"n": index}), "--job", opened["job"], "--item", str(index),
                "--path", str(tmp_path), "--data", str(stack.hosts / host), "--name", host,
                "--nats", stack.url, "--json"]

    runs = [cli_json(*start(index, host))["run"] for index, host in ((0, "host1"),
                                                                     (1, "host2"))]
    wait_folded(stack.url, stack.data)
    doc = _show(stack, opened["job"])
    assert doc["sealed"] and doc["missing"] == [] and doc["progress"]["closed"] == 2
    assert all(api(stack.url, "run", {"run": r})["phase"] == "closed" for r in runs)
    again = cli(*start(1, "host3"), check=False)
    assert again.returncode == 2 and "exists" in again.stderr, again
