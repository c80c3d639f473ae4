"""A step's effect class, retry policy and timeout (docs/runtime.md, "Effects and retries").

A step declares what running it twice does: ``pure`` (nothing outside), ``idempotent``
(the outside world dedupes it by itself) or ``effectful`` (it acts outside: pays, sends,
writes). Each attempt that fails is journaled (an ``attempt`` entry: which one, its
outcome, the backoff before the next), so a maximum holds across processes too.

An attempt's outcome is one of:

* ``error``: the step raised (the callee answered with a failure); retried by the policy;
* ``invalid``: the step raised :class:`Invalid` (a validation error: a definite answer
  that the same call will get again); never retried;
* ``timeout``: the step ran past its timeout, ``lost``: the process died inside it. Both
  are *unknown*: the effect may or may not have happened. They are retried (at least once
  delivery) unless the policy says ``on_unknown="raise"``; an effectful step without an
  idempotency key run again after one is a *possible duplicate effect*, flagged on its
  resolve (``"duplicate": true``) and so on the record's call account.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger("fleet.runtime")

UNKNOWN = frozenset({"timeout", "lost"})


class StepFailed(Exception):
    """A step's function raised; the error is journaled, so replay raises it again."""


class StepTimeout(StepFailed, TimeoutError):
    """A step ran past its ``timeout`` on its last allowed attempt (its outcome is unknown:
    the effect may have happened)."""


class OutcomeUnknown(StepFailed):
    """A step's attempt ended with an unknown outcome (its process died inside it, or it
    timed out) and its policy says not to run it again (``on_unknown="raise"``): settle it
    from the outside (seed 003: reconciliation, not an automatic retry)."""


class Invalid(Exception):
    """Raised by a step's function for a validation error: a definite failure, journaled
    as outcome ``invalid`` and never retried (distinct from an unknown outcome)."""


@dataclass(frozen=True)
class Policy:
    """Retries of one step: at most ``max_attempts`` attempts in all (lost ones included),
    waiting ``backoff_s * factor**(k-1)`` (at most ``max_backoff_s``) before attempt k+1;
    after an unknown outcome ``on_unknown`` says whether to run it again or fail by name
    (:class:`OutcomeUnknown`)."""

    max_attempts: int = 3
    backoff_s: float = 0.1
    factor: float = 2.0
    max_backoff_s: float = 10.0
    on_unknown: Literal["retry", "raise"] = "retry"

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_s < 0 or self.factor < 1 \
                or self.max_backoff_s < 0 or self.on_unknown not in ("retry", "raise"):
            raise ValueError(f"not a retry policy: {self}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1, 2, ...)."""
        return min(self.max_backoff_s, self.backoff_s * self.factor ** (attempt - 1))

    def json(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff_s": self.backoff_s,
                "factor": self.factor, "max_backoff_s": self.max_backoff_s,
                "on_unknown": self.on_unknown}


# No policy: an error fails the step at once; a lost attempt is run again, without limit
# (the runtime's behaviour before policies: at least once).
NO_RETRY = Policy(max_attempts=1)


def check_effect(effect: str | None, name: str, keyed: bool) -> None:
    """ValueError for an unknown class; the loud warning for an effectful step that takes
    no idempotency key (it is also marked on the record's call account)."""
    if effect is not None and effect not in ("pure", "idempotent", "effectful"):
        raise ValueError(f"step {name}: effect is pure, idempotent or effectful, not"
                         f" {effect!r}")
    if effect == "effectful" and not keyed:
        log.warning("step %s is effectful and takes no idempotency_key: a retry after an"
                    " unknown outcome may repeat its effect (at least once)", name)


def failure(error: str, outcome: str | None) -> StepFailed:
    """The exception a workflow sees for a journaled failed step."""
    if outcome == "timeout":
        return StepTimeout(error)
    if outcome == "lost":
        return OutcomeUnknown(error)
    return StepFailed(error)


__all__ = ["NO_RETRY", "UNKNOWN", "Invalid", "OutcomeUnknown", "Policy", "StepFailed",
           "StepTimeout", "check_effect", "failure"]
