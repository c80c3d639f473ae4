"""A durable agent runtime whose journal is the run record (docs/runtime.md).

    from fleet_ledger.agents.runtime import Context, Runtime

    async def triage(ctx: Context, ticket: dict) -> dict:
        label = await ctx.step("classify", classify, ticket["text"])
        approved = await ctx.signal("approve", timeout=3 * 86400)
        await ctx.sleep(3600)
        return {"label": label, "approved": approved}
"""

from fleet_ledger.agents.runtime.context import Context
from fleet_ledger.agents.runtime.effects import (
    Invalid,
    OutcomeUnknown,
    Policy,
    StepFailed,
    StepTimeout,
)
from fleet_ledger.agents.runtime.journal import Journal
from fleet_ledger.agents.runtime.projection import Projected, Projection, head_tail, tail
from fleet_ledger.agents.runtime.runtime import Outcome, Runtime, run_address, workflow_name
from fleet_ledger.fleet.runtime.runtime_errors import (
    CodeChanged,
    EnvironmentChanged,
    JournalTampered,
    ReplayDiverged,
    RunBusy,
    SignalConflict,
    SignalTimeout,
    ValueShredded,
    WorkflowUnknown,
)

__all__ = ["CodeChanged", "Context", "EnvironmentChanged", "Invalid", "Journal",
           "JournalTampered", "Outcome", "OutcomeUnknown", "Policy", "Projected", "Projection",
           "ReplayDiverged", "RunBusy", "Runtime", "SignalConflict", "SignalTimeout",
           "StepFailed", "StepTimeout", "ValueShredded", "WorkflowUnknown", "head_tail",
           "run_address", "tail", "workflow_name"]
