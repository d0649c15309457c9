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

from django.db import transaction
from django.db.models import Case, Exists, OuterRef, Value, When

from common.errors import Conflict, LimitExceeded, ValidationFailed
from common.ids import new_id
from common.time import now_us
from threads.events import publish
from threads.models import QueuedWork, Thread, ThreadStatus, WorkKind
from threads.services.fence import StaleFence, fence_check
from threads.services.messages import check_content, check_metadata

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
    from threads.tasks import drive_thread

    thread_id = str(thread.id)
    transaction.on_commit(lambda: drive_thread.delay(thread_id))


@transaction.atomic
def work_enqueue(
    *, thread: Thread, kind: str, payload: Mapping[str, Any], clear_stop: bool = False
) -> QueuedWork:
    """Append work to the inbox and wake the thread after commit.

    ``clear_stop`` (a new user message) lifts a user stop, so parked work runs again.
    Raises ThreadTerminated (409) on a terminated thread.
    """
    locked = fence_check(thread=thread, fence=None)
    if locked.terminated_at is not None:
        raise terminated_error()
    changes: dict[str, Any] = {}
    if clear_stop and locked.stop_requested:
        changes["stop_requested"] = False
    stopped = locked.stop_requested and not clear_stop
    if not stopped and locked.status in (*_WAKEABLE, ThreadStatus.STOPPED):
        changes["status"] = ThreadStatus.QUEUED
    if changes:
        Thread.objects.filter(pk=thread.pk).update(**changes, updated_at=now_us())
    work = QueuedWork.objects.create(
        tenant_id=thread.tenant_id, thread=thread, kind=kind, payload=dict(payload)
    )
    publish(thread, "queue.changed", {"change": "added", "item": work_json(work)})
    _drive_on_commit(thread)
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


def work_take(*, thread: Thread, fence: int) -> list[QueuedWork]:
    """Every pending item, oldest first, marked consumed by ``fence``; the thread is then
    ``running``.

    Precondition: the caller holds the thread's lock with ``fence`` (the engine checks the
    fence in the same transaction; see :func:`threads.services.fence.fence_check`).
    """
    with transaction.atomic():
        fence_check(thread=thread, fence=fence)
        items = list(
            QueuedWork.objects.select_for_update()
            .filter(thread_id=thread.pk, consumed_at__isnull=True)
            .order_by("id")
        )
        if items:
            QueuedWork.objects.filter(id__in=[item.id for item in items]).update(
                consumed_at=now_us(), consumed_fence=fence
            )
            # Consumed work and "running" commit together: a worker that dies now leaves a
            # thread the sweeper sees and the next worker resumes.
            Thread.objects.filter(pk=thread.pk).update(status=ThreadStatus.RUNNING)
            publish(thread, "thread.status", {"status": ThreadStatus.RUNNING})
    return items


def flow_rest(*, thread: Thread, fence: int, status: str) -> str:
    """End a flow's hold on the thread's status: ``status`` (idle, waiting_input, ...), except
    that a thread at rest with work already in its inbox shows ``queued``, never a resting
    status while work waits. One statement; returns the status written.

    Raises StaleFence when ``fence`` is no longer the thread's.
    """
    written: Any = status
    if status in (ThreadStatus.IDLE, ThreadStatus.WAITING_INPUT):
        pending = QueuedWork.objects.filter(thread_id=OuterRef("pk"), consumed_at__isnull=True)
        queued = When(Exists(pending), then=Value(ThreadStatus.QUEUED))
        written = Case(queued, default=Value(status))
    rows = Thread.objects.filter(pk=thread.pk, fence=fence)
    if rows.update(status=written, acting_side="", updated_at=now_us()) == 0:
        raise StaleFence(f"fence {fence} of thread {thread.pk} is stale: another worker holds it")
    thread.status = Thread.objects.values_list("status", flat=True).get(pk=thread.pk)
    thread.acting_side = ""
    return thread.status


@transaction.atomic
def work_discard(*, thread: Thread) -> int:
    """Drop pending work (a terminated thread runs nothing more); returns how many."""
    return QueuedWork.objects.filter(thread_id=thread.pk, consumed_at__isnull=True).update(
        consumed_at=now_us()
    )
