"""The ledger service: the stream consumer and fold loop, the SQLite store and Merkle tree
store, checkpoint signing, the request/reply API and its client, NATS server configuration.
It may import the core (``fleet``), ``plumbing`` and itself; it meets the anchors only
through :mod:`plumbing.anchoring`, never by importing ``agents``, ``anchors`` or the CLI."""
