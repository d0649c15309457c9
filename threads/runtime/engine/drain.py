"""Draining the turn's inputs: their messages are stored (FIFO), their queued tools run,
and the first of them says which side acts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.providers.base import ToolCall
from threads.models import Turn, TurnKind
from threads.runtime.engine.agent import prompt_hooks, side_prompt, tool_runner
from threads.runtime.engine.base import Side
from threads.runtime.engine.bell import inputs_rung
from threads.runtime.engine.subagents import immediate_run
from threads.runtime.engine.writes import message_create
from threads.runtime.tool_calls import stored_calls
from threads.services.status import turn_inputs_take

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def inputs_drain(flow: Flow) -> Side | None:
    """Persist queued messages (FIFO), run queued tools; returns the side the first
    drained item calls on (user/system -> a, assistant -> b), or None. Reads the inbox only
    when something can wait there: the turn's own input, what its flow queued for itself
    (:attr:`Flow.inputs_waiting`), or inputs that joined it from outside (the bell rang)."""
    if not flow.inputs_waiting and not inputs_rung(flow.thread.pk):
        return None
    flow.inputs_waiting = False  # what this drain's hooks and tools queue is taken next time
    # Taking items and storing their messages commit together: a worker that dies in
    # between leaves the items in the inbox, never consumed without their messages.
    with flow.outbox.batch():
        works = turn_inputs_take(
            thread=flow.thread, fence=flow.fence, turn=flow.turn, outbox=flow.outbox
        )
        messages = [work.payload for work in works if work.kind == TurnKind.MESSAGE]
        hooks = prompt_hooks(flow, side_prompt(flow, "a")) if messages else None
        for payload in messages:
            role = payload["role"]
            message_create(
                flow,
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
        _queued_tools_run(flow, tools)
    if any(work.kind == TurnKind.SPAWN for work in works):
        immediate_run(flow)
    return first_side(works)


def _queued_tools_run(flow: Flow, tools: Sequence[tuple[str, dict[str, Any], str]]) -> None:
    """Queued tools run as a synthetic call of side A (runtime-forced: any tool the tenant
    has), so the model sees call and result paired."""
    prompt = side_prompt(flow, "a")
    calls = tuple(ToolCall(id=call_id, name=name, arguments=args) for name, args, call_id in tools)
    issuer = message_create(
        flow, role="assistant", content=None, tool_calls=stored_calls(calls), side="a",
        metadata={"flow_id": flow.flow_id, "queued_tools": True},
    )  # fmt: skip
    runner = tool_runner(flow, prompt, "a", parent=None)
    for call in calls:
        runner.run_one(call, issuer=issuer, forced=flow.defs.resolve_any(call.name))


def first_side(works: Sequence[Turn]) -> Side | None:
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
