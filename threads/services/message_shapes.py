"""How a message reads: the spec's ThreadState shape that hooks, tools and the engine see
(:func:`message_json`), the API's shape with structured tool calls (:func:`message_answer`),
and the flow's history read, one statement without model instances (:func:`history_json`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypedDict

from django.db import connection

from threads.models import Message, MessageStatus, Thread


class StoredMessage(NamedTuple):
    """A message row as the history read returns it: the fields :func:`message_json` reads."""

    id: uuid.UUID
    seq: int
    role: str
    content: str | None
    name: str
    tool_calls: Any
    tool_call_id: str
    tool_status: str
    created_at: int
    parent_id: uuid.UUID | None
    depth: int
    silent: bool
    status: str
    side: str
    metadata: Any
    attachments: Any


class ToolCallJson(TypedDict):
    """A tool call as the API answers it: ``arguments`` is the object the tool was called
    with (the shape of the ``tool.started`` event)."""

    id: str
    name: str
    arguments: dict[str, Any]


def message_json(message: Message | StoredMessage) -> dict[str, Any]:
    """A message in the spec's ThreadState shape (Threads §2.1): ``tool_calls`` is the JSON
    string of the stored OpenAI-shaped calls. Hooks, tools and the engine see this shape;
    the API answers :func:`message_answer`'s."""
    stored = message.tool_calls
    return _message_fields(message, json.dumps(stored) if stored is not None else None)


def message_answer(message: Message | StoredMessage) -> dict[str, Any]:
    """A message as the API answers it (REST, turn waits, message events, exports, the MCP
    server): :func:`message_json`'s shape with ``tool_calls`` a list of :class:`ToolCallJson`
    (None when the message made no calls)."""
    stored = message.tool_calls
    return _message_fields(message, tool_calls_json(stored) if stored is not None else None)


def tool_calls_json(stored: str | Sequence[Any] | None) -> list[ToolCallJson]:
    """The calls of a stored message's ``tool_calls``: the JSON string or the parsed list.

    Entries are ``{id, type: 'function', function: {name, arguments}}`` (the flat ``{id, name,
    arguments}`` is accepted too); ``arguments`` is a JSON string or an object. Arguments that
    do not parse to an object become ``{}``; entries without an id or a name, and a string
    that is not a JSON list, are skipped rather than raised on: whatever a past step stored,
    its history stays readable (and sendable to a model).
    """
    if stored is None:
        return []
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return []
        if not isinstance(stored, list):
            return []
    calls: list[ToolCallJson] = []
    for entry in stored:
        if not isinstance(entry, Mapping):
            continue
        function = entry.get("function")
        spec = function if isinstance(function, Mapping) else entry
        call_id, name = entry.get("id"), spec.get("name")
        if not call_id or not name:
            continue
        calls.append(
            {"id": str(call_id), "name": str(name), "arguments": _arguments(spec.get("arguments"))}
        )
    return calls


def _arguments(raw: object) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return dict(raw) if isinstance(raw, Mapping) else {}


def _message_fields(message: Message | StoredMessage, tool_calls: Any) -> dict[str, Any]:
    return {
        "id": str(message.id),
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "name": message.name or None,
        "tool_calls": tool_calls,
        "tool_call_id": message.tool_call_id or None,
        "tool_status": message.tool_status or None,
        "created_at": message.created_at,
        "parent_id": str(message.parent_id) if message.parent_id else None,
        "depth": message.depth,
        "silent": message.silent,
        "status": message.status,
        "side": message.side or None,
        "metadata": message.metadata,
        "attachments": message.attachments,
    }


# A flow's history read (the top level, pending rows left out); literal SQL because every
# step runs it.
_HISTORY_SQL = (
    f"SELECT {', '.join(StoredMessage._fields)} FROM threads_message "  # noqa: S608
    "WHERE thread_id = %s AND depth = 0 AND status <> %s AND seq > %s ORDER BY seq"
)


def history_json(*, thread: Thread, after_seq: int = 0) -> list[dict[str, Any]]:
    """The thread's top-level, non-pending messages after ``after_seq``, in order, as
    :func:`message_json` shapes them (read in one statement, without model instances)."""
    return stored_json(_HISTORY_SQL, [thread.pk, MessageStatus.PENDING, after_seq])


def stored_json(
    sql: str,
    params: Sequence[Any] | Mapping[str, Any],
    *,
    shape: Callable[[StoredMessage], dict[str, Any]] = message_json,
) -> list[dict[str, Any]]:
    """The messages a statement selecting :class:`StoredMessage`'s columns finds, as
    ``shape`` (:func:`message_json`, or :func:`message_answer` for an answer) shapes them."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    stored = [StoredMessage(*row) for row in rows]
    return [
        shape(
            message._replace(
                tool_calls=jsonb_value(message.tool_calls),
                metadata=jsonb_value(message.metadata),
                attachments=jsonb_value(message.attachments),
            )
        )
        for message in stored
    ]


def jsonb_value(stored: Any) -> Any:
    """A jsonb column's value as a raw cursor returns it (Django's connections hand over
    the text; the ORM decodes it, literal SQL must)."""
    return json.loads(stored) if isinstance(stored, str) else stored
