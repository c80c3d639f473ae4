"""Grant events in the stream (issue, trigger, mint, amend, checkpoint), the book of grants
they build, and the rule a run's segments meet under its grant.

Every event has one envelope (``docs/spec/grants.md``)::

    event = "fleet.gev/1" || kind:u8 || signer[32] || body || signature[64]

    ISSUE      0x01  body = len:u32 || grant                      signer: the issuer
    TRIGGER    0x02  body = text(name)                            signer: the trigger key
    MINT       0x03  body = standing[32] || text(trigger) || len:u32 || child grant
                                                                   signer: the holder
    AMEND      0x04  body = grant[32] || seq:u64 || previous[32] || terms
                                                                   signer: the issuer
    CHECKPOINT 0x05  body = run[32] || index:u64 || head[32] || state[32] || text(note)
                                                                   signer: the grant's subject

signed by ``signer`` (Ed25519) over everything before the signature. An amendment's
address (``previous`` of the next) is BLAKE3 of its event bytes.

:func:`check_event` decides one event against a :class:`GrantView` at a stream position
and ledger time (the stream's timestamp) and returns a :class:`GrantAccepted` or raises
the named refusal, changing nothing (:func:`decide_event`: the refusal as a value);
:func:`apply` makes an accepted event's change. The book is thus a pure function of the
stream, and replicas folding it agree.
:func:`check_segment` is the rule every segment of a run under a grant meets.

The parts live in small modules, re-exported here: the codec (:mod:`fleet.grants.grant_codec`),
the book (:mod:`fleet.grants.grant_book`), the decisions (:mod:`fleet.fold.grant_decide`), the
segment
gate (:mod:`fleet.grants.grant_gate`) and the JSON view (:mod:`fleet.grants.grant_json`).
"""

from fleet_ledger.fleet.fold.grant_decide import (
    GrantAccepted,
    RunAt,
    apply,
    check_child_of,
    check_event,
    check_issuable,
    decide_event,
    event_ref,
)
from fleet_ledger.fleet.grants.grant_book import (
    GrantBook,
    GrantEntry,
    GrantView,
    chain_of,
    effective_terms,
)
from fleet_ledger.fleet.grants.grant_codec import (
    AMEND,
    CHECKPOINT,
    EVENT_DOMAIN,
    ISSUE,
    KINDS,
    MAX_NAME,
    MINT,
    NO_AMENDMENT,
    TRIGGER,
    Amend,
    Body,
    Checkpoint,
    GrantEvent,
    Issue,
    Mint,
    Trigger,
    amend_event,
    checkpoint_event,
    decode_event,
    event_id,
    issue_event,
    mint_event,
    signature_items,
    trigger_event,
)
from fleet_ledger.fleet.grants.grant_gate import check_segment, check_step, check_window
from fleet_ledger.fleet.grants.grant_json import event_json

__all__ = [
    "AMEND", "CHECKPOINT", "EVENT_DOMAIN", "ISSUE", "KINDS", "MAX_NAME", "MINT",
    "NO_AMENDMENT", "TRIGGER", "Amend", "Body", "Checkpoint", "GrantAccepted", "GrantBook",
    "GrantEntry", "GrantEvent", "GrantView", "Issue", "Mint", "RunAt", "Trigger",
    "amend_event", "apply", "chain_of", "check_child_of", "check_event", "check_issuable",
    "check_segment", "check_step", "check_window", "checkpoint_event", "decide_event",
    "decode_event", "effective_terms", "event_id", "event_json", "event_ref", "issue_event",
    "mint_event", "signature_items", "trigger_event",
]
