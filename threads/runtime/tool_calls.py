"""What a tool call is and becomes, outside the runner: its outcome (run now, or stored
before a pause), the exceptions that stop a flow or pause it for a person from inside a
call, the shapes a call takes (stored, as hooks see it, as message text), calling a
registry tool, and what a subprompt returns."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.documents import ToolConfig
from agents.permissions import Rule
from agents.providers.base import ToolCall
from agents.registry import ToolEntry, ToolResult, tool_result_from
from threads.models import Message

if TYPE_CHECKING:
    from threads.state import ThreadState

SUCCESS_WITHOUT_RESULT = "Tool executed successfully"


class FlowAborted(Exception):
    """The flow's abort signal fired (a user stop or terminate); raised at a checkpoint."""


@dataclass
class InFlight:
    """The tool call running now: what ``state.request_input`` pauses on (``pausable``:
    whether it may wait for a person), and how many inputs it asked for so far."""

    call: ToolCall
    issuer: Message
    pausable: bool
    inputs_asked: int = 0


class ActionNeeded(BaseException):
    """A tool call waits for a person (an ``ask`` rule, or ``state.request_input``): the
    flow pauses its turn on an action (:mod:`threads.services.actions`) and a worker
    resumes it once answered.

    A BaseException, as SystemExit is: control flow that user code (a tool's or a hook's
    ``except Exception``) must not swallow; only the flow catches it."""

    def __init__(
        self, *, kind: str, call: ToolCall, issuer: Message, rule: Rule | None = None,
        schema: Mapping[str, Any] | None = None, prompt: str = "", name: str | None = None,
        arguments: Mapping[str, Any] | None = None, resume: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(f"tool call {call.id} of {call.name!r} waits for a person ({kind})")
        self.kind, self.call, self.issuer = kind, call, issuer
        self.rule, self.schema, self.prompt = rule, schema, prompt
        # What the person decides on, when not the call itself (a code program's call).
        self.name = name if name is not None else call.name
        self.arguments = dict(arguments if arguments is not None else call.arguments)
        self.resume = dict(resume or {})  # what the resuming flow needs besides the step


@dataclass(frozen=True)
class ToolOutcome:
    call: ToolCall
    result: ToolResult
    stored: Message | None  # None: an after_tool_call_* hook said "store nothing"


def stored_outcome(call: ToolCall, stored: Message) -> ToolOutcome:
    """The outcome of a call that ran before its turn paused, from its stored result."""
    content = stored.content or ""
    if stored.tool_status == "success":
        return ToolOutcome(call, ToolResult.success(content), stored)
    error = content.removeprefix(failure_text(""))
    return ToolOutcome(call, ToolResult.failure(error, code=stored.metadata.get("error_code")),
                       stored)  # fmt: skip


def call_json(call: ToolCall) -> dict[str, Any]:
    """A tool call as hooks see it."""
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}


def stored_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Tool calls in the stored (OpenAI) shape: arguments as a JSON string."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in calls
    ]


def call_function_tool(
    entry: ToolEntry, state: ThreadState, arguments: Mapping[str, Any]
) -> ToolResult:
    """Call a registry tool with validated arguments. Raises what the tool raises."""
    parsed = entry.parse_args(dict(arguments))
    value = entry.function(state, parsed) if entry.takes_args else entry.function(state)
    return tool_result_from(value)


def as_text(value: object) -> str:
    """A tool argument as message text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def failure_text(error: str) -> str:
    return f"Failed to execute tool: {error}"


def subprompt_result(
    config: ToolConfig | None, content: str, outcomes: Sequence[ToolOutcome]
) -> ToolResult:
    """What a subprompt returns: its text, its tools' results and its errors, per the
    ``include_*`` flags (all default true). An error when any of its tool calls failed."""
    include_text = config is None or config.include_text_response is not False
    include_calls = config is None or config.include_tool_calls is not False
    include_errors = config is None or config.include_errors is not False
    parts: list[str] = []
    if include_text and content:
        parts.append(content)
    failed = False
    for outcome in outcomes:
        if outcome.result.status == "success":
            if include_calls:
                parts.append(
                    f"{outcome.call.name}: {outcome.result.result or SUCCESS_WITHOUT_RESULT}"
                )
        else:
            failed = True
            if include_errors:
                parts.append(f"Error: {outcome.call.name}: {outcome.result.error}")
    text = "\n\n".join(parts)
    if failed:
        return ToolResult.failure(text or "a tool of the subprompt failed")
    return ToolResult.success(text)
