"""The flow's writes: messages through ``before_create_message`` / ``after_create_message``,
events on the turn's outbox and the ``llm`` and ``tool`` log rows. Every write carries the
flow's fence."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.documents import PromptDoc
from agents.providers.base import ModelSpec, ProviderError, ProviderResponse, ToolCall
from agents.providers.chain import FailedAttempt
from agents.registry import HookName, ToolResult
from common.errors import Conflict
from threads.models import Message
from threads.runtime.engine.spend import spend_tool
from threads.runtime.hooks import Hooks
from threads.runtime.records import CallTimer, model_log_data, tool_log_data
from threads.runtime.tool_calls import FlowAborted
from threads.services import logs
from threads.services.message_shapes import message_json
from threads.services.messages import message_inject

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def message_create(flow: Flow, *, hooks: Hooks | None = None, **fields: Any) -> Message:
    """A fenced insert, through ``before_create_message`` / ``after_create_message``.

    Raises FlowAborted when the thread was terminated under the flow (a tool called
    ``state.terminate()``, or a terminate arrived while a tool ran)."""
    fields.setdefault("metadata", {"flow_id": flow.flow_id})
    if hooks is not None and hooks.has(HookName.BEFORE_CREATE_MESSAGE):
        proposed = hooks.transform(HookName.BEFORE_CREATE_MESSAGE, dict(fields))
        if isinstance(proposed, Mapping):
            for key in ("content", "metadata", "silent"):
                if key in proposed:
                    fields[key] = proposed[key]
    try:
        message = message_inject(thread=flow.thread, fence=flow.fence, outbox=flow.outbox, **fields)
    except Conflict as error:
        if error.code != "terminated":
            raise
        raise FlowAborted from error
    if flow.flow_start_seq is None:
        flow.flow_start_seq = message.seq - 1
    if hooks is not None:
        hooks.notify(HookName.AFTER_CREATE_MESSAGE, message_json(message))
    return message


def stored_role(side: str) -> str:
    """Side A's messages are stored as ``assistant``, side B's as ``user`` (spec §0.3)."""
    return "assistant" if side == "a" else "user"


def event_publish(flow: Flow, type: str, payload: Mapping[str, Any]) -> None:
    flow.outbox.publish(type, {**payload, "flow_id": flow.flow_id})


def model_log(
    flow: Flow,
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
    data.update(_log_context(flow), prompt=prompt.name)
    if aborted:
        data["aborted"] = True
    flow.usage.add(data)
    logs.log_create(
        thread=flow.thread, kind="llm", data=data, message=timer.message, fence=flow.fence,
        outbox=flow.outbox,
    )  # fmt: skip


def tool_log(
    flow: Flow,
    call: ToolCall,
    result: ToolResult,
    stored: Message | None,
    duration_ms: float,
    *,
    kind: str | None,
    log_id: uuid.UUID | None = None,
) -> None:
    data = {**_log_context(flow), **tool_log_data(call, result, duration_ms, kind=kind)}
    logs.log_create(
        thread=flow.thread, kind="tool", data=data, message=stored, fence=flow.fence,
        outbox=flow.outbox, id=log_id,
    )  # fmt: skip
    spend_tool(flow, call.id, call.name)


def _log_context(flow: Flow) -> dict[str, Any]:
    execution = flow.execution
    return {"flow_id": flow.flow_id, "turn_id": str(flow.turn.pk), "fence": flow.fence,
            "step": execution.step_count,
            "side": execution.current_side}  # fmt: skip
