"""A model call: the context the acting side sees, the pending row, the call (retries,
fallbacks, streaming), then the row filled with the answer. The abort signal is checked
before and after the call."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from agents.documents import PromptDoc, SideConfig
from agents.providers.base import (
    ContentDelta,
    LLMMessage,
    ProviderAborted,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    ReasoningConfig,
)
from agents.providers.chain import ChainChunk, RetryStarted, generate_with_fallbacks
from agents.registry import HookName
from threads.models import Message, MessageStatus
from threads.runtime.context import HistoryOptions, history_to_llm, render_system_prompt
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.agent import side_is_human, system_env
from threads.runtime.engine.base import Side, StepFailed
from threads.runtime.engine.context_door import context_manager
from threads.runtime.engine.spend import SpendHalt, spend_commit, spend_reserve
from threads.runtime.engine.writes import event_publish, message_create, model_log, stored_role
from threads.runtime.hooks import Hooks
from threads.runtime.records import CallTimer
from threads.runtime.telemetry_door import ModelCallRecord, telemetry
from threads.runtime.tool_calls import FlowAborted, stored_calls
from threads.services.message_shapes import message_json
from threads.services.messages import message_delete, message_finish
from threads.services.status import turn_retrying
from usage import budgets
from usage.budgets import Hold

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def context_build(
    flow: Flow,
    prompt: PromptDoc,
    acting: Side,
    hooks: Hooks,
    *,
    history: bool = True,
    extra: Sequence[Message] = (),
    relabel: bool | None = None,
) -> list[LLMMessage]:
    """System prompt + filtered history (+ ``extra`` rows, a subprompt's input), from the
    acting side's perspective; smaller when the context manager says it would not fit."""
    built = partial(_assembled, flow, prompt, acting, hooks, history=history, extra=extra,
                    relabel=relabel)  # fmt: skip
    return context_manager().fit(flow, prompt, acting, built(), built)


def _assembled(
    flow: Flow,
    prompt: PromptDoc,
    acting: Side,
    hooks: Hooks,
    *,
    history: bool,
    extra: Sequence[Message],
    relabel: bool | None,
) -> list[LLMMessage]:
    state = hooks.state
    system = render_system_prompt(
        prompt,
        load_prompt=flow.defs.prompt,
        env=system_env(flow, prompt),
        variables={
            **(flow.thread.arguments if isinstance(flow.thread.arguments, dict) else {}),
            **state.context,
        },
    )
    system = hooks.transform(HookName.AFTER_SYSTEM_MESSAGE, system)
    messages: list[LLMMessage] = [LLMMessage.system(str(system))]
    if flow.flow_start_seq is None:
        flow.flow_start_seq = _last_seq(flow)  # a flow that resumed or continued
    stored: list[dict[str, Any]] = []
    if history:
        after = 0 if prompt.include_chat else flow.flow_start_seq
        stored = context_manager().history(flow, prompt, acting, after)
    stored += [message_json(row) for row in extra]
    stored = list(hooks.transform(HookName.FILTER_MESSAGES, stored))
    flow.execution.message_history = stored
    spec = flow.defs.model(prompt.model)
    options = HistoryOptions(
        include_past_tools=prompt.include_past_tools,
        acting_side=acting,
        relabel=relabel
        if relabel is not None
        else not (acting == "a" and side_is_human(flow, "b")),
        vision=spec.capabilities.vision,
        flow_start_seq=flow.flow_start_seq,
        reasoning=_replayed_reasoning(flow, prompt, stored),
    )
    messages += history_to_llm(stored, options, read_file=state.read_file)
    return hooks.prefilter(messages)


NO_TOOLS = hashlib.sha256(b"[]").hexdigest()[:16]


def _catalog(
    flow: Flow, prompt: PromptDoc, acting: Side, tools: Mapping[str, ResolvedTool]
) -> dict[str, Any] | None:
    """The ``tool.catalog.resolved`` payload of the tools this call offers, or None when the
    flow's last call of this side and prompt offered the same catalog (its first, none)."""
    offered = [
        {"name": name, "kind": tool.kind, "description": tool.spec.description,
         "parameters": tool.spec.parameters}
        for name, tool in tools.items()
    ]  # fmt: skip
    encoded = json.dumps(offered, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(encoded).hexdigest()[:16]
    if flow.catalogs.get((acting, prompt.name), NO_TOOLS) == digest:
        return None
    flow.catalogs[(acting, prompt.name)] = digest
    return {"side": acting, "prompt": prompt.name, "digest": digest, "tools": offered}


def _replayed_reasoning(
    flow: Flow, prompt: PromptDoc, stored: Sequence[Mapping[str, Any]]
) -> dict[str, str] | None:
    """The reasoning replayed with the history's messages (DIGEST 18.3, rule 6): only when the
    prompt's ``reasoning.include`` is set, and only with the messages that prompt answered."""
    if not (prompt.reasoning and prompt.reasoning.include):
        return None
    ids = [row["id"] for row in stored if (row.get("metadata") or {}).get("prompt") == prompt.name]
    said = Message.objects.filter(thread_id=flow.thread.pk, id__in=ids).exclude(
        reasoning_content=""
    )
    return {str(id): text for id, text in said.values_list("id", "reasoning_content")}


def model_call(
    flow: Flow,
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

    Raises FlowAborted (the pending row is deleted, or kept ``failed`` and marked
    ``interrupted`` with the text streamed before the abort) or StepFailed (the error logged;
    the row is deleted, or marked failed with the text streamed before the failure).
    """
    spec = flow.defs.model(prompt.model)
    request = ProviderRequest(
        messages=messages,
        tools=[tool.spec for tool in tools.values()],
        tool_choice=prompt.tool_choice,
        parallel_tool_calls=prompt.parallel_tool_calls if tools else None,
        reasoning=ReasoningConfig(prompt.reasoning.effort, prompt.reasoning.max_tokens)
        if prompt.reasoning
        else None,
        metadata={"thread_id": str(flow.thread.pk), "flow_id": flow.flow_id},
    )
    try:
        hold = spend_reserve(flow, spec, request)  # before any row: a halt leaves nothing
    except SpendHalt as halt:
        if parent is None:
            raise  # the turn pauses or ends (Flow.run)
        # A subprompt's call: its tool fails, and the next step's own call halts the turn.
        raise StepFailed(ProviderError(halt.message, code="budget_exceeded")) from None
    if hold.max_output_tokens is not None:
        request = dataclasses.replace(request, max_output_tokens=hold.max_output_tokens)
    try:
        catalog = _catalog(flow, prompt, acting, tools)
        with telemetry().model_call(flow, spec, prompt, request) as record:
            return _called(flow, prompt, acting, request, hooks, hold, parent=parent,
                           stop_side=stop_side, catalog=catalog, record=record)  # fmt: skip
    finally:
        budgets.release(hold)  # a no-op once committed


def _called(
    flow: Flow,
    prompt: PromptDoc,
    acting: Side,
    request: ProviderRequest,
    hooks: Hooks,
    hold: Hold,
    *,
    parent: Message | None,
    stop_side: SideConfig | None,
    catalog: dict[str, Any] | None,
    record: ModelCallRecord,
) -> tuple[Message, ProviderResponse]:
    spec = flow.defs.model(prompt.model)
    # ``reasoning.exclude``: the model may reason, but its reasoning is neither streamed
    # nor stored (so never replayed either).
    excluded = bool(prompt.reasoning and prompt.reasoning.exclude)
    # The pending row, the thread's acting side (what a takeover resumes) and the
    # model.requested event commit as one.
    with flow.outbox.batch():
        if catalog is not None:
            event_publish(flow, "tool.catalog.resolved", catalog)
        pending = message_create(
            flow, role=stored_role(acting), content=None,
            status=MessageStatus.PENDING, side=acting, parent=parent,
            metadata={"flow_id": flow.flow_id, "prompt": prompt.name},
            acting_side=acting if parent is None else None,
        )  # fmt: skip
        timer = CallTimer(
            pending, partial(event_publish, flow), on_retry=partial(_retrying, flow),
            reasoning=not excluded,
        )  # fmt: skip
    _checkpoint(flow, pending)
    flow.idle()  # the connection goes back to the pool while the model thinks
    streamed = _Streamed(timer.on_chunk)
    try:
        result = generate_with_fallbacks(
            spec, request, stream=True, on_chunk=streamed.on_chunk,
            abort=flow.execution.abort_signal, base_delay_s=flow.runtime.retry_base_delay_s,
            provider_factory=flow.runtime.provider_factory,
        )  # fmt: skip
    except ProviderAborted:
        aborted = ProviderError("the call was aborted by a stop, cancel or terminate")
        with flow.outbox.batch():
            model_log(flow, prompt, spec, timer, None, error=aborted, aborted=True)
            _cut_short(flow, pending, streamed)
        raise FlowAborted from None
    except ProviderError as error:
        # The error stays in the call's log, the step's system message and runtime.error;
        # the row keeps only text the failed attempt had already shown, else it goes.
        with flow.outbox.batch():
            model_log(flow, prompt, spec, timer, None, error=error)
            if streamed.text:
                message_finish(
                    message=pending, fence=flow.fence, outbox=flow.outbox,
                    content=streamed.text, status=MessageStatus.FAILED,
                    metadata={"error": error.message, "error_code": error.code},
                )  # fmt: skip
            else:
                _discard(flow, pending)
        raise StepFailed(error) from error
    _retrying(flow, False)
    _checkpoint(flow, pending, streamed)
    response = result.response
    record.responded(result.spec, response)
    if result.spec.name != spec.name:
        event_publish(flow, "runtime.warning", {
            "code": "model_fallback",
            "message": f"model {spec.name!r} failed ({len(result.failed_attempts)} attempts); "
                       f"its fallback {result.spec.name!r} answered",
        })  # fmt: skip
    if response.usage.prompt_tokens:
        sent = len(request.messages)
        context_manager().observed(flow, prompt, sent, response.usage.prompt_tokens)
    content = _stop_tool_content(stop_side, response)
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
    with flow.outbox.batch():
        finished = message_finish(
            message=pending, fence=flow.fence, outbox=flow.outbox,
            content=proposed.get("content", content) or None,
            tool_calls=calls,
            reasoning_content="" if excluded else response.reasoning,
            metadata={**(proposed.get("metadata") or {}), "model": result.spec.name},
        )  # fmt: skip
        hooks.notify(HookName.AFTER_CREATE_MESSAGE, message_json(finished))
        model_log(
            flow, prompt, result.spec, timer, result.response, attempts=result.failed_attempts
        )
        spend_commit(flow, hold, result, finished)
    return finished, response


class _Streamed:
    """Relays a call's chunks to ``relay`` and keeps the text the current attempt streamed
    (a retry or fallback starts it again, as its consumers discard what came before)."""

    def __init__(self, relay: Callable[[ChainChunk], None]) -> None:
        self.relay = relay
        self.parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def on_chunk(self, chunk: ChainChunk) -> None:
        if isinstance(chunk, RetryStarted):
            self.parts.clear()
        elif isinstance(chunk, ContentDelta):
            self.parts.append(chunk.delta)
        self.relay(chunk)


def error_code(error: ProviderError) -> str:
    """A failed call's code; a chain whose every attempt had the same code has that one."""
    codes = {attempt.code for attempt in getattr(error, "attempts", ())}
    return codes.pop() if len(codes) == 1 else error.code


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


def _retrying(flow: Flow, retrying: bool = True) -> None:
    """A retry or fallback of the model call began (or the call answered)."""
    turn_retrying(
        thread=flow.thread, fence=flow.fence, turn=flow.turn, retrying=retrying,
        outbox=flow.outbox,
    )  # fmt: skip


def _checkpoint(
    flow: Flow, pending: Message | None = None, streamed: _Streamed | None = None
) -> None:
    """Raise FlowAborted when the abort signal fired; ``pending`` is cut short
    (:func:`_cut_short`)."""
    if flow.aborted:
        if pending is not None:
            _cut_short(flow, pending, streamed)
        raise FlowAborted


def _cut_short(flow: Flow, pending: Message, streamed: _Streamed | None) -> None:
    """An aborted call's row: the text already streamed stays, as it was shown (spec: an
    abort stops the stream, what was yielded remains valid), on a ``failed`` row marked
    ``interrupted``; a row nothing was streamed to is deleted."""
    if streamed is None or not streamed.text:
        _discard(flow, pending)
        return
    message_finish(
        message=pending, fence=flow.fence, outbox=flow.outbox, content=streamed.text,
        status=MessageStatus.FAILED,
        metadata={"interrupted": True, "error": "interrupted by a stop, cancel or terminate",
                  "error_code": "aborted"},
    )  # fmt: skip


def _discard(flow: Flow, pending: Message) -> None:
    message_delete(thread=flow.thread, message_id=pending.id, fence=flow.fence, outbox=flow.outbox)


def _last_seq(flow: Flow) -> int:
    last = (
        Message.objects.filter(thread_id=flow.thread.pk)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return last or 0
