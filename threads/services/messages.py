"""Messages of a thread (spec Threads §2): list, get, inject, update, delete.

``seq`` orders a thread's messages; it is allocated under a lock on the thread row
so concurrent writers (engine, API) never collide. Every write publishes an event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.time import now_us
from threads.events import publish
from threads.models import Message, MessageRole, MessageStatus, Thread

MAX_CONTENT_CHARS = 1_000_000
MAX_METADATA_BYTES = 64 * 1024
UNSET: Any = object()


@dataclass(frozen=True)
class MessagePage:
    messages: list[Message]
    total: int
    has_more: bool


def message_json(message: Message) -> dict[str, Any]:
    """A message in the spec's shape (Threads §2.1); ``tool_calls`` is a JSON string."""
    return {
        "id": str(message.id),
        "role": message.role,
        "content": message.content,
        "name": message.name or None,
        "tool_calls": json.dumps(message.tool_calls) if message.tool_calls is not None else None,
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
    rows = Message.objects.for_tenant(thread.tenant).filter(thread=thread)
    if not include_silent:
        rows = rows.filter(silent=False)
    if max_depth is not None:
        rows = rows.filter(depth__lte=max_depth)
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


def _check_content(content: str | None) -> None:
    if content is not None and len(content) > MAX_CONTENT_CHARS:
        raise LimitExceeded(
            f"content is {len(content)} characters; the limit is {MAX_CONTENT_CHARS}",
            field="content",
        )


def _check_metadata(metadata: object) -> dict[str, Any]:
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


@transaction.atomic
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
) -> Message:
    """Persist a message now (it does not start execution). Conflict on a terminated thread."""
    if role not in MessageRole.values:
        raise ValidationFailed(f"role must be one of {', '.join(MessageRole.values)}", field="role")
    _check_content(content)
    locked = Thread.objects.select_for_update(no_key=True).get(pk=thread.pk)
    if locked.terminated_at is not None:
        raise Conflict("the thread is terminated; it accepts no new messages", code="terminated")
    last = Message.objects.filter(thread=locked).aggregate(last=Max("seq"))["last"] or 0
    message = Message.objects.create(
        tenant=thread.tenant,
        thread=locked,
        seq=last + 1,
        role=role,
        content=content,
        silent=silent,
        metadata=_check_metadata(metadata or {}),
        attachments=list(attachments),
        name=name,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        tool_status=tool_status,
        parent=parent,
        depth=parent.depth + 1 if parent is not None else 0,
        side=side,
        status=status,
    )
    Thread.objects.filter(pk=thread.pk).update(last_activity_at=message.created_at)
    transaction.on_commit(lambda: publish(thread, "message.created", message_json(message)))
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
        _check_content(content)
        message.content = content
    if metadata is not UNSET:
        message.metadata = _check_metadata({**message.metadata, **_check_metadata(metadata)})
    message.updated_at = now_us()
    message.save(update_fields=["content", "metadata", "updated_at"])
    transaction.on_commit(lambda: publish(thread, "message.updated", message_json(message)))
    return message


@transaction.atomic
def message_delete(*, thread: Thread, message_id: uuid.UUID | str) -> bool:
    message = message_get(thread=thread, message_id=message_id)
    if message is None:
        return False
    message.delete()
    transaction.on_commit(lambda: publish(thread, "message.deleted", {"id": str(message_id)}))
    return True
