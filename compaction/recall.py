"""The built-in ``recall`` tool, offered to a side whose context is compacted: it returns
archived originals, by seq, by range or by words, exactly as they are stored."""

from __future__ import annotations

import functools
from typing import Any

from agents.providers.base import ToolSpec
from agents.registry import ToolEntry
from common.errors import DomainError
from threads.models import Message, MessageStatus
from threads.runtime.definitions import ResolvedTool
from threads.state import ThreadState

RECALL = "recall"
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
# The result's messages at most, in characters of content (the first always comes whole).
MAX_RESULT_CHARS = 32_000

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 200,
                  "description": "Words to look for in earlier messages (case-insensitive)"},
        "seq": {"type": "integer", "minimum": 1, "description": "One message, by its seq"},
        "from_seq": {"type": "integer", "minimum": 1, "description": "A range's first seq"},
        "to_seq": {"type": "integer", "minimum": 1, "description": "A range's last seq"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                  "description": f"Messages at most (default {DEFAULT_LIMIT})"},
    },
    "additionalProperties": False,
}  # fmt: skip
DESCRIPTION = (
    "Read earlier messages of this conversation that were summarized or cleared to keep your "
    "context small. Give a seq (as a summary or a cleared result names it), a range "
    "(from_seq, to_seq) or words to look for (query); the originals come back as stored."
)


def recall(state: ThreadState, arguments: dict[str, Any]) -> dict[str, Any]:
    rows = Message.objects.filter(
        thread_id=state.thread.pk, depth=0, status=MessageStatus.COMPLETED
    ).exclude(content__isnull=True)
    seq, query = arguments.get("seq"), arguments.get("query")
    first, last = arguments.get("from_seq"), arguments.get("to_seq")
    if seq is None and query is None and first is None and last is None:
        raise DomainError("give a seq, a range (from_seq, to_seq) or a query")
    if seq is not None:
        rows = rows.filter(seq=seq)
    if first is not None:
        rows = rows.filter(seq__gte=first)
    if last is not None:
        rows = rows.filter(seq__lte=last)
    if query is not None:
        rows = rows.filter(content__icontains=query)
    limit = int(arguments.get("limit") or DEFAULT_LIMIT)
    found = list(
        rows.order_by("seq").values("seq", "role", "name", "content", "created_at")[: limit + 1]
    )
    more = len(found) > limit
    messages: list[dict[str, Any]] = []
    size = 0
    for row in found[:limit]:
        size += len(row["content"] or "")
        if messages and size > MAX_RESULT_CHARS:
            more = True
            break
        messages.append({key: value for key, value in row.items() if value not in ("", None)})
    return {"messages": messages, "more": more}


@functools.cache
def recall_tool() -> ResolvedTool:
    entry = ToolEntry(
        name=RECALL, description=DESCRIPTION, args_schema=SCHEMA, pydantic_model=None,
        function=recall, module=__name__,
    )  # fmt: skip
    return ResolvedTool(
        name=RECALL, kind="function", spec=ToolSpec(name=RECALL, description=DESCRIPTION,
        parameters=SCHEMA), entry=entry, parameters=SCHEMA,
    )  # fmt: skip
