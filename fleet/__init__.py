"""Fleet ledger: the pure protocol core (no I/O) and the fleet CLI."""
