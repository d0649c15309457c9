"""Storing a tool call's result as its tool message (spec runtime §5.2).

Stored content is the result (``Tool executed successfully`` when empty) or
``Failed to execute tool: <error>``, followed by one ``Attachment path for "<name>": <path>``
line per attachment (not for session tools, whose attachments ride on the message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.providers.base import ToolCall
from agents.registry import ToolResult
from common.errors import DomainError
from threads.models import Message
from threads.runtime.tool_calls import SUCCESS_WITHOUT_RESULT, as_text, failure_text
from threads.services.attachments import attachment_at, attachments_store

if TYPE_CHECKING:
    from threads.runtime.tools import ToolRunner


def session_mapping(
    runner: ToolRunner, call: ToolCall, result: ToolResult
) -> tuple[ToolResult, list[dict[str, Any]] | None]:
    """Session bindings store ``message_property`` as the content and attach the files
    named by ``attachments_property`` (which must exist, else the call is an error)."""
    binding = runner.bindings.get(call.name)
    if binding is None or result.status != "success":
        return result, None
    attachments: list[dict[str, Any]] = []
    if binding.attachments_property:
        paths = call.arguments.get(binding.attachments_property) or []
        paths = [paths] if isinstance(paths, str) else paths
        try:
            for path in paths:
                if not isinstance(path, str) or not path.startswith("/attachments/"):
                    raise DomainError(f"{path!r} is not an /attachments/ path")
                attachments.append(attachment_at(thread=runner.flow.thread, path=path))
        except DomainError as error:
            return ToolResult.failure(f"{binding.attachments_property}: {error.message}"), None
    if binding.message_property:
        value = call.arguments.get(binding.message_property)
        if value is not None:
            result = ToolResult.success(as_text(value), attachments=result.attachments)
    return result, attachments


def tool_message_store(
    runner: ToolRunner,
    call: ToolCall,
    result: ToolResult,
    session_attachments: list[dict[str, Any]] | None,
    *,
    verbatim: bool = False,
) -> Message:
    """Store the tool message. ``verbatim`` stores an error as is (the spec's
    ``Execution stopped by user`` results carry no ``Failed to execute tool:`` prefix)."""
    content: str
    if verbatim:
        content = result.error or ""
    elif result.status == "success":
        content = result.result or SUCCESS_WITHOUT_RESULT
    else:
        content = failure_text(result.error or "unknown error")
    refs: list[dict[str, Any]] = list(session_attachments or [])
    if result.attachments:
        try:
            stored = attachments_store(thread=runner.flow.thread, items=result.attachments)
        except DomainError as error:
            content = failure_text(f"its attachments could not be stored: {error.message}")
            result = ToolResult.failure(error.message)
        else:
            refs.extend(stored)
            if session_attachments is None:
                content += "".join(
                    f'\nAttachment path for "{ref["name"]}": {ref["path"]}' for ref in stored
                )
    metadata: dict[str, Any] = {"flow_id": runner.flow.flow_id}
    if result.error_code:
        metadata["error_code"] = result.error_code
    if result.error_data is not None:
        metadata["error_data"] = result.error_data
    if result.subagent_id is not None:
        metadata["subagent_id"] = result.subagent_id
    return runner.flow.create_message(
        role="tool",
        content=content,
        name=call.name,
        tool_call_id=call.id,
        tool_status=result.status,
        side=runner.side,
        parent=runner.parent,
        attachments=refs,
        metadata=metadata,
        hooks=runner.hooks,
    )
