"""Logs of a thread: one row per model call or tool call (the engine writes them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import QuerySet

from common.errors import ValidationFailed
from threads.events import EventType, Outbox, publish
from threads.models import Log, Message, Thread
from threads.services.fence import StaleFence


def log_json(log: Log) -> dict[str, Any]:
    return {
        "id": str(log.id),
        "kind": log.kind,
        "message_id": str(log.message_id) if log.message_id else None,
        "parent_id": str(log.parent_id) if log.parent_id else None,
        "data": log.data,
        "created_at": log.created_at,
    }


# One statement: the row is written only if the flow's fence is still the thread's.
_FENCED_INSERT = (
    "INSERT INTO threads_log (id, tenant_id, thread_id, kind, message_id, parent_id, data, "
    "created_at) SELECT %s, %s, %s, %s, %s, %s, %s, %s WHERE EXISTS "
    "(SELECT 1 FROM threads_thread WHERE id = %s AND fence = %s)"
)


def log_create(
    *,
    thread: Thread,
    kind: str,
    data: Mapping[str, Any],
    message: Message | None = None,
    parent: Log | None = None,
    fence: int | None = None,
    outbox: Outbox | None = None,
    id: uuid.UUID | None = None,
) -> Log:
    """A log row; with ``fence`` (a flow's write) only while that fence is current, else
    StaleFence. The fenced insert is one statement without a row lock: logs record what a
    flow did, and a flow's own message writes are what the fence must stop.

    A model-call log (``llm``) commits with its ``model.completed``/``model.failed`` event,
    a tool-call log (``tool``) with its ``tool.result``/``tool.failed`` event."""
    event = _log_event(kind, data)
    if event is None:
        return _log_insert(thread, kind, data, message, parent, fence, id)
    with transaction.atomic(savepoint=False):
        log = _log_insert(thread, kind, data, message, parent, fence, id)
        payload = {**_event_payload(kind, data), "log_id": str(log.id)}
        if kind == "llm":
            payload["message_id"] = str(message.id) if message is not None else None
        publish(thread, event, payload, outbox=outbox)
    return log


def _log_event(kind: str, data: Mapping[str, Any]) -> str | None:
    if kind == "llm":
        return EventType.MODEL_FAILED if data.get("error") else EventType.MODEL_COMPLETED
    if kind == "tool":
        return EventType.TOOL_RESULT if data.get("status") == "success" else EventType.TOOL_FAILED
    return None


def _event_payload(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The summary an event carries; the log row keeps the detail."""
    common = {"flow_id": data.get("flow_id") or ""}
    if kind == "llm":
        payload = {**common, "model": data.get("model", ""),
                   "provider": str(data.get("provider") or ""),
                   "model_id": str(data.get("model_id") or ""),
                   "total_tokens": data.get("total_tokens"),
                   "latency_ms": data.get("latency_ms", 0.0),
                   "error": data.get("error")}  # fmt: skip
        if data.get("aborted"):
            payload["aborted"] = True
        return payload
    return {**common, "tool_call_id": data.get("tool_call_id", ""), "name": data.get("tool", ""),
            "status": data.get("status", ""), "error": data.get("error")}  # fmt: skip


def _log_insert(
    thread: Thread,
    kind: str,
    data: Mapping[str, Any],
    message: Message | None,
    parent: Log | None,
    fence: int | None,
    id: uuid.UUID | None = None,
) -> Log:
    log = Log(
        tenant_id=thread.tenant_id, thread=thread, kind=kind, data=dict(data),
        message=message, parent=parent, **({"id": id} if id is not None else {}),
    )  # fmt: skip
    if fence is None:
        log.save(force_insert=True)
        return log
    with connection.cursor() as cursor:
        cursor.execute(
            _FENCED_INSERT,
            [log.id, thread.tenant_id, thread.pk, kind, log.message_id, log.parent_id,
             json.dumps(log.data), log.created_at, thread.pk, fence],
        )  # fmt: skip
        if cursor.rowcount != 1:
            raise StaleFence.of(thread, fence)
    return log


def log_rows(
    *, thread: Thread, order: Literal["asc", "desc"] = "desc", kind: str | None = None
) -> QuerySet[Log]:
    """The thread's logs by creation time (``desc``: newest first), only ``kind``'s when
    given. Raises ValidationFailed for another ``order``."""
    if order not in ("asc", "desc"):
        raise ValidationFailed("order must be asc or desc", field="order")
    rows = Log.objects.for_tenant(thread.tenant).filter(thread=thread)
    if kind:
        rows = rows.filter(kind=kind)
    ordering = ["created_at", "id"] if order == "asc" else ["-created_at", "-id"]
    return rows.order_by(*ordering)


def log_list(
    *,
    thread: Thread,
    limit: int = 100,
    offset: int = 0,
    order: Literal["asc", "desc"] = "desc",
    kind: str | None = None,
) -> tuple[list[Log], int]:
    """One page of :func:`log_rows` by place (the spec's ``getLogs``), and the total."""
    if limit < 0 or offset < 0:
        raise ValidationFailed("limit and offset must not be negative", field="limit")
    rows = log_rows(thread=thread, order=order, kind=kind)
    return list(rows[offset : offset + limit]), rows.count()


def log_get(*, thread: Thread, log_id: uuid.UUID | str) -> Log | None:
    try:
        return Log.objects.for_tenant(thread.tenant).filter(thread=thread, id=log_id).first()
    except (ValueError, ValidationError):
        return None
