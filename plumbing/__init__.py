"""Shared plumbing: durable file writes, SQLite connections and transactions, connecting to
NATS and running nats-server (with pytest fixtures around it), and the protocols the ledger
and the anchors meet through (:mod:`plumbing.anchoring`). It may import the pure core
(``fleet``) and itself, never a shell (``agents``, ``ledger``, ``anchors``) or the CLI."""
