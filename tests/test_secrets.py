"""Secrets stay secret: key files are written 0600 (whatever the umask), and no key material
(ledger signing key, host sealing key, NATS nkey seeds) appears in logs, errors or status.

The nkey seed files' modes and the configs' lack of seeds are pinned in
tests/test_nats_config.py; here the whole system runs under the generated auth config and
everything it prints is searched for every secret it holds.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest
from test_nats_config import running

from fleet_ledger.agents.host import KEY_FILE as HOST_KEY_FILE
from fleet_ledger.agents.host import load_or_create_key
from fleet_ledger.ledger.keys import KEY_FILE, load_or_create_signer
from fleet_ledger.ledger.nats_config import new_seed, write_config

from fault_helpers import FLEET, LedgerProc, fleet, store_summary, wait_until

pytestmark = pytest.mark.timeout(180)

# A whole nkey seed (58 base32 characters: S, the key type, 56 more), not a run of base32
# inside a longer token: a public key (56 characters) contains "SA"/"SU" followed by 50 more
# often enough (about 1 in 100) to have made this test fail now and then.
SEED_SHAPE = re.compile(r"(?<![A-Z2-7])S[UA][A-Z2-7]{56}(?![A-Z2-7])")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_files_are_owner_only_even_with_an_open_umask(tmp_path: Path) -> None:
    """ledger.key and host.key are created 0600 under umask 000 (never widened, even
    briefly), and reopening them changes nothing."""
    old = os.umask(0)
    try:
        (tmp_path / "ledger").mkdir()
        signer = load_or_create_signer(tmp_path / "ledger", "fleet-ledger.test/secrets")
        key = load_or_create_key(tmp_path)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "ledger" / KEY_FILE) == 0o600
    assert _mode(tmp_path / HOST_KEY_FILE) == 0o600
    assert load_or_create_signer(tmp_path / "ledger", "ignored").text() == signer.text()
    assert bytes(load_or_create_key(tmp_path)) == bytes(key)
    assert _mode(tmp_path / "ledger" / KEY_FILE) == 0o600


def _secrets(ledger_data: Path, host_dir: Path, creds: Path, extra: list[str]) -> list[str]:
    """Every secret the deployment holds, in each form it could leak in."""
    out = list(extra)
    signer_text = (ledger_data / KEY_FILE).read_text().strip()
    out += [signer_text, signer_text.rsplit("+", 1)[1]]  # the whole key and its base64 seed
    out.append((host_dir / HOST_KEY_FILE).read_text().strip())
    out += [p.read_text().strip() for p in creds.glob("*.nk")]
    return [s for s in out if s]


def test_no_secret_in_logs_errors_or_status(tmp_path: Path) -> None:
    """Under nkey auth, a ledger, a host and the CLI run, fail and report: their logs,
    errors and status JSON (online and offline) hold no key material."""
    root = tmp_path / "nats"
    conf = write_config(root, ["h1"], host_address="127.0.0.1", port=-1,
                        store_dir=str(root / "js")).configs[0]
    creds = root / "creds"
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(new_seed() + b"\n")
    stranger.chmod(0o600)
    data, host_dir = tmp_path / "ledger", tmp_path / "h1"
    texts: dict[str, str] = {}
    with running(conf) as (server, _proc):
        url = server.url
        with LedgerProc(url, data, "--nkey", str(creds / "ledger.nk")) as ledger:
            ledger.start()
            sim = fleet("host", "simulate", "--name", "h1", "--runs", "3", "--nats", url,
                        "--data", str(host_dir), "--nkey", str(creds / "h1.nk"),
                        "--enroll-into", str(data), "--json")
            texts["simulate"] = sim.stdout + sim.stderr
            wait_until(lambda: store_summary(data).size >= json.loads(sim.stdout)[
                "segments_written"], 30, "the fold")
            reader = ["--nats", url, "--nkey", str(creds / "reader.nk")]
            status = fleet("status", "--json", *reader)
            texts["status"] = status.stdout + status.stderr
            assert json.loads(status.stdout)["tree_size"] > 0
            rej = fleet("rejections", "--json", *reader)
            texts["rejections"] = rej.stdout + rej.stderr
            # Failures: no credentials, a stranger's seed, a host seed where the ledger's
            # belongs, a ledger that cannot reach NATS.
            for name, args in {
                "status-unauthenticated": ["status", "--json", "--nats", url],
                "status-stranger": ["status", "--json", "--nats", url, "--nkey",
                                    str(stranger)],
                "serve-as-host": ["ledger", "serve", "--nats", url, "--data",
                                  str(tmp_path / "other"), "--nkey", str(creds / "h1.nk")],
            }.items():
                t = time.monotonic()
                failed = fleet(*args, check=False, timeout=60)
                print(name, time.monotonic() - t)
                assert failed.returncode != 0, name
                texts[name] = failed.stdout + failed.stderr
            # A host with a seed the server does not know: refused within its first-connect
            # window (or, if it keeps retrying, what it printed by then is searched).
            cmd = [*FLEET, "host", "simulate", "--name", "h1", "--runs", "1", "--nats", url,
                   "--data", str(host_dir), "--nkey", str(stranger)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                                      env={**os.environ, "FLEET_NATS_WAIT": "2"})
                texts["simulate-stranger"] = done.stdout + done.stderr
                assert done.returncode != 0
            except subprocess.TimeoutExpired as waited:
                texts["simulate-stranger"] = str(waited.stdout or "") + str(waited.stderr or "")
            assert ledger.stop() == 0
        texts["ledger-log"] = ledger.log_text()
        texts["nats-server-log"] = conf.with_suffix(".log").read_text(errors="replace")
    offline = fleet("status", "--json", "--data", str(data))
    texts["status-offline"] = offline.stdout + offline.stderr
    (data / KEY_FILE).write_text((data / KEY_FILE).read_text().strip()[:-3] + "!!!\n")
    broken = fleet("status", "--json", "--data", str(data), check=False)
    assert broken.returncode != 0
    texts["status-broken-key"] = broken.stdout + broken.stderr
    secrets = _secrets(data, host_dir, creds, [stranger.read_text().strip()])
    assert len(secrets) >= 8
    for name, text in texts.items():
        assert text, f"{name} printed nothing to search"
        for secret in secrets:
            assert secret not in text, f"{name} shows a secret ({secret[:6]}...)"
        assert not SEED_SHAPE.search(text), name
        assert "PRIVATE+KEY" not in text, name
    assert "authorization" in (texts["status-unauthenticated"]
                               + texts["status-stranger"]).lower()
