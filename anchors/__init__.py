"""Anchors for the ledger's checkpoint roots: the interface, its witness, RFC 3161 and NATS
implementations, the anchoring task and its receipt store, and a C2SP witness server. It
may import the core (``fleet``), ``plumbing`` and itself; it reads the ledger's checkpoints
only through :mod:`plumbing.anchoring`, never by importing ``ledger``, ``agents`` or the
CLI."""
