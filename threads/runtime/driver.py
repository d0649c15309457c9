"""``drive_thread``: the holder of a thread's lock runs its flows until the inbox is empty.

1. Take the per-thread Redis lock (never wait: the holder drains the inbox anyway) and
   the next fence; a heartbeat renews the lock and relays stop/terminate signals.
2. If the previous holder died mid-flow, close its open calls and resume its side.
3. Run flows while the inbox has work and the thread is neither stopped nor terminated.
4. Release the lock and re-enqueue when a wake-up came while it was held: a wake-up that
   finds the lock taken leaves the holder a note, in the same Redis script (no lost
   wake-ups, and no database read when none came).
The beat sweeper re-enqueues threads with work (or a dead flow) and no live lock holder.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from django.db import connection

from agents.providers.base import AbortSignal
from threads.models import Message, MessageRole, QueuedWork, Thread, ThreadStatus
from threads.runtime.engine import Flow, Runtime, Side
from threads.runtime.lock import Heartbeat, lock_acquire, lock_is_held
from threads.runtime.stops import StopReason
from threads.services.control import stop_finalize
from threads.services.fence import (
    StaleFence,
    fence_retire,
    fence_take,
    thread_fenced_update,
    thread_refresh,
)
from threads.services.inbox import work_discard
from threads.services.recovery import close_unanswered_calls

logger = logging.getLogger(__name__)

INTERRUPTED = "Interrupted: the worker running this flow stopped before the tool call finished"
SWEEP_BATCH = 1000


@dataclass
class DriveResult:
    acquired: bool
    fence: int | None = None
    reasons: list[StopReason] = field(default_factory=list)
    stale: bool = False


def thread_drive(
    *,
    thread_id: uuid.UUID | str,
    tenant_id: uuid.UUID | str | None = None,
    runtime: Runtime | None = None,
) -> DriveResult:
    """Run ``thread_id``'s pending work if no one else is; see the module docstring.
    Idempotent: a duplicate delivery finds the lock taken or the inbox empty. ``tenant_id``
    (the thread's, as the wake-up carries it) saves reading it first."""
    if tenant_id is None:
        tenant_id = Thread.objects.filter(pk=thread_id).values_list("tenant_id", flat=True).first()
        if tenant_id is None:
            return DriveResult(acquired=False)
    lock = lock_acquire(tenant_id=tenant_id, thread_id=thread_id, note_if_held=True)
    if lock is None:  # the holder finds our note when it releases, and wakes the thread
        return DriveResult(acquired=False)
    result = DriveResult(acquired=True)
    abort = AbortSignal()
    try:
        taken = fence_take(thread_id=thread_id, tenant_id=tenant_id)
        if taken is None:  # deleted (or not this tenant's): nothing to run
            return DriveResult(acquired=False)
        thread, fence, pending = taken
        result.fence = fence
        with Heartbeat(
            lock,
            tenant_id=tenant_id,
            thread_id=thread_id,
            on_signal=lambda _signal: abort.set(),
            on_lost=lambda: _lock_lost(thread, fence, abort),
        ):
            runtime = runtime or Runtime(release_connection=True)
            _run_flows(thread, fence, runtime, abort, result, pending=pending)
    except StaleFence as error:
        result.stale = True
        logger.warning("thread %s: %s; this worker stops writing", thread_id, error.message)
    finally:
        lock.release()
    if lock.woken:
        _wake(thread_id, tenant_id)
    return result


def _lock_lost(thread: Thread, fence: int, abort: AbortSignal) -> None:
    """The heartbeat found the lock gone (this runs on its thread). Retire the fence before
    aborting, so the flow's abort handling cannot write either: a lost lock is not a user's
    stop, and the thread stays ``running`` for the sweeper to hand to the next worker."""
    try:
        fence_retire(thread=thread, fence=fence)
    finally:
        connection.close()  # the heartbeat thread's own connection, back to the pool
        abort.set()


def _run_flows(
    thread: Thread,
    fence: int,
    runtime: Runtime,
    abort: AbortSignal,
    result: DriveResult,
    *,
    pending: bool,
) -> None:
    """Precondition: ``thread`` and ``pending`` are as :func:`fence_take` read them."""
    resume = _recover(thread, fence)
    flow: Flow | None = None
    while not abort.is_set:
        if flow is not None:
            ended = flow.pending_after
            pending = thread_refresh(thread=thread) if ended is None else ended
        if thread.terminated_at is not None:
            work_discard(thread=thread)
            return
        if thread.stop_requested:
            if thread.status != ThreadStatus.STOPPED:
                stop_finalize(thread=thread, fence=fence)
            return
        if resume is None and not pending:
            if not result.reasons and thread.status == ThreadStatus.QUEUED:
                thread_fenced_update(thread=thread, fence=fence, status=ThreadStatus.IDLE)
            return
        try:
            flow = Flow(thread, fence=fence, runtime=runtime, abort=abort, resume_side=resume)
            reason = flow.run()
        except StaleFence:
            raise
        except Exception:
            # A bug or a broken definition: the thread shows "failed" and waits for a new
            # message or continue instead of being retried in a loop.
            logger.exception("thread %s: the flow failed", thread.pk)
            thread_fenced_update(
                thread=thread, fence=fence, status=ThreadStatus.FAILED, acting_side=""
            )
            reason = StopReason.STEP_ERROR
        resume = None
        result.reasons.append(reason)
        if reason in (StopReason.ABORTED_BY_USER, StopReason.TERMINATED, StopReason.STEP_ERROR):
            return


def _recover(thread: Thread, fence: int) -> Side | None:
    """After a worker died mid-flow (the thread still says running): close its open calls
    and return the side to resume, or None when its turn had ended."""
    if thread.status != ThreadStatus.RUNNING and not thread.acting_side:
        return None
    logger.warning("thread %s: taking over a flow whose worker stopped", thread.pk)
    close_unanswered_calls(thread=thread, fence=fence, reason=INTERRUPTED)
    if thread.acting_side in ("a", "b"):
        side: Side = "a" if thread.acting_side == "a" else "b"
        return side
    last = (
        Message.objects.filter(thread_id=thread.pk, depth=0)
        .exclude(role=MessageRole.SYSTEM)
        .order_by("-seq")
        .first()
    )
    if last is None or (last.role == MessageRole.ASSISTANT and not last.tool_calls):
        return None
    if last.role == MessageRole.USER and not last.tool_calls:
        return "a" if last.side != "a" else "b"
    return "b" if last.side == "b" else "a"


def _wake(thread_id: uuid.UUID | str, tenant_id: uuid.UUID | str) -> None:
    from threads.tasks import wake_thread  # the tasks module imports this one

    wake_thread(thread_id, tenant_id)


def threads_sweep() -> int:
    """Re-enqueue threads that have inbox work or a flow marked running, and no live lock
    holder (a crashed worker, a lost broker message). Returns how many were woken. A
    failed or stopped thread is left alone: it waits for a new message."""

    waiting = QueuedWork.objects.filter(
        consumed_at__isnull=True,
        thread__status__in=[ThreadStatus.QUEUED, ThreadStatus.RUNNING],
        thread__stop_requested=False,
        thread__terminated_at__isnull=True,
    ).values_list("thread_id", "tenant_id")
    running = Thread.objects.filter(
        status=ThreadStatus.RUNNING, terminated_at__isnull=True
    ).values_list("id", "tenant_id")
    candidates = dict(waiting.distinct()[:SWEEP_BATCH]) | dict(running[:SWEEP_BATCH])
    woken = 0
    for thread_id, tenant_id in candidates.items():
        if not lock_is_held(tenant_id=tenant_id, thread_id=thread_id):
            _wake(thread_id, tenant_id)
            woken += 1
    return woken
