"""Only roots leave: every byte each anchor sends is the checkpoint, its proof or its digest."""

from __future__ import annotations

import asyncio
import hashlib

import nats
from anchor_helpers import anchored, publish_run, running_ledger, wait_for
from rfc3161_client._rust import parse_timestamp_request
from tsa_helpers import OpenSslTsa

from fleet_ledger.anchors.base import AnchorConfig
from fleet_ledger.anchors.witness_server import RunningWitness, Witness
from fleet_ledger.fleet.address import parse_address
from fleet_ledger.fleet.log.cosignature import generate_witness_signer
from fleet_ledger.fleet.log.witness import format_request, parse_request
from fleet_ledger.ledger.keys import load_or_create_signer
from fleet_ledger.plumbing.testing import running_server

ORIGIN = "fleet-ledger.local/anchored"


class Tap:
    """Every message published on the auditors' server except the server's own replies."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, dict[str, str]]] = []

    async def start(self, url: str) -> nats.aio.client.Client:
        nc = await nats.connect(url)

        async def on_msg(msg: nats.aio.msg.Msg) -> None:
            if not msg.subject.startswith(("_INBOX.", "$JS.")):
                self.seen.append((msg.subject, msg.data, dict(msg.headers or {})))

        await nc.subscribe(">", cb=on_msg)
        await nc.flush()
        return nc


def test_every_byte_sent_to_each_anchor_is_checkpoint_material(nats_server, tmp_path):
    """Witness bodies rebuild exactly from (old size, the ledger's consistency proof, a signed
    checkpoint); TSA queries are a bare TimeStampReq of SHA-256(checkpoint body); the auditors'
    NATS sees only checkpoint notes - and no run id, head or segment payload appears anywhere."""
    data = tmp_path / "ledger"
    data.mkdir()
    log_vkey = load_or_create_signer(data, ORIGIN).verifier()
    wsigner = generate_witness_signer("witness.test/w1")
    witness_bodies: list[bytes] = []
    tap = Tap()
    with running_server(tmp_path / "auditors") as auditors, \
            OpenSslTsa(tmp_path / "tsa") as tsa, \
            RunningWitness(Witness(wsigner, [log_vkey], tmp_path / "w"),
                           on_request=witness_bodies.append) as witness:
        configs = [
            AnchorConfig("witness", "w1", {"url": witness.url, "vkey": wsigner.key().text()}),
            AnchorConfig("tsa", "tsa", {"url": tsa.url, "ca": str(tsa.ca)}),
            AnchorConfig("nats", "auditors", {"url": auditors.url, "subject": "audit.cp"}),
        ]

        async def scenario():
            tap_nc = await tap.start(auditors.url)
            try:
                async with running_ledger(nats_server.url, data, configs) as ledger:
                    runs = []
                    for unit in ("u1", "u2", "u3"):
                        runs.append(await publish_run(nats_server.url, unit, "epre"))
                        await wait_for(lambda: anchored(ledger, {"w1", "tsa", "auditors"}), 30,
                                       "all anchors")
                    notes = {size: note for size, note in ledger.store.conn.execute(
                        "SELECT size, note FROM checkpoints")}
                    secrets = [bytes(p) for (p,) in ledger.store.conn.execute(
                        "SELECT payload FROM segments")]
                    heads = [h for (h,) in ledger.store.conn.execute("SELECT head FROM segments")]
                    proofs = {(old, new): ledger.store.tree.consistency_proof(old, new)
                              for old in notes for new in notes if 0 < old < new}
                    await tap_nc.flush()
                    return runs, notes, secrets, heads, proofs
            finally:
                await tap_nc.close()

        runs, notes, payloads, heads, proofs = asyncio.run(scenario())
        tsa_bodies = list(tsa.received)

    bodies = {note.split("\n\n")[0] + "\n": note for note in notes.values()}
    sent: list[bytes] = []
    assert witness_bodies and tsa_bodies and tap.seen
    for raw in witness_bodies:
        request = parse_request(raw)
        assert request.note in notes.values()
        size = int(request.note.split("\n")[1])
        expected = [] if request.old_size in (0, size) else proofs[(request.old_size, size)]
        assert list(request.proof) == expected
        assert raw == format_request(request.old_size, expected, request.note)
        sent.append(raw)
    digests = {hashlib.sha256(body.encode()).digest() for body in bodies}
    for raw in tsa_bodies:
        query = parse_timestamp_request(raw)
        assert query.message_imprint.message in digests
        assert query.policy is None and len(raw) <= 72
        sent.append(raw)
    for subject, body, headers in tap.seen:
        assert subject == "audit.cp" and body.decode() in notes.values()
        assert set(headers) <= {"Nats-Msg-Id"}
        sent.append(body + repr(headers).encode())
    forbidden = [*payloads, *(parse_address(r) for r in runs), *(parse_address(h) for h in heads),
                 *(r.encode() for r in runs), *(h.encode() for h in heads)]
    for blob in sent:
        for secret in forbidden:
            assert secret not in blob
