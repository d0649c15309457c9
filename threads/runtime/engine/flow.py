"""``Flow``: one turn of a thread, the context object every part of the engine takes. It
holds the flow's state (thread, fence, turn, runtime, outbox, execution, definitions,
agent, usage, counters), runs the turn through the loop (:mod:`.loop`) and ends it, or
rests it on a person's decision. Tools and ``ThreadState`` reach the engine through its
few public methods."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from agents.providers.base import AbortSignal, ToolCall
from agents.registry import ToolResult
from agents.schemas import check_schema
from common.connections import connection_release
from common.errors import DomainError
from common.ids import new_id
from common.time import now_us
from threads.events import Outbox
from threads.models import Action, ActionKind, Message, RunStatus, Thread, Turn
from threads.runtime.code_mode import Replay
from threads.runtime.definitions import FlowDefinitions, ResolvedTool
from threads.runtime.engine.agent import (
    agent_load,
    env_value,
    prompt_hooks,
    side_is_human,
    side_prompt,
)
from threads.runtime.engine.agent import tool_state as agent_tool_state
from threads.runtime.engine.base import Runtime, Side, StepFailed
from threads.runtime.engine.context_door import context_manager
from threads.runtime.engine.delegation import Handoff, handoff_request, subprompt_run
from threads.runtime.engine.loop import abort_finish, counters_restore, loop_run
from threads.runtime.engine.model_call import error_code
from threads.runtime.engine.spend import SpendHalt, spend_turn
from threads.runtime.engine.subagents import DriveChild, subagent_call
from threads.runtime.engine.writes import event_publish, message_create, tool_log
from threads.runtime.hooks import HookBlocked, Hooks
from threads.runtime.records import TurnUsage
from threads.runtime.stops import RepeatedErrors, StopReason, turn_outcome
from threads.runtime.subagent_tools import direct_call_guidance
from threads.runtime.telemetry_door import telemetry
from threads.runtime.tool_calls import ActionNeeded, FlowAborted, InFlight
from threads.services import logs
from threads.services.actions import action_open, answer_data, input_answers
from threads.services.control import child_close
from threads.services.status import turn_finish, turn_pause
from threads.services.subagents import StopSession, link_status_set, session_end
from threads.state import ExecutionState, ThreadState
from usage.budgets import Scope

logger = logging.getLogger(__name__)


class Flow:
    """One flow of one thread. Precondition: the caller holds the thread's lock with ``fence``."""

    def __init__(
        self,
        thread: Thread,
        *,
        fence: int,
        runtime: Runtime,
        abort: AbortSignal,
        turn: Turn,
        resume_side: Side | None = None,
        drive: DriveChild | None = None,
        resumption: Action | None = None,
        lease: tuple[str, str] | None = None,
    ) -> None:
        self.thread = thread
        self.turn = turn
        self.fence = fence
        self.runtime = runtime
        self.flow_id = str(new_id())
        self.outbox = Outbox(thread, turn_id=str(turn.pk), flow_id=self.flow_id)
        self.usage = TurnUsage()
        self.execution = ExecutionState(flow_id=self.flow_id, abort_signal=abort)
        self.defs = FlowDefinitions(
            tenant=thread.tenant,
            model_env=partial(env_value, self),
            load_model_override=runtime.load_model,
        )
        self.agent = agent_load(self)
        self.resume_side = resume_side
        self.turns = {"a": 0, "b": 0}
        # The seq before this flow's first message (known at its first write).
        self.flow_start_seq: int | None = None
        self.handoff: Handoff | None = None
        self.repeated_errors = RepeatedErrors()
        self.stop_session_result: StopSession | None = None
        # Runs a child thread's turns in this worker (the driver's thread_drive); None: a
        # blocking subagent call waits for whichever worker runs the child.
        self.drive = drive
        # Whether the inbox had work when the flow ended (set by run()).
        self.pending_after: bool | None = None
        # Whether inputs of this turn may wait in the inbox: the turn itself before the
        # first drain, then only what this flow queues for itself (:meth:`input_joined`).
        self.inputs_waiting = True
        # The digest of the tool catalog last offered per side and prompt (model_call).
        self.catalogs: dict[tuple[str, str], str] = {}
        # The answered action this flow resumes its paused turn from (None: a new turn).
        self.resumption = resumption
        # The tool call running now (state.request_input pauses on it).
        self.calling: InFlight | None = None
        # The replays of paused ``code`` calls the resumed step runs again, by call id.
        self.code_replays: dict[str, Replay] = {}
        # The thread lock's key and token: the flow's spend reservations live as long as it.
        self.lease = lease
        self.spend_scope: Scope | None = None
        if resumption is not None:
            counters_restore(self, resumption.resume)
        elif turn.resume:  # a turn that waited for a budget or quota carries on
            counters_restore(self, turn.resume)
            self.resume_side = "b" if turn.resume.get("side") == "b" else "a"

    @property
    def aborted(self) -> bool:
        return self.execution.abort_signal.is_set

    def idle(self) -> None:
        """A wait begins (a model, a tool, a sandbox runner, a subagent): in a worker the
        flow gives its database connection back to the pool, and its next statement takes
        one again, so a flow holds a connection only to read or write."""
        if self.runtime.release_connection:
            connection_release()

    def run(self) -> StopReason:
        """Run the turn until a stop condition and end it; returns the reason. StaleFence
        propagates (the thread belongs to another worker now: nothing more may be written)."""
        with telemetry().turn(self):
            return self._run()

    def _run(self) -> StopReason:
        started = now_us()
        resumed: dict[str, Any] = {}
        if self.resume_side is not None or self.resumption is not None:
            resumed["resumed"] = True
        if self.resumption is not None:
            resumed["action_id"] = str(self.resumption.pk)
        self.publish(
            "turn.started",
            {"fence": self.fence, "turn_id": str(self.turn.pk),
             "created_at": self.turn.created_at, **resumed},
        )  # fmt: skip
        if self.thread.parent_id is not None:  # the parent's registry: a session runs
            link_status_set(child=self.thread, status="running")
        error, code = "", None
        try:
            reason = loop_run(self)
        except ActionNeeded as needed:
            return self._pause(needed, started)
        except SpendHalt as halt:
            if halt.policy == "pause":
                return self._wait(halt, started)
            self.create_message(
                role="system", content=f"The turn was stopped: {halt.message}", silent=True,
                metadata={"flow_id": self.flow_id, "error_code": "budget_exceeded"},
            )  # fmt: skip
            reason, error = StopReason.BUDGET_EXCEEDED, halt.message
        except FlowAborted:
            self.execution.stopped = True
            reason = abort_finish(self)
        except HookBlocked as blocked:
            logger.info("flow %s: %s", self.flow_id, blocked)
            reason, error = StopReason.HOOK_BLOCKED, str(blocked)
        except StepFailed as failed:
            self.create_message(
                role="system",
                content=f"The step failed: {failed.error.message}",
                silent=True,
                metadata={"flow_id": self.flow_id, "error_code": failed.error.code},
            )
            reason, error = StopReason.STEP_ERROR, failed.error.message
            code = error_code(failed.error)
            self.publish("runtime.error", {"code": code or "step_error", "message": error})
        status, rest = turn_outcome(reason, human_side=side_is_human(self, "b"), error_code=code)
        # The turn's end commits as one: its status, the thread's, the flow's log, the events,
        # and for a child thread its session's outcome (recorded for its parent).
        close_child = False
        with self.outbox.batch():
            self.pending_after = turn_finish(
                thread=self.thread, fence=self.fence, turn=self.turn, status=status, rest=rest,
                outcome=str(reason), error=error, usage=self.usage.summary(), outbox=self.outbox,
            )  # fmt: skip
            logs.log_create(
                thread=self.thread, kind="flow", fence=self.fence, outbox=self.outbox,
                data={"flow_id": self.flow_id, "turn_id": str(self.turn.pk), "fence": self.fence,
                      "reason": str(reason), "started_at": started, "ended_at": now_us(),
                      "steps": self.execution.step_count, "agent": self.agent.name,
                      "stopped_by": self.execution.stopped_by},
            )  # fmt: skip
            spend_turn(self)
            if self.thread.parent_id is not None:
                close_child = session_end(
                    child=self.thread, turn=self.turn, reason=str(reason),
                    stop=self.stop_session_result,
                )  # fmt: skip
        if close_child:
            child_close(child=self.thread)
        if status == RunStatus.COMPLETED and not self.pending_after:
            context_manager().turn_ended(self, side_prompt(self, self.execution.current_side))
        return reason

    def _pause(self, needed: ActionNeeded, started: int) -> StopReason:
        """Rest the turn on a person's decision: the action, the turn's and the thread's
        status and the flow's log commit as one; no worker holds the turn until it is
        answered and resumed (:func:`threads.runtime.engine.step.step_resume`)."""
        execution, rule = self.execution, needed.rule
        resume = {
            "side": execution.current_side, "step": execution.step_count,
            "side_a_steps": execution.side_a_step_count,
            "side_b_steps": execution.side_b_step_count, "turns": dict(self.turns),
            "tool_queue": [[name, args] for name, args in execution.tool_queue],
            "flow_start_seq": self.flow_start_seq, **needed.resume,
        }  # fmt: skip
        status = (
            RunStatus.WAITING_PERMISSION
            if needed.kind == ActionKind.APPROVAL
            else RunStatus.WAITING_INPUT
        )
        with self.outbox.batch():
            action = action_open(
                thread=self.thread, turn=self.turn, kind=needed.kind, issuer=needed.issuer,
                tool_call_id=needed.call.id, tool_name=needed.name,
                arguments=needed.arguments, schema=needed.schema,
                rule=rule.as_json() if rule is not None else None, prompt=needed.prompt,
                expires_in=rule.expires_in if rule is not None else None,
                on_expiry=rule.on_expiry if rule is not None else "deny", resume=resume,
                outbox=self.outbox,
            )  # fmt: skip
            turn_pause(
                thread=self.thread, fence=self.fence, turn=self.turn, status=status,
                outbox=self.outbox,
            )  # fmt: skip
            if self.thread.parent_id is not None:  # the parent's registry: it waits on a person
                link_status_set(child=self.thread, status="awaiting_human")
            logs.log_create(
                thread=self.thread, kind="flow", fence=self.fence, outbox=self.outbox,
                data={"flow_id": self.flow_id, "turn_id": str(self.turn.pk), "fence": self.fence,
                      "reason": str(StopReason.ACTION_REQUIRED), "action_id": str(action.pk),
                      "started_at": started, "ended_at": now_us(),
                      "steps": execution.step_count, "agent": self.agent.name},
            )  # fmt: skip
        self.pending_after = False
        return StopReason.ACTION_REQUIRED

    def _wait(self, halt: SpendHalt, started: int) -> StopReason:
        """Rest the turn in ``waiting_resource`` until its budget or quota has room: the
        step that could not call its model starts again when the turn is released (a raised
        budget, a rolled window: :mod:`threads.services.waits`)."""
        execution, side = self.execution, self.execution.current_side
        waiting = {"reason": halt.reason, "message": halt.message, "retry_at": halt.retry_at,
                   **halt.detail}  # fmt: skip
        resume = {
            "side": side, "step": execution.step_count - 1,
            "side_a_steps": execution.side_a_step_count - (side == "a"),
            "side_b_steps": execution.side_b_step_count - (side == "b"),
            "turns": dict(self.turns),
            "tool_queue": [[name, args] for name, args in execution.tool_queue],
            "flow_start_seq": self.flow_start_seq, "waiting": waiting,
        }  # fmt: skip
        with self.outbox.batch():
            turn_pause(
                thread=self.thread, fence=self.fence, turn=self.turn,
                status=RunStatus.WAITING_RESOURCE, outbox=self.outbox, resume=resume,
                reason=halt.reason,
            )  # fmt: skip
            logs.log_create(
                thread=self.thread, kind="flow", fence=self.fence, outbox=self.outbox,
                data={"flow_id": self.flow_id, "turn_id": str(self.turn.pk), "fence": self.fence,
                      "reason": str(StopReason.WAITING_RESOURCE), "waiting": waiting,
                      "started_at": started, "ended_at": now_us(),
                      "steps": execution.step_count, "agent": self.agent.name},
            )  # fmt: skip
        self.pending_after = False
        return StopReason.WAITING_RESOURCE

    # What tools, hooks and ThreadState call ----------------------------------------------------

    def create_message(self, *, hooks: Hooks | None = None, **fields: Any) -> Message:
        return message_create(self, hooks=hooks, **fields)

    def publish(self, type: str, payload: Mapping[str, Any]) -> None:
        event_publish(self, type, payload)

    def log_tool(
        self,
        call: ToolCall,
        result: ToolResult,
        stored: Message | None,
        duration_ms: float,
        *,
        kind: str | None,
        log_id: uuid.UUID | None = None,
    ) -> None:
        tool_log(self, call, result, stored, duration_ms, kind=kind, log_id=log_id)

    def tool_state(self, config: Any, prompt_name: str) -> ThreadState:
        return agent_tool_state(self, config, prompt_name)

    @contextlib.contextmanager
    def tool_call(self, in_flight: InFlight) -> Iterator[None]:
        """``in_flight`` is the running tool call for the block."""
        outer, self.calling = self.calling, in_flight
        try:
            yield
        finally:
            self.calling = outer

    def request_input(self, schema: Mapping[str, Any], prompt: str) -> dict[str, Any]:
        """``state.request_input``: the person's answer to the running call's next input
        request. The first time, the turn pauses on an input action and, once it is answered,
        the call runs again from its start: its earlier requests return their answers at
        once, in order. Raises DomainError where no person can be waited for, InputDeclined
        when the person declined."""
        calling = self.calling
        if calling is None or not calling.pausable:
            raise DomainError(
                "request_input needs a tool call of a model step, which can wait for a "
                "person (a tool, or a hook around its call; not a queued tool, a subprompt's "
                "call or another hook)"
            )
        problems = check_schema(schema)
        if problems or not isinstance(schema, Mapping) or schema.get("type") != "object":
            detail = problems[0].message if problems else "it must describe an object"
            raise DomainError(f"request_input: the schema is not valid: {detail}")
        index = calling.inputs_asked
        calling.inputs_asked += 1
        answers = input_answers(turn=self.turn, tool_call_id=calling.call.id)
        if index < len(answers):
            return answer_data(answers[index])
        raise ActionNeeded(
            kind=ActionKind.INPUT, call=calling.call, issuer=calling.issuer, schema=schema,
            prompt=prompt,
        )  # fmt: skip

    def input_joined(self) -> None:
        """``state.queue_message`` queued an input that joins this turn: the next drain
        takes it."""
        self.inputs_waiting = True

    def stop_session(self, stop: StopSession) -> None:
        self.stop_session_result = stop

    def status_report(self, status: str) -> None:
        """The side's ``session_status`` binding succeeded: a child's parent sees ``status``."""
        if self.thread.parent_id is not None and status.strip():
            link_status_set(child=self.thread, status=status.strip())

    def owner_hooks(self, owner: str) -> Hooks:
        """The hooks of the side ``owner``'s prompt (``after_subagent_created`` runs there)."""
        return prompt_hooks(self, side_prompt(self, "b" if owner == "b" else "a"))

    def run_subagent(
        self, resolved: ResolvedTool, arguments: dict[str, Any], *, side: str
    ) -> ToolResult:
        return subagent_call(self, resolved, arguments, side=side)

    def direct_call_guidance(self, name: str, tools: Mapping[str, ResolvedTool]) -> str | None:
        return direct_call_guidance(name, tools)

    def run_subprompt(
        self, resolved: ResolvedTool, arguments: dict[str, Any], *, issuer: Message, side: str
    ) -> ToolResult:
        return subprompt_run(self, resolved, arguments, issuer=issuer, side=side)

    def request_handoff(self, resolved: ResolvedTool, arguments: dict[str, Any]) -> ToolResult:
        return handoff_request(self, resolved, arguments)
