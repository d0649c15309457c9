"""The lifecycle tools that stand for resumable subagents (spec DIGEST §6.3):
``subagent_create``, ``subagent_message`` and ``subagents``, as a prompt offers them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.providers.base import ToolSpec
from agents.providers.schemas import empty_object_schema
from threads.models import SubagentLink, Thread
from threads.runtime.definitions import ResolvedTool

MAX_LABEL = 120

CREATE, MESSAGE, LIST = "subagent_create", "subagent_message", "subagents"
_PATHS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Paths of this thread's files to copy to the subagent ([] for none)",
}
_MESSAGE_PROPERTIES = {
    "referenceId": {"type": "string", "description": "The subagent's reference"},
    "message": {"type": "string", "description": "The message"},
    "attachments": _PATHS,
}


def is_resumable(tool: ResolvedTool) -> bool:
    return tool.kind == "subagent" and tool.config is not None and bool(tool.config.resumable)


def lifecycle_tools(thread: Thread, tools: Mapping[str, ResolvedTool]) -> dict[str, ResolvedTool]:
    """``tools`` with each resumable relationship replaced by the lifecycle tools (DIGEST
    §6.3): ``subagent_create`` while the prompt has one, ``subagent_message`` while a live
    resumable child exists, ``subagents`` whenever the prompt declares subagents."""
    if not any(tool.kind == "subagent" for tool in tools.values()):
        return dict(tools)
    resumable = tuple(tool for tool in tools.values() if is_resumable(tool))
    offered = {name: tool for name, tool in tools.items() if tool not in resumable}
    if resumable:
        offered[CREATE] = _create_tool(resumable)
        live = SubagentLink.objects.filter(
            thread_id=thread.pk, terminated_at__isnull=True, resumable=True
        )
        if live.exists():
            offered[MESSAGE] = _lifecycle(
                MESSAGE,
                "Send a message to one of your subagents (queued while it is busy). Its reply "
                "arrives as a message when its session ends.",
                _MESSAGE_PROPERTIES, list(_MESSAGE_PROPERTIES), resumable,
            )  # fmt: skip
    offered[LIST] = _lifecycle(
        LIST, "List your subagents: reference, name, status and description.", {}, [], resumable
    )
    return offered


def _create_tool(relationships: tuple[ResolvedTool, ...]) -> ResolvedTool:
    listed = "\n".join(f"- {tool.name}: {tool.spec.description}" for tool in relationships)
    properties = {
        "agent": {"type": "string", "enum": [tool.name for tool in relationships],
                  "description": "Which kind of subagent to create"},
        "message": {"type": "string", "description": "The subagent's initial instruction"},
        "attachments": _PATHS,
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_LABEL,
                 "description": "A short label for this instance"},
        "arguments": {"type": "object", "description": "Initial arguments, as the agent's "
                      "schema requires them (leave out when it takes none)"},
    }  # fmt: skip
    return _lifecycle(
        CREATE, f"Create a subagent that works on its own thread. Kinds:\n{listed}",
        properties, ["agent", "message", "attachments", "name"], relationships,
    )  # fmt: skip


def _lifecycle(
    name: str,
    description: str,
    properties: dict[str, Any],
    required: list[str],
    relationships: tuple[ResolvedTool, ...],
) -> ResolvedTool:
    schema = {**empty_object_schema(), "properties": properties, "required": required}
    if name == CREATE:  # "arguments" is checked against the chosen agent's own schema
        schema["properties"]["arguments"]["additionalProperties"] = True
    spec = ToolSpec(name, description, schema)
    return ResolvedTool(name, "lifecycle", spec, parameters=schema, relationships=relationships)


def direct_call_guidance(name: str, tools: Mapping[str, ResolvedTool]) -> str | None:
    """What a model that called a resumable relationship by name is told instead (None: the
    name is none of the prompt's resumable relationships)."""
    create = tools.get(CREATE)
    if create is None or name not in {tool.name for tool in create.relationships}:
        return None
    return resumable_guidance(name)


def resumable_guidance(name: str) -> str:
    return (
        f"{name!r} is a resumable subagent and cannot be called directly: create an instance "
        f"with {CREATE} (agent={name!r}), then talk to it with {MESSAGE}"
    )
