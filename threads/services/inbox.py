"""The durable inbox of a thread (``QueuedWork``): everything that makes a thread run.

Work enters in the same transaction as its cause and ``drive_thread`` is enqueued on
commit, so nothing is lost between the two (ARCHITECTURE §5). The flow holding the
thread's lock takes items in ``id`` order (FIFO) and marks each consumed with its fence,
so an item is consumed by exactly one flow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.ids import new_id
from common.time import now_us
from threads.events import Outbox, publish
from threads.models import QueuedWork, Thread, ThreadStatus, WorkKind
from threads.services.messages import check_content, check_metadata, jsonb_value

QUEUEABLE_ROLES = ("user", "assistant", "system")
MAX_TOOL_ARGS_BYTES = 256 * 1024
# A thread that is not running shows "queued" once work arrives.
_WAKEABLE = (ThreadStatus.IDLE, ThreadStatus.WAITING_INPUT, ThreadStatus.FAILED)


class ThreadTerminated(Conflict):
    code = "terminated"


def terminated_error() -> ThreadTerminated:
    return ThreadTerminated("the thread is terminated; it accepts no new work")


def work_json(work: QueuedWork) -> dict[str, Any]:
    return {
        "id": work.id,
        "kind": work.kind,
        "payload": work.payload,
        "created_at": work.created_at,
        "consumed_at": work.consumed_at,
    }


def _drive_on_commit(thread: Thread) -> None:
    from threads.tasks import wake_thread

    thread_id, tenant_id = thread.id, thread.tenant_id
    transaction.on_commit(lambda: wake_thread(thread_id, tenant_id))


# One statement: lock the open thread's row (a terminated thread inserts nothing), lift a
# user stop when asked, show a resting thread as queued, then append the item. The row lock
# is taken before the id is drawn, so ids follow commit order: the inbox is FIFO by id.
_ENQUEUE = (
    "WITH t AS (UPDATE threads_thread SET "
    "status = CASE WHEN (NOT stop_requested OR %(clear)s) AND status = ANY(%(wakeable)s) "
    "THEN %(queued)s ELSE status END, "
    "updated_at = CASE WHEN ((NOT stop_requested OR %(clear)s) AND status = ANY(%(wakeable)s)) "
    "OR (stop_requested AND %(clear)s) THEN %(now)s ELSE updated_at END, "
    "stop_requested = stop_requested AND NOT %(clear)s "
    "WHERE id = %(thread)s AND terminated_at IS NULL RETURNING id) "
    "INSERT INTO threads_queuedwork (tenant_id, thread_id, kind, payload, created_at) "
    "SELECT %(tenant)s, t.id, %(kind)s, %(payload)s, %(now)s FROM t RETURNING id"
)


def work_enqueue(
    *, thread: Thread, kind: str, payload: Mapping[str, Any], clear_stop: bool = False
) -> QueuedWork:
    """Append work to the inbox (one statement, with its event) and wake the thread after
    commit.

    ``clear_stop`` (a new user message) lifts a user stop, so parked work runs again.
    Raises ThreadTerminated (409) on a terminated thread, NotFound when it is gone.
    """
    work = QueuedWork(tenant_id=thread.tenant_id, thread=thread, kind=kind, payload=dict(payload))
    payload_field = QueuedWork._meta.get_field("payload")
    # The item and its event commit together (joining the caller's transaction, if any).
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _ENQUEUE,
            {"clear": clear_stop, "wakeable": [*_WAKEABLE, ThreadStatus.STOPPED],
             "queued": ThreadStatus.QUEUED, "now": work.created_at, "thread": thread.pk,
             "tenant": thread.tenant_id, "kind": kind,
             "payload": payload_field.get_db_prep_save(work.payload, connection)},
        )  # fmt: skip
        row = cursor.fetchone()
        if row is not None:
            work.id = row[0]
            work._state.adding = False
            publish(thread, "queue.changed", {"change": "added", "item": work_json(work)})
            _drive_on_commit(thread)
    if row is None:  # nothing was written; raised outside the block, as in message_inject
        if Thread.objects.filter(pk=thread.pk).exists():
            raise terminated_error()
        raise NotFound("the thread no longer exists")
    return work


def message_queue(
    *,
    thread: Thread,
    role: str,
    content: str | None,
    attachments: Sequence[Mapping[str, Any]] = (),
    silent: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> QueuedWork:
    """Queue a message (POST .../messages, ``state.queue_message``); it is persisted when
    the flow drains it, before its next model call. A ``user`` message lifts a user stop.

    ``attachments`` are AttachmentRefs already stored in the thread. The message id is fixed
    now (``payload.message_id``) so the caller can follow it.
    """
    if role not in QUEUEABLE_ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(QUEUEABLE_ROLES)}", field="role")
    if content is not None and not isinstance(content, str):
        raise ValidationFailed("content must be a string", field="content")
    if not content and not attachments:
        raise ValidationFailed("content or attachments is required", field="content")
    check_content(content)
    payload = {
        "message_id": str(new_id()),
        "role": role,
        "content": content,
        "silent": bool(silent),
        "metadata": check_metadata(metadata or {}),
        "attachments": [dict(ref) for ref in attachments],
    }
    return work_enqueue(
        thread=thread, kind=WorkKind.MESSAGE, payload=payload, clear_stop=role == "user"
    )


def tool_queue(*, thread: Thread, name: str, args: Mapping[str, Any] | None) -> QueuedWork:
    """Queue a tool call at rest (``state.queue_tool``); the flow runs it, then side A acts."""
    if not isinstance(name, str) or not name:
        raise ValidationFailed("name must be a tool name", field="name")
    arguments = dict(args or {})
    size = len(json.dumps(arguments, default=str))
    if size > MAX_TOOL_ARGS_BYTES:
        raise LimitExceeded(
            f"tool arguments are {size} bytes; the limit is {MAX_TOOL_ARGS_BYTES}", field="args"
        )
    return work_enqueue(
        thread=thread, kind=WorkKind.TOOL, payload={"name": name, "args": arguments}
    )


def continue_queue(*, thread: Thread, side: str = "a") -> QueuedWork:
    """Queue a ``continue`` (POST .../continue): the given side takes a turn without a message."""
    if side not in ("a", "b"):
        raise ValidationFailed("side must be a or b", field="side")
    return work_enqueue(thread=thread, kind=WorkKind.CONTINUE, payload={"side": side})


# One statement: lock the thread row while ``fence`` is current, mark every pending item
# consumed by that fence, and mark the thread running if anything was taken.
_TAKE = (
    "WITH t AS (SELECT id FROM threads_thread WHERE id = %s AND fence = %s FOR NO KEY UPDATE), "
    "taken AS (UPDATE threads_queuedwork SET consumed_at = %s, consumed_fence = %s "
    "WHERE thread_id IN (SELECT id FROM t) AND consumed_at IS NULL "
    "RETURNING id, kind, payload, created_at, consumed_at), "
    "running AS (UPDATE threads_thread SET status = %s "
    "WHERE id IN (SELECT id FROM t) AND EXISTS (SELECT 1 FROM taken)) "
    "SELECT id, kind, payload, created_at, consumed_at FROM taken ORDER BY id"
)


def work_take(*, thread: Thread, fence: int, outbox: Outbox | None = None) -> list[QueuedWork]:
    """Every pending item, oldest first, marked consumed by ``fence``; the thread is then
    ``running``. Nothing is taken when ``fence`` is stale (the flow's next write raises).

    Precondition: the caller holds the thread's lock with ``fence``. Run it in the
    transaction that stores what the items carry, so they are consumed only with it.
    """
    with connection.cursor() as cursor:
        cursor.execute(_TAKE, [thread.pk, fence, now_us(), fence, ThreadStatus.RUNNING])
        rows = cursor.fetchall()
    items = [
        QueuedWork(
            id=id, tenant_id=thread.tenant_id, thread=thread, kind=kind,
            payload=jsonb_value(payload),
            created_at=created_at, consumed_at=consumed_at, consumed_fence=fence,
        )
        for id, kind, payload, created_at, consumed_at in rows
    ]  # fmt: skip
    if items:
        thread.status = ThreadStatus.RUNNING
        publish(thread, "thread.status", {"status": ThreadStatus.RUNNING}, outbox=outbox)
    return items


@transaction.atomic
def work_discard(*, thread: Thread) -> int:
    """Drop pending work (a terminated thread runs nothing more); returns how many."""
    return QueuedWork.objects.filter(thread_id=thread.pk, consumed_at__isnull=True).update(
        consumed_at=now_us()
    )
