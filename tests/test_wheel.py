"""The wheel is the product: what ``python -m build`` makes is the same bytes twice, and the
wheel and the sdist, installed into fresh venvs outside the checkout, run ``fleet demo`` and
``fleet demo --runtime`` from an empty folder (the examples travel inside the package), and
everything installs under one name, ``fleet_ledger``, beside other distributions' ``agents``,
``ledger`` or ``fleet``.

The build and install tests are ``slow`` (about two minutes in all: two isolated builds,
two venvs with the dependencies installed from the package index, four demos).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pipeline_helpers import cli

ROOT = Path(__file__).resolve().parent.parent
# The last commit's time when there is one (what a release build uses), else a fixed date.
EPOCH = "1764547200"
# What a copy of the checkout leaves behind: local state, never part of a build.
LOCAL = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache",
                               ".hypothesis", "build", "dist", "*.egg-info", "*.sqlite*")


def _epoch() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                             capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return EPOCH
    return out.stdout.strip() or EPOCH


def _build(source: Path, out: Path) -> dict[str, bytes]:
    """``python -m build`` (sdist, then the wheel from it) of ``source``: {name: bytes}."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": _epoch()}
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=300, env=env,
                            stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no FLEET_* settings of this run."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLEET_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, **extra}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and wheel built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    _build(ROOT, out)
    return out


def _install(target: Path, tmp: Path) -> Path:
    """A fresh venv (nothing of this checkout on its path) with ``target`` installed: its
    ``fleet`` program."""
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check", str(target)]
    result = subprocess.run(pip, capture_output=True, text=True, timeout=600, cwd=tmp,
                            env=_clean_env(), stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return env_dir / "bin" / "fleet"


def _demos_from_elsewhere(fleet: Path, tmp: Path) -> None:
    """Both demos, run by the installed program from an empty folder, pass; the code they
    ran is the installed copy, not this checkout."""
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(fleet), *args], capture_output=True, text=True,
                                timeout=300, cwd=elsewhere, env=_clean_env(),
                                stdin=subprocess.DEVNULL, check=False)
        assert result.returncode == 0, f"fleet {' '.join(args)}: {result.stderr[-3000:]}"
        return result

    where = Path(json.loads(run("examples", "--json").stdout)["folder"])
    assert where.is_relative_to(fleet.parent.parent) and where.name == "_examples"
    demo = json.loads(run("demo", "--hosts", "2", "--runs", "2", "--json").stdout)
    assert demo["tree_size"] > 0 and demo["environment_refusal"]["rule"] == "EnvironmentMismatch"
    runtime = json.loads(run("demo", "--runtime", "--json").stdout)
    assert [h["host"] for h in runtime["holders"]] == ["A", "B", "C"]
    assert runtime["result"]["approved_by"] == "ana"
    assert list(elsewhere.iterdir()) == []  # the demos kept their data in temp folders


def test_version_is_the_installed_distribution_version():
    """``fleet --version`` prints the version in the installed package's metadata."""
    out = cli("--version").stdout
    assert out == f"fleet, version {importlib.metadata.version('fleet-ledger')}\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_build_is_the_same_bytes_twice(dist: Path, tmp_path: Path):
    """A second build, from a copy of the checkout whose files all have new times, gives the
    same sdist and wheel bytes; and the wheel carries the examples and the license."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT, copy, ignore=LOCAL, symlinks=True)
    again = _build(copy, tmp_path / "again")
    first = {p.name: p.read_bytes() for p in sorted(dist.iterdir())}
    assert sorted(first) == sorted(again) and len(first) == 2
    assert first == again
    import zipfile

    (wheel,) = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"fleet_ledger/cli/_examples/triage.py",
            "fleet_ledger/cli/_examples/devcontainers/python/devcontainer.json"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # One name at the top of site-packages: the namespace (and the metadata).
    assert {n.split("/")[0] for n in names} == {"fleet_ledger", "fleet_ledger-0.1.0.dist-info"}
    # Every package of the checkout is in it (a new one must be added to only-include and
    # to the wheel's sources), under the namespace.
    packages = {d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()}
    assert {n.split("/")[1] for n in names if n.count("/") == 2
            and n.startswith("fleet_ledger/") and n.endswith("/__init__.py")} == packages


FOREIGN = ("agents", "ledger", "fleet", "plumbing", "anchors", "cli")


def _foreign_wheel(out: Path) -> Path:
    """A wheel of another distribution owning the generic top-level names this project's
    folders have (an agents SDK's ``agents``, a ``ledger`` ...)."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}/__init__.py": f"OWNER = 'other-dist'\nNAME = {name!r}\n"
             for name in FOREIGN}
    info = "other_dist-1.0.dist-info"
    files[f"{info}/METADATA"] = "Metadata-Version: 2.1\nName: other-dist\nVersion: 1.0\n"
    files[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n")
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = out / "other_dist-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _beside_foreign_top_level_packages(env_dir: Path, tmp: Path) -> None:
    """Installing another distribution that owns ``agents``, ``ledger``, ``fleet`` ... next
    to the installed wheel leaves both importable: neither overwrote a file of the other."""
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           str(_foreign_wheel(tmp))]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=300, cwd=tmp,
                          env=_clean_env(), stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = ("import importlib, json\n"
             f"theirs = {{n: importlib.import_module(n).OWNER for n in {FOREIGN!r}}}\n"
             "from fleet_ledger.agents.host import Host\n"
             "from fleet_ledger.ledger.service import Ledger\n"
             "from fleet_ledger.fleet.record.kernel import apply\n"
             "print(json.dumps(theirs))\n")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=tmp, env=_clean_env(), stdin=subprocess.DEVNULL, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == dict.fromkeys(FOREIGN, "other-dist")
    version = subprocess.run([str(env_dir / "bin" / "fleet"), "--version"], capture_output=True,
                             text=True, timeout=120, cwd=tmp, env=_clean_env(), check=False)
    assert version.returncode == 0 and version.stdout.startswith("fleet, version "), version


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_wheel_installed_elsewhere_runs_both_demos(dist: Path, tmp_path: Path):
    """The wheel in a fresh venv outside the checkout: ``fleet demo`` and ``fleet demo
    --runtime`` pass from an empty folder, with no FLEET_DEVCONTAINERS; another
    distribution owning top-level ``agents``, ``ledger``, ``fleet`` ... installs beside it and
    both stay importable; with the packaged
    examples then removed, each exits 2 naming the missing folder (not an unreachable NATS,
    as before the wheel carried them)."""
    (wheel,) = dist.glob("*.whl")
    fleet = _install(wheel, tmp_path)
    _demos_from_elsewhere(fleet, tmp_path)
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    _beside_foreign_top_level_packages(tmp_path / "venv", tmp_path)
    shutil.rmtree(site / "fleet_ledger" / "cli" / "_examples")
    for args in (["demo"], ["demo", "--runtime"]):
        gone = subprocess.run([str(fleet), *args], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env=_clean_env(),
                              stdin=subprocess.DEVNULL, check=False)
        assert gone.returncode == 2, gone.stderr
        assert gone.stderr.startswith("Error: the examples are not installed with this fleet")
        assert str(site / "fleet_ledger" / "cli" / "_examples") in gone.stderr
        assert "NATS" not in gone.stderr and "Traceback" not in gone.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_sdist_installed_elsewhere_runs_both_demos(dist: Path, tmp_path: Path):
    """The sdist, built into a wheel by pip and installed into a fresh venv: both demos pass
    from an empty folder (the sdist holds everything the wheel needs)."""
    (sdist,) = dist.glob("*.tar.gz")
    _demos_from_elsewhere(_install(sdist, tmp_path), tmp_path)


def test_examples_are_listed_and_copied_never_over_a_file(tmp_path: Path):
    """``fleet examples`` names the examples' folder (a checkout's examples/) and its files;
    ``--copy-to`` copies them byte for byte, and refuses (exit 2) to overwrite a file."""
    shown = json.loads(cli("examples", "--json").stdout)
    assert shown["folder"] == str(ROOT / "examples")
    assert {"triage.py", "devcontainers/python/devcontainer.json"} <= set(shown["files"])
    copied = json.loads(cli("examples", "--copy-to", str(tmp_path / "mine"), "--json").stdout)
    assert copied == {"folder": str(tmp_path / "mine"), "files": shown["files"]}
    for name in shown["files"]:
        assert (tmp_path / "mine" / name).read_bytes() == (ROOT / "examples" / name).read_bytes()
    (tmp_path / "mine" / "triage.py").write_text("# my edits\n")
    again = cli("examples", "--copy-to", str(tmp_path / "mine"), check=False)
    assert again.returncode == 2 and "exists (not overwritten)" in again.stderr
    assert (tmp_path / "mine" / "triage.py").read_text() == "# my edits\n"


def test_a_folder_without_sample_environments_is_named(tmp_path: Path):
    """``fleet demo`` with FLEET_DEVCONTAINERS naming a folder of no declarations exits 2
    with that folder in one line, before any nats-server starts."""
    empty = cli("demo", check=False, timeout=60, env={"FLEET_DEVCONTAINERS": str(tmp_path)})
    assert (empty.returncode, empty.stderr) == (
        2, "Error: the sample environments are missing: 0 */devcontainer.json found, 2 "
           f"needed (FLEET_DEVCONTAINERS names {tmp_path})\n")
