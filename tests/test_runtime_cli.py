"""User mistakes at the runtime's commands end with one line and exit 2, before anything
is sent or sealed."""

from __future__ import annotations

from pathlib import Path

from pipeline_helpers import cli


def test_runtime_commands_refuse_mistakes_with_one_line(tmp_path: Path):
    """Bad --data JSON, a malformed run address, a worker with no ledger key, a journal of
    an unknown run, a malformed blob address, an unknown workflow module: exit 2, no
    traceback."""
    cases = [
        ("signal", "b3:" + "A" * 43, "approve", "--data", "{bad"),
        ("signal", "b3:nope", "approve", "--nats", "nats://127.0.0.1:1"),
        ("runtime", "worker", "--data", str(tmp_path / "w")),
        ("runtime", "journal", "b3:" + "A" * 43, "--data", str(tmp_path / "j")),
        ("runtime", "shred", "not-an-address", "--data", str(tmp_path / "s")),
        ("runtime", "start", "no_such_module:wf", "x", "--data", str(tmp_path / "s")),
    ]
    for args in cases:
        out = cli(*args, check=False)
        assert out.returncode == 2, (args, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, (
            args, out.stderr)
