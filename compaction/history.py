"""The history a step sees with its side's active overlay applied, read in one statement.

The statement returns the thread's top-level, non-pending messages after ``after_seq``,
except those the active compaction summarized (``from_seq``..``to_seq``); the first user
message and the last one stay whatever the overlay covers. Tool results up to
``cleared_through`` longer than ``cleared_over`` characters come as a stub naming their
seq (PostgreSQL cuts them: the long text is not even read out). The overlay itself comes
as one more row, the archive marker: a system message with ``metadata.status_kind``
``compaction``, placed where the summarized range began.

A thread without compactions costs the same one statement as the plain history read, so a
step runs as many statements at 10 messages as at 10,000.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from threads.models import MessageStatus, Thread
from threads.services.message_shapes import StoredMessage, stored_json

MARKER_KIND = "compaction"
STUB_KEEP_CHARS = 200

_FIELDS = StoredMessage._fields
_MESSAGE_COLUMNS = [f"m.{name}" for name in _FIELDS]
_MESSAGE_COLUMNS[_FIELDS.index("content")] = (
    "CASE WHEN m.role = 'tool' AND m.seq <= (SELECT cleared_through FROM c) "  # noqa: S608
    "AND length(m.content) > (SELECT cleared_over FROM c) "
    "THEN '[Tool result cleared to keep the context small: ' || length(m.content) "
    "|| ' characters, in the file /.context/tool-results/' || m.seq || '.txt; or call recall "
    "with seq ' || m.seq || '] ' "
    f"|| left(m.content, {STUB_KEEP_CHARS}) || '…' ELSE m.content END AS content"
)
_MARKER_COLUMNS = (
    "c.id", "c.from_seq", "'system'", "c.summary_text", "''", "NULL::jsonb", "''", "''",
    "c.created_at", "NULL::uuid", "0", "true", "'completed'", "c.side",
    "jsonb_build_object('status_kind', 'compaction', 'compaction_id', c.id, "
    "'from_seq', c.from_seq, 'to_seq', c.to_seq, 'tier', c.tier)",
    "'[]'::jsonb",
)  # fmt: skip

_MARKER_SELECT = ", ".join(
    f"{column} AS {name}" for column, name in zip(_MARKER_COLUMNS, _FIELDS, strict=True)
)
_MESSAGES = (
    f"SELECT {', '.join(_MESSAGE_COLUMNS)}, 1 AS o FROM threads_message m "  # noqa: S608
    "WHERE m.thread_id = %(thread)s AND m.depth = 0 AND m.status <> %(pending)s "
    "AND m.seq > %(after)s AND "
)

# Literal SQL because every step runs it; every value is a parameter. Each part is a range
# (or a point) of the messages' (thread, seq) index, so the statement reads only the rows
# it returns, however long the thread: the messages after the overlay's range (all of them
# without an overlay), those before it, the first and the last user message when the range
# holds them, and the marker, which sorts before a message of the seq it shares (``o``).
HISTORY_SQL = (
    "WITH c AS (SELECT * FROM compaction_compaction "  # noqa: S608
    "WHERE thread_id = %(thread)s AND side = %(side)s AND status = 'active'), "
    "u AS (SELECT seq FROM threads_message WHERE thread_id = %(thread)s AND depth = 0 "
    "AND role = 'user' AND status <> %(pending)s ORDER BY seq DESC LIMIT 1) "
    f"SELECT {', '.join(_FIELDS)} FROM ("
    f"{_MESSAGES} m.seq > COALESCE((SELECT to_seq FROM c), 0) "
    f"UNION ALL {_MESSAGES} m.seq < (SELECT from_seq FROM c) "
    f"UNION ALL {_MESSAGES} m.seq = (SELECT first_user_seq FROM c) "
    "AND m.seq BETWEEN (SELECT from_seq FROM c) AND (SELECT to_seq FROM c) "
    f"UNION ALL {_MESSAGES} m.seq = (SELECT seq FROM u) "
    "AND m.seq <> (SELECT first_user_seq FROM c) "
    "AND m.seq BETWEEN (SELECT from_seq FROM c) AND (SELECT to_seq FROM c) "
    f"UNION ALL SELECT {_MARKER_SELECT}, 0 AS o "
    "FROM c WHERE c.to_seq > 0 AND c.to_seq > %(after)s"
    ") h ORDER BY seq, o"
)


def overlay_history(*, thread: Thread, side: str, after_seq: int) -> list[dict[str, Any]]:
    return stored_json(
        HISTORY_SQL,
        {"thread": thread.pk, "side": side, "pending": MessageStatus.PENDING, "after": after_seq},
    )


def is_marker(message: Mapping[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, dict) and metadata.get("status_kind") == MARKER_KIND
