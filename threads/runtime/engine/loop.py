"""The flow's loop: which side acts next, the stop conditions in the spec's order
(DIGEST §5.3) before and after each step, the resumption of a paused step, and what an
abort leaves to close."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agents.documents import SideConfig
from threads.models import Action, ActionKind, ActionStatus
from threads.runtime.engine.agent import side_config, side_is_human
from threads.runtime.engine.base import Side, StepOutcome
from threads.runtime.engine.delegation import handoff_apply
from threads.runtime.engine.drain import inputs_drain
from threads.runtime.engine.step import step_resume, step_run
from threads.runtime.engine.subagents import immediate_run
from threads.runtime.stops import StopReason, global_cap, session_stop_reason, turn_end
from threads.runtime.tool_calls import FlowAborted, failure_text
from threads.services.actions import action_allows
from threads.services.control import interruption_close
from threads.services.recovery import close_unanswered_calls

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def loop_run(flow: Flow) -> StopReason:
    """Run steps until a stop condition holds; returns its reason. Raises FlowAborted when
    an abort fired (checked before each drain)."""
    execution = flow.execution
    acting: Side | None = flow.resume_side
    if flow.resumption is not None:
        resumed = _resumed_step(flow, flow.resumption)
        if isinstance(resumed, StopReason):
            return resumed
        acting = resumed
    while True:
        if flow.aborted:
            raise FlowAborted
        drained_side = inputs_drain(flow)
        if acting is None:
            acting = drained_side
        forced = execution.forced_side
        if forced is not None:
            acting, execution.forced_side = forced, None
        if acting is None:
            return StopReason.IDLE
        if flow.stop_session_result is not None:
            return StopReason.STATE_STOP_SESSION
        if side_is_human(flow, acting):
            return StopReason.FORCED_HUMAN_TURN if forced else StopReason.AWAITING_HUMAN
        if _exchange_cap_reached(flow):
            return StopReason.MAX_SESSION_TURNS
        side = side_config(flow, acting)
        if side.max_steps is not None and _side_steps(flow, acting) >= side.max_steps:
            return StopReason.MAX_SIDE_STEPS
        if execution.step_count >= global_cap(flow.agent):
            return StopReason.MAX_TOTAL_STEPS
        after = _after_step(flow, acting, side, step_run(flow, acting, side))
        if isinstance(after, StopReason):
            execution.stopped_by = acting  # the side whose step ended the flow
            return after
        acting = after


def _resumed_step(flow: Flow, action: Action) -> StopReason | Side:
    """Finish the step ``action`` paused: the turn ends ``timed_out`` when nobody answered
    and the rule denies on expiry (the step's open calls say so); otherwise the step
    carries on (:func:`step_resume`). Returns the stop reason, or the side acting next."""
    if action.status == ActionStatus.EXPIRED and not action_allows(action):
        asked = "approval" if action.kind == ActionKind.APPROVAL else "input request"
        close_unanswered_calls(
            thread=flow.thread, fence=flow.fence, outbox=flow.outbox,
            reason=failure_text(
                f"nobody answered the {asked} of {action.tool_name!r} in time; the request "
                "expired and the call did not run"
            ),
        )  # fmt: skip
        return StopReason.ACTION_EXPIRED
    acting: Side = "b" if action.resume.get("side") == "b" else "a"
    side = side_config(flow, acting)
    return _after_step(flow, acting, side, step_resume(flow, acting, side, action))


def _after_step(flow: Flow, acting: Side, side: SideConfig, step: StepOutcome) -> StopReason | Side:
    """What a finished step leads to: a stop reason, or the side that acts next."""
    reason = _stop_reason(flow, side, step)
    if reason is not None:
        return reason
    if flow.handoff is not None:
        handoff_apply(flow)
        immediate_run(flow)  # the new agent's immediate relationships (DIGEST §5.4)
        return "a"
    ended = turn_end(side, step.content, step.calls)
    if ended is None:
        return acting
    flow.turns[acting] += 1
    flow.publish("side.completed", {"side": acting, "turns": dict(flow.turns)})
    if flow.execution.forced_side is not None:
        return acting  # force_turn decides who acts next (the loop's top applies it)
    other: Side = "b" if acting == "a" else "a"
    if side_is_human(flow, other):
        return ended
    return other


def counters_restore(flow: Flow, saved: Mapping[str, Any]) -> None:
    """The step counters, queued tools and first message of the flow that paused, for the
    one resuming: to the model, the two are one flow (``include_past_tools`` keeps the
    paused step's calls)."""
    execution = flow.execution
    start = saved.get("flow_start_seq")
    flow.flow_start_seq = int(start) if start is not None else None
    execution.step_count = int(saved.get("step", 0))
    execution.side_a_step_count = int(saved.get("side_a_steps", 0))
    execution.side_b_step_count = int(saved.get("side_b_steps", 0))
    flow.turns.update({key: int(value) for key, value in (saved.get("turns") or {}).items()})
    execution.tool_queue = [(str(name), dict(args)) for name, args in saved.get("tool_queue", [])]


def _stop_reason(flow: Flow, side: SideConfig, step: StepOutcome) -> StopReason | None:
    """Spec order: session_fail, session_stop (only a successful call counts), then
    ``state.stop_session()``, then repeated identical tool errors."""
    reason = session_stop_reason(side, step.outcomes)
    if reason is None and flow.stop_session_result is not None:
        reason = StopReason.STATE_STOP_SESSION
    return reason or flow.repeated_errors.add(step.outcomes)


def _exchange_cap_reached(flow: Flow) -> bool:
    cap = flow.agent.max_session_turns
    return cap is not None and min(flow.turns["a"], flow.turns["b"]) >= cap


def _side_steps(flow: Flow, acting: Side) -> int:
    execution = flow.execution
    return execution.side_a_step_count if acting == "a" else execution.side_b_step_count


def abort_finish(flow: Flow) -> StopReason:
    """A stop, cancel or terminate fired: close what the turn left open (spec DIGEST
    §18.5) as its cause says (:func:`interruption_close`)."""
    flow.thread.refresh_from_db(fields=["terminated_at", "stop_requested"])
    flow.turn.refresh_from_db(fields=["cancel_requested"])
    outcome = interruption_close(
        thread=flow.thread, fence=flow.fence, turn=flow.turn, outbox=flow.outbox
    )
    return StopReason(outcome)
