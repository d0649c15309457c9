"""Messages of a thread (spec Threads §2): list, get, inject, update, delete.

``seq`` orders a thread's messages; it comes from the thread row's counter
(``Thread.message_seq``), incremented under that row's lock, so concurrent writers (engine,
API) never collide. A flow's writes of messages are one statement each: the thread row is
locked, its fence compared and the message written together. Every write publishes an event.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Field, QuerySet

from common.errors import LimitExceeded, NotFound, ValidationFailed
from common.time import now_us
from threads.events import Outbox, publish
from threads.models import Message, MessageRole, MessageStatus, Thread
from threads.services.fence import StaleFence, ThreadTerminated, fence_check, fence_read
from threads.services.message_shapes import message_answer

MAX_CONTENT_CHARS = 1_000_000
MAX_METADATA_BYTES = 64 * 1024
UNSET: Any = object()


@dataclass(frozen=True)
class MessagePage:
    messages: list[Message]
    total: int
    has_more: bool


def messages_of(
    *, thread: Thread, include_silent: bool = False, max_depth: int | None = None
) -> QuerySet[Message]:
    """The thread's messages, not ordered: silent ones only with ``include_silent``, none
    nested deeper than ``max_depth``."""
    rows = Message.objects.for_tenant(thread.tenant).filter(thread=thread)
    if not include_silent:
        rows = rows.filter(silent=False)
    if max_depth is not None:
        rows = rows.filter(depth__lte=max_depth)
    return rows


def message_list(
    *,
    thread: Thread,
    limit: int | None = None,
    offset: int = 0,
    order: Literal["asc", "desc"] = "desc",
    include_silent: bool = False,
    max_depth: int | None = None,
) -> MessagePage:
    """Messages in ``order`` (``desc``: newest first); ``offset`` skips from that end."""
    if (limit is not None and limit < 0) or offset < 0:
        raise ValidationFailed("limit and offset must not be negative", field="limit")
    if order not in ("asc", "desc"):
        raise ValidationFailed("order must be asc or desc", field="order")
    rows = messages_of(thread=thread, include_silent=include_silent, max_depth=max_depth)
    total = rows.count()
    rows = rows.order_by("seq" if order == "asc" else "-seq")[offset:]
    page = list(rows[:limit] if limit is not None else rows)
    return MessagePage(messages=page, total=total, has_more=offset + len(page) < total)


def message_get(*, thread: Thread, message_id: uuid.UUID | str) -> Message | None:
    try:
        return (
            Message.objects.for_tenant(thread.tenant).filter(thread=thread, id=message_id).first()
        )
    except (ValueError, ValidationError):
        return None


def check_content(content: str | None) -> None:
    if content is not None and len(content) > MAX_CONTENT_CHARS:
        raise LimitExceeded(
            f"content is {len(content)} characters; the limit is {MAX_CONTENT_CHARS}",
            field="content",
        )


def check_metadata(metadata: object) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise ValidationFailed("metadata must be an object", field="metadata")
    try:
        size = len(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValidationFailed(f"metadata must be JSON: {error}", field="metadata") from error
    if size > MAX_METADATA_BYTES:
        raise LimitExceeded(
            f"metadata is {size} bytes; the limit is {MAX_METADATA_BYTES}", field="metadata"
        )
    return dict(metadata)


@functools.cache
def _insert_plan() -> tuple[str, tuple[Field[Any, Any], ...]]:
    """The message insert and the fields whose values it takes, in order (built once).

    One statement: lock the thread row and take the next seq (only while ``fence`` is
    current, when one is given, and the thread is open, unless allowed), then insert the
    message with that seq. No row: nothing was written (see :func:`_refused`).

    The counter lives on the thread row because the statement's snapshot predates its wait
    for the row lock: a ``MAX(seq)`` read here could miss a concurrent writer's row, while
    the UPDATE re-reads the row it waited for (and re-checks the fence on it)."""
    fields = tuple(field for field in Message._meta.concrete_fields if field.attname != "seq")
    columns = ", ".join(field.column for field in fields)
    values = ", ".join(["%s"] * len(fields))
    # Column names come from the model; every value is a parameter.
    sql = (
        "WITH t AS (UPDATE threads_thread SET message_seq = message_seq + 1, "  # noqa: S608
        "last_activity_at = %s, acting_side = COALESCE(%s, acting_side) "
        "WHERE id = %s AND (%s::bigint IS NULL OR fence = %s) "
        "AND (%s OR terminated_at IS NULL) RETURNING message_seq) "
        f"INSERT INTO threads_message ({columns}, seq) SELECT {values}, t.message_seq FROM t "
        "RETURNING seq"
    )
    return sql, fields


def _refused(thread: Thread, fence: int | None) -> Exception:
    """Why a fenced write changed nothing: the fence is stale, the thread terminated, or gone."""
    state = fence_read(thread=thread)
    if state is None:
        return NotFound("the thread no longer exists")
    if fence is not None and state.fence != fence:
        return StaleFence.of(thread, fence, now=state.fence)
    return ThreadTerminated("the thread is terminated; it accepts no new messages")


def message_inject(
    *,
    thread: Thread,
    role: str,
    content: str | None,
    silent: bool = False,
    metadata: Mapping[str, Any] | None = None,
    attachments: Sequence[Mapping[str, Any]] = (),
    name: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str = "",
    tool_status: str = "",
    parent: Message | None = None,
    side: str = "",
    status: str = MessageStatus.COMPLETED,
    id: uuid.UUID | str | None = None,
    fence: int | None = None,
    allow_terminated: bool = False,
    acting_side: str | None = None,
    outbox: Outbox | None = None,
) -> Message:
    """Persist a message now (it does not start execution), in one statement, with its event.

    Conflict on a terminated thread; StaleFence when ``fence`` (a flow's write) is stale.
    ``id`` fixes the id (a queued message keeps the id it was announced with);
    ``allow_terminated`` lets terminate close a flow's unanswered tool calls;
    ``acting_side`` also sets the thread's (a flow's step, with the pending row it calls on);
    ``outbox`` is the running turn's (its ids go on the message and its event).
    """
    if role not in MessageRole.values:
        raise ValidationFailed(f"role must be one of {', '.join(MessageRole.values)}", field="role")
    check_content(content)
    created_at = now_us()
    message = Message(
        **({"id": id} if id is not None else {}),
        tenant_id=thread.tenant_id,
        thread=thread,
        created_at=created_at,
        updated_at=created_at,
        role=role,
        content=content,
        silent=silent,
        metadata=check_metadata(metadata or {}),
        attachments=list(attachments),
        name=name,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        tool_status=tool_status,
        parent=parent,
        depth=parent.depth + 1 if parent is not None else 0,
        side=side,
        status=status,
        turn_id=(outbox.turn_id or None) if outbox is not None else None,
    )
    sql, fields = _insert_plan()
    values = [
        field.get_db_prep_save(getattr(message, field.attname), connection) for field in fields
    ]
    # The message and its event commit together (joining the caller's transaction, if any).
    # A refused write changed nothing: the block ends cleanly and the error is raised after
    # it, so a caller's enclosing transaction stays usable.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            sql,
            [created_at, acting_side, thread.pk, fence, fence, allow_terminated, *values],
        )
        row = cursor.fetchone()
        if row is not None:
            if acting_side is not None:
                thread.acting_side = acting_side
            message.seq = row[0]
            message._state.adding = False
            publish(thread, "message.created", message_answer(message), outbox=outbox)
    if row is None:
        raise _refused(thread, fence)
    return message


# One statement, like the insert: lock the thread row while ``fence`` is current, then update.
_FINISH_SQL = (
    "WITH t AS (SELECT id FROM threads_thread WHERE id = %s AND fence = %s FOR NO KEY UPDATE) "
    "UPDATE threads_message SET content = %s, status = %s, tool_calls = %s, "
    "reasoning_content = %s, metadata = %s, updated_at = %s "
    "WHERE id = %s AND thread_id IN (SELECT id FROM t)"
)


def message_finish(
    *,
    message: Message,
    fence: int,
    content: str | None,
    status: str = MessageStatus.COMPLETED,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning_content: str = "",
    metadata: Mapping[str, Any] | None = None,
    outbox: Outbox | None = None,
) -> Message:
    """Fill a flow's pending row with the model's answer (or mark it failed), in one
    statement.

    ``metadata`` is merged. Raises StaleFence when ``fence`` is stale, NotFound when the row
    is gone.
    """
    check_content(content)
    message.content = content
    message.status = status
    message.tool_calls = tool_calls or None
    message.reasoning_content = reasoning_content
    if metadata:
        message.metadata = check_metadata({**message.metadata, **metadata})
    message.updated_at = now_us()
    calls_field = Message._meta.get_field("tool_calls")
    metadata_field = Message._meta.get_field("metadata")
    # The answer and its event commit together (joining the caller's transaction, if any).
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _FINISH_SQL,
            [message.thread_id, fence, content, status,
             calls_field.get_db_prep_save(message.tool_calls, connection),
             reasoning_content, metadata_field.get_db_prep_save(message.metadata, connection),
             message.updated_at, message.pk],
        )  # fmt: skip
        written = cursor.rowcount == 1
        if written:
            publish(message.thread, "message.updated", message_answer(message), outbox=outbox)
    if not written:  # raised outside the block, as in message_inject
        refused = _refused(message.thread, fence)
        if isinstance(refused, StaleFence):
            raise refused
        raise NotFound(f"message {message.pk} no longer exists")
    return message


@transaction.atomic
def message_update(
    *, thread: Thread, message_id: uuid.UUID | str, content: Any = UNSET, metadata: Any = UNSET
) -> Message:
    """Change content and/or merge metadata. NotFound for a message not in ``thread``."""
    message = message_get(thread=thread, message_id=message_id)
    if message is None:
        raise NotFound(f"no message {message_id} in this thread")
    if content is not UNSET:
        if content is not None and not isinstance(content, str):
            raise ValidationFailed("content must be a string or null", field="content")
        check_content(content)
        message.content = content
    if metadata is not UNSET:
        message.metadata = check_metadata({**message.metadata, **check_metadata(metadata)})
    message.updated_at = now_us()
    message.save(update_fields=["content", "metadata", "updated_at"])
    publish(thread, "message.updated", message_answer(message))
    return message


@transaction.atomic
def message_delete(
    *,
    thread: Thread,
    message_id: uuid.UUID | str,
    fence: int | None = None,
    outbox: Outbox | None = None,
) -> bool:
    """Delete a message; False when absent. StaleFence when ``fence`` (a flow's) is stale."""
    if fence is not None:
        fence_check(thread=thread, fence=fence)
    message = message_get(thread=thread, message_id=message_id)
    if message is None:
        return False
    message.delete()
    publish(thread, "message.deleted", {"id": str(message_id)}, outbox=outbox)
    return True
