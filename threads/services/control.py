"""Stopping and terminating threads (spec DIGEST §18.5, runtime §10).

A stop sets the thread's persistent ``stop_requested`` flag and signals the lock holder,
whose flow aborts its model call at once. When no flow runs, the caller takes the lock
itself and closes the thread's open calls. Only a new user message lifts a stop.
Terminate is soft: the thread refuses new work (409) and in-flight work is aborted.
"""

from __future__ import annotations

from django.db import transaction

from common.time import now_us
from threads.events import Outbox, publish
from threads.models import Thread, ThreadStatus
from threads.runtime.lock import control_send, lock_acquire
from threads.services.fence import fence_acquire, fence_check, thread_fenced_update
from threads.services.inbox import terminated_error, work_discard
from threads.services.messages import message_inject
from threads.services.recovery import close_unanswered_calls

STOPPED_BY_USER = "Execution stopped by user"


def _signal(thread: Thread, signal: str) -> None:
    control_send(tenant_id=thread.tenant_id, thread_id=thread.pk, signal=signal)


def thread_stop(*, thread: Thread) -> None:
    """POST .../stop. The running flow (if any) aborts and closes itself; otherwise this
    closes the thread's open calls and adds ``Execution stopped by user``. Conflict on a
    terminated thread."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        if locked.terminated_at is not None:
            raise terminated_error()
        Thread.objects.filter(pk=thread.pk).update(stop_requested=True, updated_at=now_us())
        transaction.on_commit(lambda: _signal(thread, "stop"))
    lock = lock_acquire(tenant_id=thread.tenant_id, thread_id=thread.pk)
    if lock is None:
        return  # a flow runs: it sees the signal and finishes the stop itself
    try:
        fence, _pending = fence_acquire(thread=thread)
        stop_finalize(thread=thread, fence=fence)
    finally:
        lock.release()


def stop_finalize(
    *, thread: Thread, fence: int, flow_id: str | None = None, outbox: Outbox | None = None
) -> None:
    """Close open calls, add the stop message, mark the thread stopped, as one transaction
    with their events. Precondition: the caller holds the thread's lock with ``fence``."""
    metadata = {"status_kind": "stopped_by_user", **({"flow_id": flow_id} if flow_id else {})}
    with transaction.atomic():
        close_unanswered_calls(thread=thread, fence=fence, reason=STOPPED_BY_USER, outbox=outbox)
        message_inject(
            thread=thread, role="system", content=STOPPED_BY_USER, metadata=metadata,
            fence=fence, outbox=outbox,
        )  # fmt: skip
        thread_fenced_update(
            thread=thread, fence=fence, status=ThreadStatus.STOPPED, acting_side=""
        )
        publish(
            thread, "thread.status",
            {"status": ThreadStatus.STOPPED, "reason": "aborted_by_user"}, outbox=outbox,
        )  # fmt: skip


def thread_terminate(*, thread: Thread) -> bool:
    """Soft-terminate: set ``terminated_at``, drop queued work, abort the running flow.
    Idempotent; returns False when the thread was already terminated."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        if locked.terminated_at is not None:
            return False
        now = now_us()
        Thread.objects.filter(pk=thread.pk).update(
            terminated_at=now, status=ThreadStatus.TERMINATED, updated_at=now
        )
        thread.terminated_at, thread.status = now, ThreadStatus.TERMINATED
        work_discard(thread=thread)
        transaction.on_commit(lambda: _signal(thread, "terminate"))
        publish(thread, "thread.terminated", {"id": str(thread.pk), "terminated_at": now})
    return True
