"""The step engine: one flow of a thread, step by step, in the spec's order (runtime §3).

A flow starts when the thread's lock holder finds work in the inbox and ends when a stop
condition holds (DIGEST §5.3) or the acting side is human. Each step: drain the inbox ->
assemble context -> call the model (streaming) -> persist the answer -> run its tool calls
one by one -> persist their results -> evaluate stop conditions. Every write carries the
flow's fence (a stale worker cannot write) and the abort signal is checked before and after
the model call and before each tool.

Stop reasons (``StopReason``) are the spec's codes; the thread status read model follows
from them (``status_after``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import connection

from agents.documents import AgentDoc, PromptDoc, SessionBinding, SideConfig
from agents.providers.base import (
    AbortSignal,
    LLMMessage,
    ModelSpec,
    Provider,
    ProviderAborted,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    ReasoningConfig,
    ToolCall,
)
from agents.providers.chain import BASE_DELAY_S, FailedAttempt, generate_with_fallbacks
from agents.providers.registry import provider_for
from agents.registry import HookName, ToolResult
from common.errors import Conflict
from common.ids import new_id
from common.time import now_us
from threads.events import Outbox
from threads.models import Message, MessageStatus, Thread, Turn, TurnKind
from threads.runtime.context import HistoryOptions, history_to_llm, render_system_prompt
from threads.runtime.definitions import FlowDefinitions, ResolvedTool
from threads.runtime.hooks import HookBlocked, Hooks
from threads.runtime.records import CallTimer, TurnUsage, model_log_data, tool_log_data
from threads.runtime.stops import (
    RepeatedErrors,
    StopReason,
    global_cap,
    session_stop_reason,
    turn_end,
    turn_outcome,
)
from threads.runtime.tools import (
    FlowAborted,
    ToolOutcome,
    ToolRunner,
    as_text,
    stored_calls,
    subprompt_result,
)
from threads.services import logs
from threads.services.attachments import attachment_at
from threads.services.control import cancel_close, stop_close
from threads.services.env import EnvResolver
from threads.services.fence import thread_fenced_update
from threads.services.messages import (
    history_json,
    message_delete,
    message_finish,
    message_inject,
    message_json,
)
from threads.services.recovery import close_unanswered_calls
from threads.services.status import turn_finish, turn_inputs_take, turn_retrying
from threads.state import ExecutionState, ThreadState

logger = logging.getLogger(__name__)

Side = Literal["a", "b"]


@dataclass(frozen=True)
class Runtime:
    """What the engine talks to beyond the database; tests replace the models."""

    provider_factory: Callable[[ModelSpec], Provider] = provider_for
    load_model: Callable[[str], ModelSpec] | None = None
    retry_base_delay_s: float = BASE_DELAY_S
    # Give the pooled database connection back during model calls (workers run many flows
    # per process); in-process tests keep theirs (their transaction lives on it).
    release_connection: bool = False


class StepFailed(Exception):
    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class _Step:
    content: str
    calls: tuple[ToolCall, ...]
    outcomes: list[ToolOutcome]


@dataclass
class _Handoff:
    agent: str
    message: str | None
    attachments: list[dict[str, Any]] = field(default_factory=list)


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
            model_env=self._env_value,
            load_model_override=runtime.load_model,
        )
        self.agent = self._load_agent()
        self.resume_side = resume_side
        self.turns = {"a": 0, "b": 0}
        # The seq before this flow's first message (known at its first write).
        self.flow_start_seq: int | None = None
        self.handoff: _Handoff | None = None
        self.repeated_errors = RepeatedErrors()
        self.stop_session_result: str | None = None
        # Whether the inbox had work when the flow ended (set by run()).
        self.pending_after: bool | None = None

    # Public ------------------------------------------------------------------------------------

    @property
    def aborted(self) -> bool:
        return self.execution.abort_signal.is_set

    def run(self) -> StopReason:
        """Run the turn until a stop condition and end it; returns the reason. StaleFence
        propagates (the thread belongs to another worker now: nothing more may be written)."""
        started = now_us()
        resumed = {"resumed": True} if self.resume_side is not None else {}
        self.publish(
            "turn.started",
            {"fence": self.fence, "turn_id": str(self.turn.pk), **resumed},
        )
        error, error_code = "", None
        try:
            reason = self._loop()
        except FlowAborted:
            self.execution.stopped = True
            reason = self._finish_abort()
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
            error_code = _error_code(failed.error)
        status, rest = turn_outcome(reason, human_side=self._human("b"), error_code=error_code)
        # The turn's end commits as one: its status, the thread's, the flow's log, the events.
        with self.outbox.batch():
            self.pending_after = turn_finish(
                thread=self.thread, fence=self.fence, turn=self.turn, status=status, rest=rest,
                outcome=str(reason), error=error, usage=self.usage.summary(), outbox=self.outbox,
            )  # fmt: skip
            logs.log_create(
                thread=self.thread, kind="flow", fence=self.fence, outbox=self.outbox,
                data={"flow_id": self.flow_id, "turn_id": str(self.turn.pk), "fence": self.fence,
                      "reason": str(reason), "started_at": started, "ended_at": now_us(),
                      "steps": self.execution.step_count, "agent": self.agent.name},
            )  # fmt: skip
        return reason

    # The loop ----------------------------------------------------------------------------------

    def _loop(self) -> StopReason:
        acting: Side | None = self.resume_side
        while True:
            if self.aborted:
                raise FlowAborted
            drained_side = self._drain()
            if acting is None:
                acting = drained_side
            forced = self.execution.forced_side
            if forced is not None:
                acting, self.execution.forced_side = forced, None
            if acting is None:
                return StopReason.IDLE
            if self.stop_session_result is not None:
                return StopReason.STATE_STOP_SESSION
            if self._human(acting):
                return StopReason.FORCED_HUMAN_TURN if forced else StopReason.AWAITING_HUMAN
            if self._exchange_cap_reached():
                return StopReason.MAX_SESSION_TURNS
            side = self._side(acting)
            if side.max_steps is not None and self._side_steps(acting) >= side.max_steps:
                return StopReason.MAX_SIDE_STEPS
            if self.execution.step_count >= global_cap(self.agent):
                return StopReason.MAX_TOTAL_STEPS
            step = self._step(acting, side)
            reason = self._stop_reason(side, step)
            if reason is not None:
                return reason
            if self.handoff is not None:
                self._apply_handoff()
                acting = "a"
                continue
            ended = turn_end(side, step.content, step.calls)
            if ended is not None:
                self.turns[acting] += 1
                self.publish("side.completed", {"side": acting, "turns": dict(self.turns)})
                if self.execution.forced_side is not None:
                    continue  # force_turn decides who acts next (the loop's top applies it)
                other: Side = "b" if acting == "a" else "a"
                if self._human(other):
                    return ended
                acting = other

    def _stop_reason(self, side: SideConfig, step: _Step) -> StopReason | None:
        """Spec order: session_fail, session_stop (only a successful call counts), then
        ``state.stop_session()``, then repeated identical tool errors."""
        reason = session_stop_reason(side, step.outcomes)
        if reason is None and self.stop_session_result is not None:
            reason = StopReason.STATE_STOP_SESSION
        return reason or self.repeated_errors.add(step.outcomes)

    # Draining the inbox ------------------------------------------------------------------------

    def _drain(self) -> Side | None:
        """Persist queued messages (FIFO), run queued tools; returns the side the first
        drained item calls on (user/system -> a, assistant -> b), or None."""
        # Taking items and storing their messages commit together: a worker that dies in
        # between leaves the items in the inbox, never consumed without their messages.
        with self.outbox.batch():
            works = turn_inputs_take(
                thread=self.thread, fence=self.fence, turn=self.turn, outbox=self.outbox
            )
            messages = [work.payload for work in works if work.kind == TurnKind.MESSAGE]
            hooks = self._hooks(self._side_prompt("a")) if messages else None
            for payload in messages:
                role = payload["role"]
                self.create_message(
                    role=role,
                    content=payload.get("content"),
                    silent=bool(payload.get("silent")),
                    metadata=payload.get("metadata") or {},
                    attachments=payload.get("attachments") or [],
                    side="a" if role == "assistant" else "b" if role == "user" else "",
                    id=payload.get("message_id"),
                    hooks=hooks,
                )
        tools = [
            (work.payload["name"], dict(work.payload.get("args") or {}), f"queued_{work.id}")
            for work in works
            if work.kind == TurnKind.TOOL
        ]
        if tools:
            self._run_queued_tools(tools)
        return _first_side(works)

    def _run_queued_tools(self, tools: Sequence[tuple[str, dict[str, Any], str]]) -> None:
        """Queued tools run as a synthetic call of side A (runtime-forced: any tool the tenant
        has), so the model sees call and result paired."""
        prompt = self._side_prompt("a")
        calls = tuple(
            ToolCall(id=call_id, name=name, arguments=args) for name, args, call_id in tools
        )
        issuer = self.create_message(
            role="assistant", content=None, tool_calls=stored_calls(calls), side="a",
            metadata={"flow_id": self.flow_id, "queued_tools": True},
        )  # fmt: skip
        runner = self._runner(prompt, "a", parent=None)
        for call in calls:
            runner.run_one(call, issuer=issuer, forced=self.defs.resolve_any(call.name))

    # One step ----------------------------------------------------------------------------------

    def _step(self, acting: Side, side: SideConfig) -> _Step:
        execution = self.execution
        execution.current_side = acting
        execution.step_count += 1
        if acting == "a":
            execution.side_a_step_count += 1
        else:
            execution.side_b_step_count += 1
        prompt = self._prompt(side.prompt)
        hooks = self._hooks(prompt)
        tools = self.defs.tools_for(prompt, env_flag=self._env_value)
        with self.outbox.step(execution.step_count):
            self.publish("step.started", {"step": execution.step_count, "side": acting})
            messages = self._context(prompt, acting, hooks)
            issuer, response = self._model_call(
                prompt, acting, messages, tools, hooks, parent=None, stop_side=side
            )
            runner = self._runner(prompt, acting, parent=None, tools=tools, hooks=hooks, side=side)
            outcomes = runner.run(response.tool_calls, issuer=issuer) if response.tool_calls else []
            outcomes += self._run_tool_queue(runner)
            self.publish("step.completed", {"step": execution.step_count, "side": acting})
        return _Step(content=response.content, calls=response.tool_calls, outcomes=outcomes)

    def _run_tool_queue(self, runner: ToolRunner) -> list[ToolOutcome]:
        """Tools queued by ``state.queue_tool`` during this step run after its own calls."""
        outcomes: list[ToolOutcome] = []
        while self.execution.tool_queue:
            name, args = self.execution.tool_queue.pop(0)
            call = ToolCall(id=f"queued_{new_id().hex[:12]}", name=name, arguments=args)
            synthetic = self.create_message(
                role=_stored_role(runner.side), content=None,
                tool_calls=stored_calls([call]), side=runner.side,
                metadata={"flow_id": self.flow_id, "queued_tools": True},
            )  # fmt: skip
            outcomes.append(
                runner.run_one(call, issuer=synthetic, forced=self.defs.resolve_any(name))
            )
        return outcomes

    def _context(
        self,
        prompt: PromptDoc,
        acting: Side,
        hooks: Hooks,
        *,
        history: bool = True,
        extra: Sequence[Message] = (),
        relabel: bool | None = None,
    ) -> list[LLMMessage]:
        """System prompt + filtered history (+ ``extra`` rows, a subprompt's input), from the
        acting side's perspective."""
        state = hooks.state
        system = render_system_prompt(
            prompt,
            load_prompt=self.defs.prompt,
            env=self._system_env(prompt),
            variables={
                **(self.thread.arguments if isinstance(self.thread.arguments, dict) else {}),
                **state.context,
            },
        )
        system = hooks.transform(HookName.AFTER_SYSTEM_MESSAGE, system)
        messages: list[LLMMessage] = [LLMMessage.system(str(system))]
        if self.flow_start_seq is None:
            self.flow_start_seq = self._last_seq()  # a flow that resumed or continued
        stored: list[dict[str, Any]] = []
        if history:
            after = 0 if prompt.include_chat else self.flow_start_seq
            stored = history_json(thread=self.thread, after_seq=after)
        stored += [message_json(row) for row in extra]
        stored = list(hooks.transform(HookName.FILTER_MESSAGES, stored))
        self.execution.message_history = stored
        spec = self.defs.model(prompt.model)
        options = HistoryOptions(
            include_past_tools=prompt.include_past_tools,
            acting_side=acting,
            relabel=relabel if relabel is not None else not (acting == "a" and self._human("b")),
            vision=spec.capabilities.vision,
            flow_start_seq=self.flow_start_seq,
        )
        messages += history_to_llm(stored, options, read_file=state.read_file)
        return hooks.prefilter(messages)

    def _model_call(
        self,
        prompt: PromptDoc,
        acting: Side,
        messages: Sequence[LLMMessage],
        tools: Mapping[str, ResolvedTool],
        hooks: Hooks,
        *,
        parent: Message | None,
        stop_side: SideConfig | None = None,
    ) -> tuple[Message, ProviderResponse]:
        """A pending row, the model call (retries, fallbacks, streaming), then the row filled.

        Raises FlowAborted (the pending row is deleted) or StepFailed (the row is marked
        failed and the error logged).
        """
        spec = self.defs.model(prompt.model)
        # The pending row, the thread's acting side (what a takeover resumes) and the
        # model.requested event commit as one.
        with self.outbox.batch():
            pending = self.create_message(
                role=_stored_role(acting), content=None,
                status=MessageStatus.PENDING, side=acting, parent=parent,
                metadata={"flow_id": self.flow_id, "prompt": prompt.name},
                acting_side=acting if parent is None else None,
            )  # fmt: skip
            timer = CallTimer(pending, self.publish, on_retry=self._retrying)
        request = ProviderRequest(
            messages=messages,
            tools=[tool.spec for tool in tools.values()],
            tool_choice=prompt.tool_choice,
            parallel_tool_calls=prompt.parallel_tool_calls if tools else None,
            reasoning=ReasoningConfig(prompt.reasoning.effort, prompt.reasoning.max_tokens)
            if prompt.reasoning
            else None,
            metadata={"thread_id": str(self.thread.pk), "flow_id": self.flow_id},
        )
        self._checkpoint(pending)
        if self.runtime.release_connection:
            connection.close()  # back to the pool while the model thinks
        try:
            result = generate_with_fallbacks(
                spec, request, stream=True, on_chunk=timer.on_chunk,
                abort=self.execution.abort_signal, base_delay_s=self.runtime.retry_base_delay_s,
                provider_factory=self.runtime.provider_factory,
            )  # fmt: skip
        except ProviderAborted:
            aborted = ProviderError("the call was aborted by a stop, cancel or terminate")
            with self.outbox.batch():
                self.log_model(prompt, spec, timer, None, error=aborted, aborted=True)
                self._discard(pending)
            raise FlowAborted from None
        except ProviderError as error:
            with self.outbox.batch():
                message_finish(
                    message=pending, fence=self.fence, outbox=self.outbox, content=None,
                    status=MessageStatus.FAILED,
                    metadata={"error": error.message, "error_code": error.code},
                )  # fmt: skip
                self.log_model(prompt, spec, timer, None, error=error)
            raise StepFailed(error) from error
        self._retrying(False)
        self._checkpoint(pending)
        response = result.response
        content = self._stop_tool_content(stop_side, response)
        calls = stored_calls(response.tool_calls)
        proposed = hooks.transform(
            HookName.BEFORE_CREATE_MESSAGE,
            {**message_json(pending), "content": content or None,
             "tool_calls": json.dumps(calls) if calls else None,
             "status": MessageStatus.COMPLETED},
        )  # fmt: skip
        if not isinstance(proposed, Mapping):
            proposed = {}
        # The answer, the call's log and their events commit as one.
        with self.outbox.batch():
            finished = message_finish(
                message=pending, fence=self.fence, outbox=self.outbox,
                content=proposed.get("content", content) or None,
                tool_calls=calls,
                reasoning_content=response.reasoning,
                metadata={**(proposed.get("metadata") or {}), "model": result.spec.name},
            )  # fmt: skip
            hooks.notify(HookName.AFTER_CREATE_MESSAGE, message_json(finished))
            self.log_model(
                prompt, result.spec, timer, result.response, attempts=result.failed_attempts
            )
        return finished, response

    @staticmethod
    def _stop_tool_content(side: SideConfig | None, response: ProviderResponse) -> str:
        """With ``stop_tool_response_property``, that string argument of the stop-tool call
        replaces the assistant content before it is stored."""
        if side is None or not side.stop_tool or not side.stop_tool_response_property:
            return response.content
        for call in response.tool_calls:
            value = call.arguments.get(side.stop_tool_response_property)
            if call.name == side.stop_tool and isinstance(value, str):
                return value
        return response.content

    # Subprompts and handoffs (called by the tool runner) ---------------------------------------

    def run_subprompt(
        self, resolved: ResolvedTool, arguments: dict[str, Any], *, issuer: Message, side: str
    ) -> ToolResult:
        """One nested step of the subprompt; its messages hang under ``issuer`` (depth + 1)."""
        sub = self._prompt(resolved.name)
        config = resolved.config
        prop = config.init_user_message_property if config else None
        if prop:
            text = as_text(arguments.get(prop, ""))
        else:
            text = json.dumps(arguments, indent=2) if arguments else ""
        attachments = self._init_attachments(
            config.init_attachments_property if config else None, arguments
        )
        hooks = self._hooks(sub)
        acting: Side = "a" if side == "a" else "b"
        user = self.create_message(
            role="user", content=text, parent=issuer, side="", attachments=attachments,
            metadata={"flow_id": self.flow_id, "subprompt": sub.name}, hooks=hooks,
        )  # fmt: skip
        messages = self._context(
            sub, acting, hooks, history=sub.include_chat, extra=[user], relabel=acting == "b"
        )
        tools = self.defs.tools_for(sub, env_flag=self._env_value)
        answer, response = self._model_call(sub, acting, messages, tools, hooks, parent=issuer)
        runner = self._runner(sub, acting, parent=issuer, tools=tools, hooks=hooks)
        outcomes = runner.run(response.tool_calls, issuer=answer) if response.tool_calls else []
        return subprompt_result(config, response.content, outcomes)

    def request_handoff(self, resolved: ResolvedTool, arguments: dict[str, Any]) -> ToolResult:
        """An ai_human agent in the tools: the same thread switches to it after this step."""
        config = resolved.config
        prop = config.init_user_message_property if config else None
        message = None
        if prop and arguments.get(prop) is not None:
            message = as_text(arguments[prop])
        attachments = self._init_attachments(
            config.init_attachments_property if config else None, arguments
        )
        self.handoff = _Handoff(resolved.name, message, attachments)
        return ToolResult.success("Handoff complete")

    def _apply_handoff(self) -> None:
        handoff, self.handoff = self.handoff, None
        assert handoff is not None
        agent = self.defs.agent(handoff.agent)
        assert agent is not None
        thread_fenced_update(thread=self.thread, fence=self.fence, agent_name=agent.name)
        self.agent = agent
        self.publish(
            "thread.updated",
            {"id": str(self.thread.pk), "fields": ["agent_name"], "agent": agent.name},
        )
        if handoff.message is not None or handoff.attachments:
            self.create_message(
                role="user", content=handoff.message, side="b", attachments=handoff.attachments,
                metadata={"flow_id": self.flow_id, "handoff": agent.name},
            )  # fmt: skip

    def _init_attachments(
        self, prop: str | None, arguments: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        if not prop or arguments.get(prop) is None:
            return []
        paths = arguments[prop]
        paths = [paths] if isinstance(paths, str) else list(paths)
        return [attachment_at(thread=self.thread, path=path, field=prop) for path in paths]

    # Stop and abort ----------------------------------------------------------------------------

    def _finish_abort(self) -> StopReason:
        """A stop, cancel or terminate fired: close what the turn left open (spec DIGEST
        §18.5) as its cause says. An abort with no cause recorded (``execution.stop()``)
        closes as a user stop."""
        self.thread.refresh_from_db(fields=["terminated_at", "stop_requested"])
        if self.thread.terminated_at is not None:
            close_unanswered_calls(
                thread=self.thread, fence=self.fence, reason="Thread terminated", outbox=self.outbox
            )
            return StopReason.TERMINATED
        if not self.thread.stop_requested:
            self.turn.refresh_from_db(fields=["cancel_requested"])
            if self.turn.cancel_requested:
                outcome = cancel_close(
                    thread=self.thread, fence=self.fence, turn=self.turn, outbox=self.outbox
                )
                return StopReason(outcome)
        stop_close(thread=self.thread, fence=self.fence, flow_id=self.flow_id, outbox=self.outbox)
        return StopReason.ABORTED_BY_USER

    def _checkpoint(self, pending: Message | None = None) -> None:
        """Raise FlowAborted (deleting ``pending``) when the abort signal fired."""
        if self.aborted:
            if pending is not None:
                self._discard(pending)
            raise FlowAborted

    def _discard(self, pending: Message) -> None:
        message_delete(
            thread=self.thread, message_id=pending.id, fence=self.fence, outbox=self.outbox
        )

    # Writing -----------------------------------------------------------------------------------

    def create_message(self, *, hooks: Hooks | None = None, **fields: Any) -> Message:
        """A fenced insert, through ``before_create_message`` / ``after_create_message``.

        Raises FlowAborted when the thread was terminated under the flow (a tool called
        ``state.terminate()``, or a terminate arrived while a tool ran)."""
        fields.setdefault("metadata", {"flow_id": self.flow_id})
        if hooks is not None and hooks.has(HookName.BEFORE_CREATE_MESSAGE):
            proposed = hooks.transform(HookName.BEFORE_CREATE_MESSAGE, dict(fields))
            if isinstance(proposed, Mapping):
                for key in ("content", "metadata", "silent"):
                    if key in proposed:
                        fields[key] = proposed[key]
        try:
            message = message_inject(
                thread=self.thread, fence=self.fence, outbox=self.outbox, **fields
            )
        except Conflict as error:
            if error.code != "terminated":
                raise
            raise FlowAborted from error
        if self.flow_start_seq is None:
            self.flow_start_seq = message.seq - 1
        if hooks is not None:
            hooks.notify(HookName.AFTER_CREATE_MESSAGE, message_json(message))
        return message

    def publish(self, type: str, payload: Mapping[str, Any]) -> None:
        self.outbox.publish(type, {**payload, "flow_id": self.flow_id})

    def log_model(
        self,
        prompt: PromptDoc,
        spec: ModelSpec,
        timer: CallTimer,
        response: ProviderResponse | None,
        *,
        error: ProviderError | None = None,
        attempts: Sequence[FailedAttempt] = (),
        aborted: bool = False,
    ) -> None:
        data = model_log_data(spec, timer, response, error=error, attempts=attempts)
        data.update(self._log_context(), prompt=prompt.name)
        if aborted:
            data["aborted"] = True
        self.usage.add(data)
        logs.log_create(
            thread=self.thread, kind="llm", data=data, message=timer.message, fence=self.fence,
            outbox=self.outbox,
        )  # fmt: skip

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
        data = {**self._log_context(), **tool_log_data(call, result, duration_ms, kind=kind)}
        logs.log_create(
            thread=self.thread, kind="tool", data=data, message=stored, fence=self.fence,
            outbox=self.outbox, id=log_id,
        )  # fmt: skip

    def _retrying(self, retrying: bool = True) -> None:
        """A retry or fallback of the model call began (or the call answered)."""
        turn_retrying(
            thread=self.thread, fence=self.fence, turn=self.turn, retrying=retrying,
            outbox=self.outbox,
        )  # fmt: skip

    def _log_context(self) -> dict[str, Any]:
        execution = self.execution
        return {"flow_id": self.flow_id, "turn_id": str(self.turn.pk), "fence": self.fence,
                "step": execution.step_count,
                "side": execution.current_side}  # fmt: skip

    # ThreadState and definitions ---------------------------------------------------------------

    def tool_state(self, config: Any, prompt_name: str) -> ThreadState:
        env = dict(config.env or {}) if config is not None and config.env else {}
        state = ThreadState(
            self.thread, execution=self.execution, tool_env=env, prompt_name=prompt_name
        )
        state._flow = self
        return state

    def stop_session(self, result: str) -> None:
        self.stop_session_result = result

    def _runner(
        self,
        prompt: PromptDoc,
        acting: str,
        *,
        parent: Message | None,
        tools: Mapping[str, ResolvedTool] | None = None,
        hooks: Hooks | None = None,
        side: SideConfig | None = None,
    ) -> ToolRunner:
        bindings: dict[str, SessionBinding] = {}
        if side is not None:
            for binding in (side.session_stop, side.session_fail, side.session_status):
                if binding is not None:
                    parsed = SessionBinding(name=binding) if isinstance(binding, str) else binding
                    bindings[parsed.name] = parsed
        hooks = hooks or self._hooks(prompt)
        return ToolRunner(
            self,
            prompt_name=prompt.name,
            side=acting,
            tools=tools
            if tools is not None
            else self.defs.tools_for(prompt, env_flag=self._env_value),
            hooks=hooks,
            parent=parent,
            session_bindings=bindings,
        )

    def _hooks(self, prompt: PromptDoc) -> Hooks:
        return Hooks(
            registry=self.defs.registry,
            state=self.tool_state(None, prompt.name),
            prompt_name=prompt.name,
            prompt_hooks=prompt.hooks,
            agent_name=self.agent.name,
            agent_hooks=self.agent.hooks,
        )

    def _load_agent(self) -> AgentDoc:
        agent = self.defs.agent(self.thread.agent_name)
        if agent is None:
            raise StepFailed(
                ProviderError(f"the thread's agent {self.thread.agent_name!r} no longer exists")
            )
        return agent

    def _prompt(self, name: str) -> PromptDoc:
        prompt = self.defs.prompt(name)
        if prompt is None:
            raise StepFailed(ProviderError(f"prompt {name!r} no longer exists"))
        return prompt

    def _side(self, acting: Side) -> SideConfig:
        side = self.agent.side_a if acting == "a" else self.agent.side_b
        assert side is not None  # _human() said this side is an AI side
        return side

    def _side_prompt(self, acting: Side) -> PromptDoc:
        return self._prompt(self._side(acting).prompt)

    def _human(self, acting: Side) -> bool:
        """Side B of an ai_human agent is the human (0.1.0: it needs no configuration)."""
        return acting == "b" and (self.agent.type == "ai_human" or self.agent.side_b is None)

    def _exchange_cap_reached(self) -> bool:
        cap = self.agent.max_session_turns
        return cap is not None and min(self.turns["a"], self.turns["b"]) >= cap

    def _side_steps(self, acting: Side) -> int:
        execution = self.execution
        return execution.side_a_step_count if acting == "a" else execution.side_b_step_count

    def _last_seq(self) -> int:
        last = (
            Message.objects.filter(thread_id=self.thread.pk)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        return last or 0

    def _resolver(self, prompt_name: str | None = None) -> EnvResolver:
        prompt = self.defs.prompt(prompt_name) if prompt_name else None
        return EnvResolver(
            thread=self.thread, agent_env=self.agent.env, prompt_env=prompt.env if prompt else {}
        )

    def _env_value(self, name: str) -> str | None:
        found = self._resolver(self.agent.side_a.prompt).resolve(name)
        return None if found is None else found.value

    def _system_env(
        self, prompt: PromptDoc
    ) -> Callable[[str], tuple[str, Literal["text", "secret"]] | None]:
        resolver = self._resolver(prompt.name)

        def lookup(name: str) -> tuple[str, Literal["text", "secret"]] | None:
            found = resolver.resolve(name)
            return None if found is None else (found.value, found.type)

        return lookup


def _error_code(error: ProviderError) -> str:
    """A failed call's code; a chain whose every attempt had the same code has that one."""
    codes = {attempt.code for attempt in getattr(error, "attempts", ())}
    return codes.pop() if len(codes) == 1 else error.code


def _first_side(works: Sequence[Turn]) -> Side | None:
    """The side the first drained item calls on: a message from the assistant calls on B,
    any other message or a queued tool on A, a continue on the side it names."""
    for work in works:
        if work.kind == TurnKind.MESSAGE:
            return "b" if work.payload["role"] == "assistant" else "a"
        if work.kind == TurnKind.TOOL:
            return "a"
        if work.kind == TurnKind.CONTINUE:
            return "b" if work.payload.get("side") == "b" else "a"
    return None


def _stored_role(side: str) -> str:
    """Side A's messages are stored as ``assistant``, side B's as ``user`` (spec §0.3)."""
    return "assistant" if side == "a" else "user"
