"""One step of the acting side: assemble its context, call the model, run the answer's
tool calls one by one, then the tools queued during the step (runtime §3); or, after a
person's decision, the rest of a paused step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.documents import PromptDoc, SideConfig
from agents.providers.base import CONTEXT_LENGTH_EXCEEDED, ProviderResponse, ToolCall
from common.ids import new_id
from threads.models import Action, ActionKind, ActionStatus, Message, MessageRole
from threads.runtime.client_tools import client_tools_of
from threads.runtime.code_mode import replay_of
from threads.runtime.context import stored_tool_calls
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.agent import prompt_hooks, prompt_load, prompt_tools, tool_runner
from threads.runtime.engine.base import Side, StepFailed, StepOutcome
from threads.runtime.engine.context_door import context_manager
from threads.runtime.engine.model_call import context_build, error_code, model_call
from threads.runtime.engine.writes import event_publish, message_create, stored_role
from threads.runtime.hooks import Hooks
from threads.runtime.tool_calls import ToolOutcome, stored_calls, stored_outcome
from threads.runtime.tools import ToolRunner
from threads.services.actions import action_allows, denial_result

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def step_tools(flow: Flow, prompt: PromptDoc) -> dict[str, ResolvedTool]:
    """What a model step of ``prompt`` offers: the prompt's tools, and the tools the turn's
    client runs (threads.runtime.client_tools), the prompt's winning a shared name."""
    return {**client_tools_of(flow.turn), **prompt_tools(flow, prompt)}


def step_run(flow: Flow, acting: Side, side: SideConfig) -> StepOutcome:
    execution = flow.execution
    execution.current_side = acting
    execution.step_count += 1
    if acting == "a":
        execution.side_a_step_count += 1
    else:
        execution.side_b_step_count += 1
    prompt = prompt_load(flow, side.prompt)
    hooks = prompt_hooks(flow, prompt)
    with flow.outbox.step(execution.step_count):
        event_publish(flow, "step.started", {"step": execution.step_count, "side": acting})
        issuer, response, tools = _answer(flow, prompt, acting, side, hooks)
        runner = tool_runner(
            flow, prompt, acting, parent=None, tools=tools, hooks=hooks, side=side, pausable=True
        )
        outcomes = runner.run(response.tool_calls, issuer=issuer) if response.tool_calls else []
        outcomes += _tool_queue_run(flow, runner)
        event_publish(flow, "step.completed", {"step": execution.step_count, "side": acting})
    return StepOutcome(content=response.content, calls=response.tool_calls, outcomes=outcomes)


def _answer(
    flow: Flow, prompt: PromptDoc, acting: Side, side: SideConfig, hooks: Hooks
) -> tuple[Message, ProviderResponse, dict[str, ResolvedTool]]:
    """The step's context, tools (after the context: a compacted one adds ``recall``) and
    model call. A context the provider refuses as too long is shrunk by the context manager
    and the call tried once more (then the step fails as it would have)."""
    for attempt in (1, 2):
        messages = context_build(flow, prompt, acting, hooks)
        tools = step_tools(flow, prompt)
        try:
            issuer, response = model_call(
                flow, prompt, acting, messages, tools, hooks, parent=None, stop_side=side
            )
            return issuer, response, tools
        except StepFailed as failed:
            if attempt == 2 or error_code(failed.error) != CONTEXT_LENGTH_EXCEEDED:
                raise
            if not context_manager().recover(flow, prompt, acting):
                raise
    raise AssertionError("unreachable")


def step_resume(flow: Flow, acting: Side, side: SideConfig, action: Action) -> StepOutcome:
    """Carry on the step a person's decision paused: the calls of its answer that ran keep
    their results, the waiting call runs as ``action`` decided, the calls after it run (and
    may pause the turn again), then the tools queued during the step."""
    execution = flow.execution
    execution.current_side = acting
    prompt = prompt_load(flow, side.prompt)
    hooks = prompt_hooks(flow, prompt)
    # The issuer is gone only when someone deleted its messages: nothing is left to run.
    issuer = (
        Message.objects.filter(thread_id=flow.thread.pk, id=action.issuer_id).first()
        if action.issuer_id is not None
        else None
    )
    if issuer is None:
        return StepOutcome(content="", calls=(), outcomes=[])
    calls = tuple(stored_tool_calls(issuer.tool_calls))
    # The issuer's results follow it: a call id an earlier answer used (a model may number
    # its calls per request) is another call's.
    answered = {
        row.tool_call_id: row
        for row in Message.objects.filter(
            thread_id=flow.thread.pk, role=MessageRole.TOOL, parent__isnull=True,
            tool_call_id__in=[call.id for call in calls], seq__gt=issuer.seq,
        )
    }  # fmt: skip
    with flow.outbox.step(execution.step_count):
        tools = step_tools(flow, prompt)
        runner = tool_runner(flow, prompt, acting, parent=None, tools=tools, hooks=hooks,
                             side=side, pausable=True)  # fmt: skip
        outcomes = [
            stored_outcome(call, answered[call.id]) for call in calls if call.id in answered
        ]
        waiting = [call for call in calls if call.id not in answered]
        if waiting and waiting[0].id == action.tool_call_id:
            outcomes.append(_decided(runner, waiting.pop(0), action, issuer))
        outcomes += runner.run(waiting, issuer=issuer)
        outcomes += _tool_queue_run(flow, runner)
        event_publish(flow, "step.completed", {"step": execution.step_count, "side": acting})
    return StepOutcome(content=issuer.content or "", calls=calls, outcomes=outcomes)


def _decided(runner: ToolRunner, call: ToolCall, action: Action, issuer: Message) -> ToolOutcome:
    """The waiting call, run as the person decided: approved (or allowed on expiry) as the
    model wrote it, edited with the person's arguments, or denied with their reason. A call
    that asked for input runs again from its start (``state.request_input`` answers)."""
    response = action.response or {}
    if action.kind == ActionKind.INPUT:
        return runner.run_one(call, issuer=issuer, granted=True)
    replay = replay_of(action)
    if replay is not None:  # a code program: it runs again, the person's decision inside
        runner.flow.code_replays[call.id] = replay
        return runner.run_one(call, issuer=issuer, granted=True)
    if not action_allows(action):
        return runner.run_one(call, issuer=issuer, decided=denial_result(action))
    if action.status == ActionStatus.EDITED:
        call = ToolCall(id=call.id, name=call.name, arguments=dict(response["arguments"]))
    return runner.run_one(call, issuer=issuer, granted=True)


def _tool_queue_run(flow: Flow, runner: ToolRunner) -> list[ToolOutcome]:
    """Tools queued by ``state.queue_tool`` during this step run after its own calls."""
    outcomes: list[ToolOutcome] = []
    while flow.execution.tool_queue:
        name, args = flow.execution.tool_queue.pop(0)
        call = ToolCall(id=f"queued_{new_id().hex[:12]}", name=name, arguments=args)
        synthetic = message_create(
            flow, role=stored_role(runner.side), content=None,
            tool_calls=stored_calls([call]), side=runner.side,
            metadata={"flow_id": flow.flow_id, "queued_tools": True},
        )  # fmt: skip
        outcomes.append(runner.run_one(call, issuer=synthetic, forced=flow.defs.resolve_any(name)))
    return outcomes
