"""``python -m fleet_ledger.cli``: the same as the ``fleet`` command."""

from fleet_ledger.cli import main

main()
