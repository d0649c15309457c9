"""Logs of a thread: one row per model call or tool call (the engine writes them)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from django.core.exceptions import ValidationError

from common.errors import ValidationFailed
from threads.models import Log, Message, Thread


def log_json(log: Log) -> dict[str, Any]:
    return {
        "id": str(log.id),
        "kind": log.kind,
        "message_id": str(log.message_id) if log.message_id else None,
        "parent_id": str(log.parent_id) if log.parent_id else None,
        "data": log.data,
        "created_at": log.created_at,
    }


def log_create(
    *,
    thread: Thread,
    kind: str,
    data: Mapping[str, Any],
    message: Message | None = None,
    parent: Log | None = None,
) -> Log:
    return Log.objects.create(
        tenant=thread.tenant, thread=thread, kind=kind, data=dict(data), message=message,
        parent=parent,
    )  # fmt: skip


def log_list(
    *,
    thread: Thread,
    limit: int = 100,
    offset: int = 0,
    order: Literal["asc", "desc"] = "desc",
    kind: str | None = None,
) -> tuple[list[Log], int]:
    if limit < 0 or offset < 0:
        raise ValidationFailed("limit and offset must not be negative", field="limit")
    if order not in ("asc", "desc"):
        raise ValidationFailed("order must be asc or desc", field="order")
    rows = Log.objects.for_tenant(thread.tenant).filter(thread=thread)
    if kind:
        rows = rows.filter(kind=kind)
    total = rows.count()
    ordering = ["created_at", "id"] if order == "asc" else ["-created_at", "-id"]
    return list(rows.order_by(*ordering)[offset : offset + limit]), total


def log_get(*, thread: Thread, log_id: uuid.UUID | str) -> Log | None:
    try:
        return Log.objects.for_tenant(thread.tenant).filter(thread=thread, id=log_id).first()
    except (ValueError, ValidationError):
        return None
