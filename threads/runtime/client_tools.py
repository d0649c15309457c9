"""Client tools: tools a turn's submitter offers for that turn (a frontend's own tools),
which run where the client is, not here.

A message turn carries them in its input (``payload.client_tools``: ``[{name,
description, parameters}]``, given to ``message_queue``). They join the tools of the
turn's model steps (the prompt's own tool of the same name wins); a subprompt's calls,
which cannot pause, do not see them. A call of one pauses the turn on an ``input`` action
(``state.request_input``) whose answer is the call's result, ``{"content", "error"?}``
(:data:`RESULT_SCHEMA`); answered, the call is run again and returns it (a failure when
``error`` is given), and the turn carries on. The engine does not know who the client is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from agents.providers.base import ToolSpec
from agents.providers.schemas import empty_object_schema
from agents.registry import ToolResult
from threads.models import Turn
from threads.runtime.definitions import ResolvedTool

CLIENT_TOOLS_KEY: Final = "client_tools"
RESULT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "description": "the call's result"},
        "error": {"type": "string", "description": "set when the call failed"},
    },
    "required": ["content"],
    "additionalProperties": False,
}


def client_tools_json(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Client tools as a turn's input keeps them: name, description and parameters (an
    object schema; none: no arguments). The caller has checked names and schemas."""
    return [
        {
            "name": str(tool["name"]),
            "description": str(tool.get("description") or ""),
            "parameters": dict(tool.get("parameters") or empty_object_schema()),
        }
        for tool in tools
    ]


def client_tools_of(turn: Turn) -> dict[str, ResolvedTool]:
    """The client tools ``turn`` was submitted with, by name."""
    listed = (turn.payload or {}).get(CLIENT_TOOLS_KEY)
    tools: dict[str, ResolvedTool] = {}
    for item in listed if isinstance(listed, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        parameters = item.get("parameters")
        schema = dict(parameters) if isinstance(parameters, Mapping) else empty_object_schema()
        spec = ToolSpec(item["name"], str(item.get("description") or ""), schema)
        tools[item["name"]] = ResolvedTool(item["name"], "client", spec, parameters=schema)
    return tools


def client_tool_answer(content: str, error: str | None = None) -> dict[str, Any]:
    """The answer (an input action's ``data``) that gives a client tool's call its result."""
    return {"content": content} if error is None else {"content": content, "error": error}


def client_tool_result(answer: Mapping[str, Any]) -> ToolResult:
    """The call's result from the client's answer."""
    error = answer.get("error")
    if isinstance(error, str):
        return ToolResult.failure(error or str(answer.get("content") or "the client tool failed"))
    return ToolResult.success(str(answer.get("content") or ""))
