"""The fleet log over HTTP as c2sp.org/tlog-tiles, checked by a client written from the C2SP
texts alone (tests/tlog_client.py), against a real ledger (``fleet ledger serve --http``)
and its NATS API."""

from __future__ import annotations

import base64
import gzip
import urllib.request

import pytest
from http_helpers import build_store, enroll_h1, http_get, publish_runs, serving
from tlog_client import WIDTH, TileClient, add_checkpoint_body, leaf_hash

from fleet_ledger.anchors.witness_server import RunningWitness, Witness
from fleet_ledger.fleet.log.cosignature import (
    WitnessKey,
    generate_witness_signer,
    verify_cosignature_lines,
)
from fleet_ledger.fleet.log.cosignature import parse_signature_lines as cosig_lines
from fleet_ledger.fleet.log.note import parse_note, parse_verifier_key
from fleet_ledger.ledger.keys import load_or_create_signer

from pipeline_helpers import api, wait_for

BIG = 65_836  # 257 full level-0 tiles and one of 44; level 1: one full, one of 1; level 2: 1


def leaf_ids(entry: bytes) -> tuple[str, int]:
    """Run id and segment index of a fleet leaf (84 bytes: tag, run, index, head)."""
    assert len(entry) == 84 and entry[:12] == b"fleet.leaf/1"
    run = "b3:" + base64.urlsafe_b64encode(entry[12:44]).decode().rstrip("=")
    return run, int.from_bytes(entry[44:52], "big")


def check_size(client: TileClient, nats_url: str, vkey: str, size: int, previous: int,
               samples: list[int]) -> bytes:
    """Everything a follower can check at ``size`` from tiles alone, and that its proofs
    equal the NATS API's; returns the checkpoint note."""
    cp = client.checkpoint(vkey)
    assert cp.size == size and cp.origin == "fleet-ledger.local/ledger"
    assert client.root(size) == cp.root
    leaves: dict[int, bytes] = {}
    for n in range((size + WIDTH - 1) // WIDTH):
        entries = client.entries(n, size)
        assert [leaf_hash(e) for e in entries] == client.tile(0, n, size)
        leaves.update((n * WIDTH + i, e) for i, e in enumerate(entries))
    assert sorted(leaves) == list(range(size))
    for index in samples:
        run, seg = leaf_ids(leaves[index])
        bundle = api(nats_url, "prove", {"run": run, "index": seg})
        assert bundle["leaf_index"] == index and bundle["leaf"] == leaves[index].hex()
        at = bundle["tree_size"]  # the API proves against the first checkpoint holding it
        assert [h.hex() for h in client.inclusion(index, at)] == bundle["inclusion"]
        status, _, body = client.get(f"proof/{run}/{seg}")
        assert status == 200
        lines = body.decode().split("\n")
        assert lines[0] == "c2sp.org/tlog-proof@v1"
        assert base64.b64decode(lines[1].removeprefix("extra ")) == leaves[index]
        assert lines[2] == f"index {index}"
        hashes = [base64.b64decode(x) for x in lines[3:lines.index("")]]
        assert hashes == client.inclusion(index, size)
    for old in sorted({0, 1, previous, size // 2, size - 1} & set(range(size + 1))):
        doc = api(nats_url, "consistency", {"old": old, "new": size})
        assert [h.hex() for h in client.consistency(old, size)] == doc["proof"], old
    return cp.note.encode()


def witness_adds(witness: RunningWitness, client: TileClient, vkey: str, old: int,
                 note: bytes, size: int, key: WitnessKey) -> None:
    """The witness cosigns ``note`` given a consistency proof from ``old`` built from tiles."""
    body = add_checkpoint_body(old, client.consistency(old, size), note.decode())
    req = urllib.request.Request(witness.url + "/add-checkpoint", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        sigs = cosig_lines(resp.read().decode())
    text = parse_note(note.decode())[0]
    assert verify_cosignature_lines(text, sigs, [key])


def test_a_c2sp_client_follows_a_folding_ledger_at_1_255_256_257(nats_server, tmp_path):
    """A client written from the C2SP texts follows a ledger folding genuine segments at
    sizes 1, 255, 256 and 257: checkpoint signature, root from tiles, entries against the
    level-0 hashes, inclusion and consistency proofs equal to the NATS API's, tlog-proofs,
    and our witness cosigns each size given a consistency proof built from tiles."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    wsigner = generate_witness_signer("witness.test/w1")
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served, \
            RunningWitness(Witness(wsigner, [parse_verifier_key(served.vkey)],
                                   tmp_path / "w")) as witness:
        client = TileClient(served.log_url)
        plans = {1: ["e"], 255: ["e" * 60] * 4 + ["e" * 14], 256: ["e"], 257: ["e"]}
        previous = 0
        for size, batch in plans.items():
            publish_runs(nats_server.url, batch, f"to-{size}")
            wait_for(lambda s=size: client.get("checkpoint")[2].split(b"\n")[1:2]
                     == [str(s).encode()], 30, f"a checkpoint of {size}")
            note = check_size(client, nats_server.url, served.vkey, size, previous,
                              sorted({0, size // 2, size - 1}))
            witness_adds(witness, client, served.vkey, previous, note, size,
                         wsigner.key())
            previous = size


@pytest.fixture
def big_ledger(nats_server, tmp_path):
    """A ledger serving a 66,100-leaf store whose newest checkpoint is 65,836 (checkpoints
    also at 1, 255, 256, 257, 65,535); it never signs another."""
    data = tmp_path / "big"
    build_store(data, 66_100, [1, 255, 256, 257, 65_535, BIG])
    with serving(nats_server.url, data, "--checkpoint-ms", "1000000000",
                 "--checkpoint-every", "1000000000") as served:
        yield served


def test_a_c2sp_client_checks_65836_leaves_with_partial_level_1_and_2_tiles(big_ledger,
                                                                             nats_server):
    """At 65,836 leaves (partial tiles at levels 0, 1 and 2) the client's root, entries,
    inclusion proofs (also against the older checkpoints, through their partial tiles) and
    consistency proofs from every earlier checkpoint equal the ledger's."""
    client = TileClient(big_ledger.log_url)
    check_size(client, nats_server.url, big_ledger.vkey, BIG, 257,
               [0, 254, 255, 256, 30_000, 65_535, BIG - 1])
    fetched = set(client.fetched)
    assert {"tile/2/000.p/1", "tile/1/000", "tile/1/001.p/1", "tile/0/257.p/44"} <= fetched
    assert any(p.startswith("tile/0/000.p/") for p in fetched)  # an older checkpoint's


def test_status_codes_and_cache_headers(big_ledger):
    """The checkpoint is no-store text; tiles are immutable octets; entry bundles are
    gzipped when asked; malformed paths are 400; a tile beyond the signed size, a partial
    tile no checkpoint had, an unknown run or path are 404."""
    base = big_ledger.log_url
    status, headers, body = http_get(base + "/checkpoint")
    assert status == 200 and headers["cache-control"] == "no-store"
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body.decode().split("\n")[1] == str(BIG)
    status, headers, body = http_get(base + "/tile/0/000")
    assert status == 200 and len(body) == 8192
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    assert headers["content-type"] == "application/octet-stream"
    status, headers, zipped = http_get(base + "/tile/entries/001",
                                       {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    status, headers, plain = http_get(base + "/tile/entries/001",
                                      {"Accept-Encoding": "identity"})
    assert status == 200 and "content-encoding" not in headers
    assert gzip.decompress(zipped) == plain and len(plain) == 256 * 86
    for bad in ["tile/0/0067", "tile/64/000", "tile/00/000", "tile/0/000.p/0",
                "tile/0/000.p/256", "tile/0/000.p/007", "tile/0/x000/001", "tile/0/67",
                "tile/entries/abc", "tile/0/x1/000", "proof/b3:x/0",
                "proof/b3:AAAA/%C2%B2"]:  # "²": str.isdigit takes it, int does not
        assert http_get(f"{base}/{bad}")[0] == 400, bad
    for missing in [
        "tile/0/257",              # full at 66,100 leaves, but beyond the signed 65,836
        "tile/entries/257",
        "tile/0/258.p/4",          # in the tree (66,100 leaves), beyond the signed 65,836
        "tile/0/257.p/45",         # in the tree, but no checkpoint had that partial tile
        "tile/0/000.p/2",          # no checkpoint of size 2
        "tile/1/001.p/2",
        "tile/3/000.p/1",
        "proof/b3:AAAA", "nothing", "checkpoint/x",
    ]:
        assert http_get(f"{base}/{missing}")[0] == 404, missing
    for present in ["tile/0/000.p/1", "tile/0/000.p/255", "tile/1/000.p/1", "tile/0/257.p/44",
                    "tile/entries/000.p/1", "tile/entries/257.p/44"]:
        assert http_get(f"{base}/{present}")[0] == 200, present


def test_the_checkpoint_carries_the_witness_cosignatures(nats_server, tmp_path):
    """With a witness anchoring the ledger's checkpoints, GET /checkpoint is the newest
    checkpoint with the log's signature and, once gathered, the witness's cosignature for
    exactly that size (checked against the witness's key)."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    vkey = load_or_create_signer(data, "fleet-ledger.local/ledger").verifier()
    wsigner = generate_witness_signer("witness.test/w1")
    with RunningWitness(Witness(wsigner, [vkey], tmp_path / "w")) as witness:
        anchors = tmp_path / "anchors.toml"
        anchors.write_text(f'[[witness]]\nname = "w1"\nurl = "{witness.url}"\n'
                           f'vkey = "{wsigner.key().text()}"\n')
        with serving(nats_server.url, data, "--checkpoint-ms", "100", "--anchors",
                     str(anchors)) as served:
            publish_runs(nats_server.url, ["eee"], "cosigned")
            client = TileClient(served.log_url)

            def cosigned() -> str | None:
                status, _, body = client.get("checkpoint")
                note = body.decode()
                done = note.count("\u2014 ") == 2 and note.split("\n")[1] == "3"
                return note if status == 200 and done else None

            note = wait_for(cosigned, 30, "a cosigned checkpoint")
            cp = client.checkpoint(served.vkey)  # the log's signature, by the C2SP client
    assert cp.size == 3 and note.startswith(cp.note.split("\n\n")[0])
    text, sigs = parse_note(note)
    assert [s.name for s in sigs] == ["fleet-ledger.local/ledger", "witness.test/w1"]
    assert verify_cosignature_lines(text, sigs, [wsigner.key()])
