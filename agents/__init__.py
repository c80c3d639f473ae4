"""The host side: the run API a host program records its runs with, energy meters, the
durable outbox, the JetStream publisher and a traffic simulator. It may import the core
(``fleet``), ``plumbing`` and itself, never the ledger, the anchors or the CLI."""
