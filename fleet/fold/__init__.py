"""The ledger's fold, pure: what a ledger decides for each message of a batch, as values.

- :mod:`fleet.fold.reference`: one segment decided by the spec's order of checks (every
  refusal named); the decision values (:class:`Accepted`, :class:`Refused`) and the
  batch's run overlay (:class:`BatchRuns`).
- :mod:`fleet.fold.fast`: the same decision from the wire form for the common message, the
  reference path for the rest (:func:`fold_message`).
- :mod:`fleet.fold.event_overlay`: the batch's overlay, one idea for its runs, control
  events and grant events (a decision taken changes the batch's view, never the committed).
- :mod:`fleet.fold.route`: which fold a message goes to, by its subject (a table).
- :mod:`fleet.fold.batch`: one batch decided: seal verdicts merged, the heads and runs the
  batch has folded so far overlaid on the committed ones, control and grant events in
  stream order, each message routed and decided (:func:`fleet.fold.batch.decide_batch`).
- :mod:`fleet.fold.cache`: the committed runs a ledger keeps in memory (least recently used).
- :mod:`fleet.fold.policy`: when a checkpoint is due.

Nothing here does I/O: the ledger's shell (:mod:`ledger.service`) pulls messages, hands the
store's reads in as functions, commits what the core decided and acks. The names importers
used from the former modules ``fleet.fold`` and ``fleet.fold_fast`` are re-exported here;
:mod:`fleet.fold.batch` is not (it imports :mod:`fleet.fold.control`, which imports this package).
"""

from fleet_ledger.fleet.fold.fast import (
    batch_addresses,
    decide_message,
    fast_decide,
    fold_message,
    wire_seal_item,
)
from fleet_ledger.fleet.fold.reference import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    RunSlot,
    admit,
    decide,
    decide_envelope,
    decode,
    grant_gate,
    position,
    seal_valid,
    subject_host,
)

__all__ = [
    "Accepted",
    "Admission",
    "BatchRuns",
    "HostEntry",
    "Message",
    "Refused",
    "RunSlot",
    "admit",
    "batch_addresses",
    "decide",
    "decide_envelope",
    "decide_message",
    "decode",
    "fast_decide",
    "fold_message",
    "grant_gate",
    "position",
    "seal_valid",
    "subject_host",
    "wire_seal_item",
]
