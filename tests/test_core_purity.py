"""The protocol core imports no I/O: no asyncio, nats, sqlite3, sockets or subprocesses."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

from fleet_ledger import fleet

FORBIDDEN = ["asyncio", "nats", "sqlite3", "socket", "subprocess", "http", "urllib.request"]


def core_modules() -> list[str]:
    """Every module of the core, those of its subpackages (``fleet.fold``) included."""
    return sorted(
        m.name for m in pkgutil.walk_packages(fleet.__path__, "fleet_ledger.fleet.")
    )


def test_core_modules_import_no_io():
    """Importing every fleet core module in a fresh interpreter loads none of the I/O modules."""
    modules = core_modules()
    assert {"fleet_ledger.fleet.record.record", "fleet_ledger.fleet.record.verify",
            "fleet_ledger.fleet.fold", "fleet_ledger.fleet.fold.reference",
            "fleet_ledger.fleet.fold.fast"} <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps([f for f in {FORBIDDEN!r} if f in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_core_modules_say_what_is_public():
    """Every core module lists its public names in ``__all__``, and each listed name exists."""
    import importlib

    missing = []
    for name in core_modules():
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None)
        if public is None:
            missing.append(name)
            continue
        assert all(hasattr(module, n) for n in public), name
    assert missing == []
