"""Where the examples a command runs are: the sample environments (devcontainer
declarations) simulated hosts park and resume in, and the example agents.

The repository's ``examples/`` is the one copy (what a user reads and copies). The wheel
carries it inside the package as ``cli/_examples`` (pyproject.toml maps it there), so an
installed ``fleet`` finds it wherever it runs; a checkout (or an editable install) finds
``examples/`` itself. ``FLEET_DEVCONTAINERS`` still names another folder of environments.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleet_ledger.cli._app import UserError

_HERE = Path(__file__).resolve().parent
# In the order looked for: the wheel's copy, then the checkout's folder.
PLACES = (_HERE / "_examples", _HERE.parent / "examples")
# The variable agents.simulate reads for the sample environments (its only knob).
ENV = "FLEET_DEVCONTAINERS"


def examples_folder() -> Path:
    """The examples that came with this ``fleet``; a named error when none did."""
    for place in PLACES:
        if place.is_dir():
            return place
    raise UserError("the examples are not installed with this fleet: neither "
                    f"{PLACES[0]} nor {PLACES[1]} exists (reinstall fleet-ledger)")


def example_file(name: str) -> Path:
    """One example file (an agent such as ``triage.py``), or a named error."""
    path = examples_folder() / name
    if not path.is_file():
        raise UserError(f"the example {name} is not installed: no {path} "
                        "(reinstall fleet-ledger)")
    return path


def use_samples(needed: int = 1) -> Path:
    """The folder of sample environments this process and the simulators it starts use:
    ``$FLEET_DEVCONTAINERS``, else the installed examples (then set in the environment, so
    the simulated hosts, child processes that read it, agree). A folder with fewer than
    ``needed`` declarations is a named error about that folder, before anything starts."""
    named = os.environ.get(ENV)
    folder = Path(named) if named else examples_folder() / "devcontainers"
    found = len(list(folder.glob("*/devcontainer.json")))
    if found < needed:
        where = f"{ENV} names {folder}" if named else f"the installed samples are {folder}"
        raise UserError(f"the sample environments are missing: {found} */devcontainer.json "
                        f"found, {needed} needed ({where})")
    os.environ[ENV] = str(folder)
    return folder
