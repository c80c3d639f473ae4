"""``fleet verify`` as a subprocess: verdicts, JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot
from fleet_ledger.fleet.record.wire import encode_record

FLEET = str(Path(sys.executable).with_name("fleet"))


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLEET, *args], capture_output=True, text=True, timeout=60)


def write_record(tmp_path: Path) -> tuple[Path, RecordBuilder]:
    b = RecordBuilder(SigningKey(bytes(32)), digest(b"u"), digest(b"g"))
    b.execute(uj=100, provenance="measured", meter="rapl:package-0", journal_root=digest(b"j"),
              calls=CallAccount(("c1",), ()))
    snap = make_snapshot(transcript=digest(b"t"))
    b.suspend(snap, digest(b"m"))
    b.resume(snap, digest(b"m"), 7, "estimated", "estimate:storage")
    b.execute(uj=50, provenance="estimated", meter="cpu", journal_root=digest(b"k"),
              calls=CallAccount((), ("c1",)))
    path = tmp_path / "record.json"
    path.write_bytes(encode_record(b.to_record()))
    return path, b


def test_verify_prints_verdict_and_json(tmp_path):
    """A valid record exits 0 and reports segments, energy split and the wait proof."""
    path, b = write_record(tmp_path)
    human = fleet("verify", str(path))
    assert human.returncode == 0, human.stderr
    assert "valid" in human.stdout and "NonBlocking" in human.stdout
    out = fleet("verify", str(path), "--json", "--host-key", b.host_key)
    assert out.returncode == 0
    doc = json.loads(out.stdout)
    assert doc["segments"] == 4 and doc["wait_proof"] == {"verdict": "NonBlocking"}
    assert doc["energy"]["total_uj"] == 157
    assert doc["energy"]["by_provenance_uj"] == {"measured": 100, "estimated": 57}


def test_tampered_record_exits_1_naming_segment_and_rule(tmp_path):
    """An edited idle energy fails with one line naming segment 3 and HeadMismatch."""
    path, _ = write_record(tmp_path)
    doc = json.loads(path.read_text())
    doc["segments"][2]["idle_uj"] = 8
    path.write_text(json.dumps(doc))
    out = fleet("verify", str(path))
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0
    assert "segment 3" in out.stderr and "HeadMismatch" in out.stderr
    assert "Traceback" not in out.stderr
    js = fleet("verify", str(path), "--json")
    assert js.returncode == 1 and json.loads(js.stdout)["segment"] == 3


def test_missing_and_malformed_files_are_one_line_errors(tmp_path):
    """A missing file and a non-record file each give one line and a non-zero exit."""
    missing = fleet("verify", str(tmp_path / "nope.json"))
    assert missing.returncode != 0 and "no such file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    bad = fleet("verify", str(junk))
    assert bad.returncode == 1 and "MalformedSegment" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_reference_flag_decides_by_the_object_path_alike(tmp_path):
    """``--reference`` verifies by the object path only and reaches the same report as the
    default (wire) decoder; on a tampered file both name the same segment and rule."""
    path, _ = write_record(tmp_path)
    fast = json.loads(fleet("verify", str(path), "--json").stdout)
    ref = json.loads(fleet("verify", str(path), "--json", "--reference").stdout)
    assert (fast.pop("decoder"), ref.pop("decoder")) == ("wire", "objects")
    assert fast == ref
    doc = json.loads(path.read_text())
    doc["segments"][1]["manifest"] = doc["segments"][0]["attestation"]
    path.write_text(json.dumps(doc))
    outs = [fleet("verify", str(path), "--json", *flag) for flag in ((), ("--reference",))]
    assert [o.returncode for o in outs] == [1, 1]
    assert json.loads(outs[0].stdout) == json.loads(outs[1].stdout)
    assert json.loads(outs[0].stdout)["segment"] == 2
