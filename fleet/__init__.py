"""Fleet ledger's pure protocol core: run records (their one rules kernel,
:mod:`fleet.record.kernel`,
and its object and wire decoders), call accounts and wait proofs, the fold's decisions, the
RFC 9162 Merkle log, C2SP checkpoints, notes and cosignatures, proof bundles, keys and
codecs. No module here does I/O (no NATS, SQLite, asyncio, sockets or subprocesses); the
shells (``agents``, ``ledger``, ``anchors``) and the CLI build on it; it imports
nothing of the project but itself (tests/test_core_purity.py, tests/test_layering.py).
"""
