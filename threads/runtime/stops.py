"""Stop rules (spec DIGEST §5.3): the reasons a flow ends and the pure checks behind them."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from agents.documents import AgentDoc, SideConfig, binding_name
from agents.providers.base import ToolCall
from threads.models import RunStatus
from threads.runtime.tool_calls import ToolOutcome

GLOBAL_STEP_CAP = 250
REPEATED_ERROR_LIMIT = 8


class StopReason(StrEnum):
    """Why a flow ended (spec DIGEST §5.3 codes, plus ``terminated`` and ``idle``)."""

    SESSION_FAIL = "session_fail"
    SESSION_STOP = "session_stop"
    STOP_TOOL = "stop_tool"
    STOP_ON_RESPONSE = "stop_on_response"
    MAX_SIDE_STEPS = "max_side_steps"
    MAX_SESSION_TURNS = "max_session_turns"
    MAX_TOTAL_STEPS = "max_total_steps"
    REPEATED_TOOL_ERROR = "repeated_tool_error"
    ABORTED_BY_USER = "aborted_by_user"
    STEP_ERROR = "step_error"
    STATE_STOP_SESSION = "state_stop_session"
    HOOK_BLOCKED = "hook_blocked"
    FORCED_HUMAN_TURN = "forced_human_turn"
    AWAITING_HUMAN = "awaiting_human"
    TERMINATED = "terminated"
    CANCELLED = "cancelled"  # POST /turns/{id}/cancel
    INTERRUPTED = "interrupted"  # a turn submitted with multitask_strategy=interrupt
    ROLLED_BACK = "rolled_back"  # ... with multitask_strategy=rollback
    IDLE = "idle"  # the flow found nothing to do
    ACTION_REQUIRED = "action_required"  # the turn rests on a person's decision (an action)
    ACTION_EXPIRED = "action_expired"  # nobody decided in time and the rule says deny
    BUDGET_EXCEEDED = "budget_exceeded"  # a budget (policy stop or reject) had no room left
    WAITING_RESOURCE = "waiting_resource"  # the turn waits for a budget or quota to have room


_CANCELLED = frozenset(
    {
        StopReason.ABORTED_BY_USER,
        StopReason.TERMINATED,
        StopReason.CANCELLED,
        StopReason.INTERRUPTED,
        StopReason.ROLLED_BACK,
    }
)
# A limit or a failure ended the work before its agent declared it done.
_FAILED = frozenset(
    {
        StopReason.STEP_ERROR,
        StopReason.HOOK_BLOCKED,
        StopReason.SESSION_FAIL,
        StopReason.MAX_SIDE_STEPS,
        StopReason.MAX_TOTAL_STEPS,
        StopReason.REPEATED_TOOL_ERROR,
        StopReason.BUDGET_EXCEEDED,
    }
)
# The provider error codes of a model call that has no usable credential (the turn is
# blocked until one is set, granted or fixed).
MISSING_CREDENTIAL = frozenset({"provider_no_api_key", "provider_credential_refused"})


def turn_outcome(
    reason: StopReason, *, human_side: bool, error_code: str | None = None
) -> tuple[RunStatus, RunStatus]:
    """The status a turn ends in for ``reason``, and the status its thread then rests in:
    cancelled for stops, cancels and terminates; ``timed_out`` when a person's decision
    expired unanswered; ``blocked`` when a model has no usable API key;
    failed for errors and limits; otherwise completed (the thread ``waiting_input`` when the
    human side is next)."""
    if reason in _CANCELLED:
        return RunStatus.CANCELLED, RunStatus.CANCELLED
    if reason == StopReason.ACTION_EXPIRED:
        return RunStatus.TIMED_OUT, RunStatus.TIMED_OUT
    if reason == StopReason.STEP_ERROR and error_code in MISSING_CREDENTIAL:
        return RunStatus.BLOCKED, RunStatus.BLOCKED
    if reason in _FAILED:
        return RunStatus.FAILED, RunStatus.FAILED
    rest = RunStatus.WAITING_INPUT if human_side else RunStatus.COMPLETED
    return RunStatus.COMPLETED, rest


def global_cap(agent: AgentDoc) -> int:
    """``max(250, sideA.maxSteps, sideB.maxSteps)`` steps per flow."""
    sides = [agent.side_a, agent.side_b]
    return max([GLOBAL_STEP_CAP, *(s.max_steps for s in sides if s and s.max_steps)])


def session_stop_reason(side: SideConfig, outcomes: Sequence[ToolOutcome]) -> StopReason | None:
    """session_fail, then session_stop: the binding tool was called and succeeded."""
    succeeded = {o.call.name for o in outcomes if o.result.status == "success"}
    if (name := binding_name(side.session_fail)) and name in succeeded:
        return StopReason.SESSION_FAIL
    if (name := binding_name(side.session_stop)) and name in succeeded:
        return StopReason.SESSION_STOP
    return None


def turn_end(side: SideConfig, content: str, calls: Sequence[ToolCall]) -> StopReason | None:
    """Why the side's turn ended with this step, or None when it goes on: the stop tool was
    called (``stop_tool``), or (``stop_on_response``) the answer has text and no tool calls;
    a side with neither rule ends a turn with every step (legacy, ``stop_on_response``)."""
    if side.stop_tool and any(call.name == side.stop_tool for call in calls):
        return StopReason.STOP_TOOL
    if side.stop_on_response:
        return StopReason.STOP_ON_RESPONSE if content.strip() and not calls else None
    return StopReason.STOP_ON_RESPONSE if side.stop_tool is None else None


class RepeatedErrors:
    """Counts identical consecutive tool errors (same tool, same error) across steps."""

    def __init__(self) -> None:
        self.signature = ""
        self.count = 0

    def add(self, outcomes: Sequence[ToolOutcome]) -> StopReason | None:
        for outcome in outcomes:
            if outcome.result.status == "success":
                self.signature, self.count = "", 0
                continue
            signature = f"{outcome.call.name}\0{outcome.result.error}"
            self.count = self.count + 1 if signature == self.signature else 1
            self.signature = signature
            if self.count >= REPEATED_ERROR_LIMIT:
                return StopReason.REPEATED_TOOL_ERROR
        return None
