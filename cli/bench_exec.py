"""``fleet bench exec``: exec latency of an allowed binary with and without the exec guard.

One run measures, in interleaved rounds on a private tmpfs (root only):

* **baseline**: no guard at all;
* **cached**: the binary run as the unit under a denylist guard, its hash cached;
* **cold**: the same bytes in fresh inodes, so every exec is hashed;
* **outside**: a process outside the unit execing the binary on the guarded filesystem (the
  unit's mounts are its own namespace's, so this should cost nothing);
* **outsider opens**: a process outside the unit opening files (the binary's tmpfs and
  system files) in a loop for ``--open-seconds``, with no guard and with a guard running a
  unit, in turn each round: p50 and p99 of one ``open``.

A small Python driver times ``posix_spawn`` + ``waitpid`` of each exec (its own start-up is
not timed). Medians and p90s in microseconds, and the ratios to the baseline of the same run.
By default the guard marks every mount of the unit's namespace, as ``fleet exec run`` does
(``--marks tmpfs``: only the binary's tmpfs, as before).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from blake3 import blake3

from fleet_ledger.cli._app import UserError, bench
from fleet_ledger.cli._common import emit_result

DRIVER = r"""
import json, os, sys, time
out = []
for path in json.loads(sys.argv[1]):
    start = time.perf_counter_ns()
    pid = os.posix_spawn(path, [path], {})
    _, status = os.waitpid(pid, 0)
    took = time.perf_counter_ns() - start
    if status != 0:
        sys.exit(f"{path} exited with status {status}")
    out.append(took)
print(json.dumps(out))
"""

READER = r"""
import glob, json, os, sys, time
paths = json.loads(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
out, refused = [], 0
while time.monotonic() < end:
    for path in paths:
        start = time.perf_counter_ns()
        try:
            fd = os.open(path, os.O_RDONLY)
        except PermissionError:
            refused += 1
            continue
        out.append(time.perf_counter_ns() - start)
        os.close(fd)
print(json.dumps({"ns": out, "refused": refused}))
"""


def _times(run: Any, paths: list[str]) -> list[float]:
    done = run([sys.executable, "-c", DRIVER, json.dumps(paths)])
    if done.returncode != 0:
        raise click.ClickException(f"bench exec: the driver failed: {done.stderr.strip()}")
    # The last line: the program itself may print before it.
    return [ns / 1000 for ns in json.loads(done.stdout.splitlines()[-1])]


def _plain(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1)}


def _open_summary(values: list[float], refused: int) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 2),
            "p99": round(ordered[int(0.99 * (len(ordered) - 1))], 2),
            "opens": len(ordered), "refused": refused}


def _outsider_opens(paths: list[str], seconds: float) -> tuple[list[float], int]:
    done = _plain([sys.executable, "-c", READER, json.dumps(paths), str(seconds)])
    if done.returncode != 0:
        raise click.ClickException(f"bench exec: the reader failed: {done.stderr.strip()}")
    got = json.loads(done.stdout)
    return [ns / 1000 for ns in got["ns"]], got["refused"]


def _hash_rate() -> float:
    data = os.urandom(64 << 20)
    start = time.perf_counter()
    blake3(data).digest()
    return round(64 / (time.perf_counter() - start), 1)


def measure(execs: int, rounds: int, binary: Path, *, marks: str = "all",
            open_seconds: float = 2.0) -> dict[str, Any]:
    from fleet_ledger.agents.exec_guard import ExecGuard
    from fleet_ledger.agents.scratch_fs import tmpfs
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.env.exec_policy import build_policy

    policy = build_policy("allow", [(digest(b"some other program"), "deny", "other")])
    samples: dict[str, list[float]] = {"baseline": [], "cached": [], "cold": [], "outside": [],
                                       "open_none": [], "open_guarded": []}
    refused = {"open_none": 0, "open_guarded": 0}
    system = sorted(glob.glob(f"{os.path.dirname(os.__file__)}/*.py"))[:200]
    with tempfile.TemporaryDirectory(prefix="fleet-bench-exec-") as tmp, \
            tmpfs(Path(tmp) / "fs", size_mib=256) as fs:
        prog = fs / "prog"
        shutil.copyfile(binary, prog)
        prog.chmod(0o755)
        for r in range(rounds):
            # Fresh inodes for this round's cold execs (same bytes: a miss every time).
            cold = []
            for i in range(execs):
                c = fs / f"cold-{r}-{i}"
                shutil.copyfile(binary, c)
                c.chmod(0o755)
                cold.append(str(c))
            samples["baseline"] += _times(_plain, [str(prog)] * execs)
            readable = [str(prog), *system]
            got, n = _outsider_opens(readable, open_seconds)
            samples["open_none"] += got
            refused["open_none"] += n
            with ExecGuard(policy, marks=[str(fs)] if marks == "tmpfs" else None) as guard:

                def unit(argv: list[str], guard: ExecGuard = guard
                         ) -> subprocess.CompletedProcess[str]:
                    proc = guard.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
                    out, err = proc.communicate(timeout=300)
                    return subprocess.CompletedProcess(argv, proc.returncode, out, err)

                samples["cached"] += _times(unit, [str(prog)] * (execs + 1))[1:]
                samples["cold"] += _times(unit, cold)
                samples["outside"] += _times(_plain, [str(prog)] * execs)
                unit_proc = guard.spawn(["sleep", "600"])
                got, n = _outsider_opens(readable, open_seconds)
                samples["open_guarded"] += got
                refused["open_guarded"] += n
                unit_proc.kill()
            for copy in cold:
                os.unlink(copy)
    opens = {k: _open_summary(samples.pop(k), refused[k]) for k in refused}
    s = {k: _summary(v) for k, v in samples.items()}
    base = s["baseline"]["p50"]
    return {
        "binary": str(binary),
        "binary_bytes": binary.stat().st_size,
        "execs_per_round": execs,
        "rounds": rounds,
        "baseline_exec_us": s["baseline"],
        "guarded_cached_exec_us": s["cached"],
        "guarded_cold_exec_us": s["cold"],
        "outside_unit_exec_us": s["outside"],
        "cached_overhead_us": round(s["cached"]["p50"] - base, 1),
        "cold_overhead_us": round(s["cold"]["p50"] - base, 1),
        "cached_over_baseline_ratio": round(s["cached"]["p50"] / base, 3),
        "cold_over_baseline_ratio": round(s["cold"]["p50"] / base, 3),
        "outside_over_baseline_ratio": round(s["outside"]["p50"] / base, 3),
        "outsider_open_us": {"no_guard": opens["open_none"],
                             "guarded": opens["open_guarded"]},
        "outsider_open_p50_ratio": round(opens["open_guarded"]["p50"]
                                         / opens["open_none"]["p50"], 3),
        "outsider_open_p99_ratio": round(opens["open_guarded"]["p99"]
                                         / opens["open_none"]["p99"], 3),
        "marks": marks,
        "blake3_mib_per_s": _hash_rate(),
        "statistic": "wall-clock posix_spawn+waitpid per exec in microseconds, p50 and p90 "
                     "over all rounds; each round runs baseline, outsider opens without a "
                     "guard, cached, cold, outside and outsider opens with a guard in turn; "
                     "the guard marks every mount of the unit's namespace ('all') or only "
                     "the binary's private tmpfs ('tmpfs'); outsider opens: one os.open of "
                     "the binary and 200 system files in a loop, p50 and p99 in "
                     "microseconds",
    }


@bench.command("exec")
@click.option("--execs", default=200, show_default=True, type=click.IntRange(10),
              help="Execs per phase and round.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@click.option("--binary", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=lambda: shutil.which("true") or "/bin/true",
              help="The allowed program to exec (copied to the guarded tmpfs).")
@click.option("--marks", type=click.Choice(["all", "tmpfs"]), default="all", show_default=True,
              help="What the guard marks: every mount of the unit's namespace, or only the "
                   "binary's tmpfs.")
@click.option("--open-seconds", default=2.0, show_default=True, type=click.FloatRange(0.2),
              help="How long the outsider opens files, per phase and round.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_exec(execs: int, rounds: int, binary: Path, marks: str, open_seconds: float,
               as_json: bool) -> None:
    """Exec latency of an allowed binary: no guard, guarded (cached and cold), and a process
    outside the unit on the guarded filesystem. Needs root."""
    if os.geteuid() != 0:
        raise UserError("bench exec needs root (fanotify permission events, a tmpfs mount)")
    result = measure(execs, rounds, Path(os.path.realpath(binary)), marks=marks,
                     open_seconds=open_seconds)
    emit_result(result, as_json)
