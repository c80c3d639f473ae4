"""The seal worker process: the same verdicts as in line, and a dead worker changes none."""

from __future__ import annotations

import os
import signal
import struct

import pytest
from nacl.signing import SigningKey

from fleet_ledger.ledger.seal_worker import SealWorker, decode_request, encode_request, verify_many


def items(count: int = 300):
    key = SigningKey(bytes(range(32)))
    public = bytes(key.verify_key)
    out = []
    for i in range(count):
        message = b"fleet.seal/1" + i.to_bytes(8, "big") * 4
        signature = key.sign(message).signature
        if i % 7 == 3:
            signature = bytes([signature[0] ^ 1]) + signature[1:]
        out.append((public, message, signature))
    return out


def test_worker_verdicts_equal_in_line_verdicts():
    """Half the batch checked in the worker gives exactly the in-line verdicts, bad ones too."""
    batch = items()
    expected = verify_many(batch)
    assert expected.count(False) == len([i for i in range(300) if i % 7 == 3])
    worker = SealWorker()
    worker.start()
    try:
        assert worker.collect(worker.submit(batch, 0.5)) == expected
        # The worker answered (a dead one would have been replaced by in-line checks).
        assert worker._proc is not None and worker._proc.poll() is None
        # small batches stay in line
        assert worker.collect(worker.submit(batch[:10], 0.5)) == expected[:10]
    finally:
        worker.close()


def test_a_killed_worker_falls_back_to_in_line_checks():
    """With its worker SIGKILLed, verification still answers every seal correctly."""
    batch = items()
    worker = SealWorker()
    worker.start()
    assert worker._proc is not None
    pid = worker._proc.pid
    os.kill(pid, signal.SIGKILL)
    worker._proc.wait(5)
    try:
        assert worker.collect(worker.submit(batch, 0.5)) == verify_many(batch)
        assert worker._proc is None
    finally:
        worker.close()


def test_the_worker_exits_when_closed():
    """close() ends the worker process (its stdin closes and it returns)."""
    worker = SealWorker()
    worker.start()
    proc = worker._proc
    assert proc is not None and proc.poll() is None
    worker.close()
    assert proc.poll() is not None


def test_pipelined_batches_keep_their_own_verdicts():
    """Batch B submitted while A is still in the worker: each gets exactly its verdicts,
    whatever share the ledger checks itself, and the share stays within its bounds."""
    a, b = items(200), items(300)[100:]
    worker = SealWorker()
    worker.start()
    try:
        for share in (None, 0.0, 0.3):
            ta = worker.submit(a, share)
            tb = worker.submit(b, share)  # queued behind A in the pipe
            assert worker.collect(tb) == verify_many(b)
            assert worker.collect(ta) == verify_many(a)
            assert 0.0 <= worker.share_in_line <= 0.5
    finally:
        worker.close()


def test_two_requests_queue_and_a_third_waits_for_the_first_answer():
    """Up to two requests are in the worker (one checked, one in the pipe); a third submit
    reads the oldest answer first, and answers too large to keep unread are read before a
    second request goes in. Every ticket keeps its own verdicts, collected in any order."""
    a, b, c = items(120), items(300)[50:250], items(300)[200:]
    worker = SealWorker()
    worker.start()
    try:
        ta, tb = worker.submit(a, 0.0), worker.submit(b, 0.0)
        assert len(worker._outstanding) == 2 and ta.answer is None and tb.answer is None
        tc = worker.submit(c, 0.0)
        assert ta.answer is not None and list(worker._outstanding) == [tb, tc]
        assert worker.collect(tc) == verify_many(c)
        assert worker.collect(ta) == verify_many(a)
        assert worker.collect(tb) == verify_many(b)
        worker._MAX_UNREAD = 150  # a and b's answers together would exceed it
        ta, tb = worker.submit(a, 0.0), worker.submit(b, 0.0)
        assert ta.answer is not None and list(worker._outstanding) == [tb]
        assert worker.collect(tb) == verify_many(b) and worker.collect(ta) == verify_many(a)
    finally:
        worker.close()


def test_an_idle_worker_gets_half_and_a_busy_one_the_adaptive_share():
    """With nothing in the worker, the ledger checks half a batch itself (nothing else is
    in flight to overlap); behind a request in flight, the adaptive share applies."""
    a, b = items(200), items(300)[100:]
    worker = SealWorker()
    worker.start()
    try:
        worker.share_in_line = 0.1
        ta = worker.submit(a)
        assert len(ta.mine) == 100 and not ta.adaptive
        tb = worker.submit(b)
        assert len(tb.mine) == 20 and tb.adaptive
        assert worker.collect(ta) == verify_many(a) and worker.collect(tb) == verify_many(b)
    finally:
        worker.close()


def test_two_outstanding_batches_are_answered_when_the_worker_dies():
    a, b = items(200), items(300)[100:]
    worker = SealWorker()
    worker.start()
    assert worker._proc is not None
    ta, tb = worker.submit(a, 0.0), worker.submit(b, 0.0)
    os.kill(worker._proc.pid, signal.SIGKILL)
    try:
        assert worker.collect(tb) == verify_many(b)
        assert worker.collect(ta) == verify_many(a)
        assert worker._proc is None
    finally:
        worker.close()


def test_an_outstanding_batch_is_answered_when_the_worker_dies():
    batch = items()
    worker = SealWorker()
    worker.start()
    assert worker._proc is not None
    ticket = worker.submit(batch)
    os.kill(worker._proc.pid, signal.SIGKILL)
    try:
        assert worker.collect(ticket) == verify_many(batch)
    finally:
        worker.close()


def test_request_frames_round_trip_and_refuse_a_short_body():
    batch = items(20)
    frame = encode_request(batch)
    count, size = int.from_bytes(frame[:4], "big"), int.from_bytes(frame[4:8], "big")
    assert (count, size) == (20, len(frame) - 8)
    assert decode_request(count, frame[8:]) == batch
    with pytest.raises((ValueError, struct.error)):
        decode_request(count + 1, frame[8:])


def test_the_worker_exits_when_its_ledger_is_sigkilled(tmp_path):
    """A SIGKILLed ledger closes nothing, but its end of the pipe closes with it: the
    worker reads end of input and exits (no orphan left verifying for nobody)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    parent = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom ledger.seal_worker import SealWorker\n"
         "w = SealWorker(); w.start(); print(w._proc.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                stat = Path(f"/proc/{worker_pid}/stat").read_text()
                state = stat.rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                break
            if state == "Z":
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"seal worker {worker_pid} outlived its SIGKILLed ledger")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
