"""``drive_thread``: the holder of a thread's lock runs its flows until the inbox is empty.

1. Take the per-thread Redis lock (never wait: the holder drains the inbox anyway) and
   the next fence; a heartbeat renews the lock and relays stop/terminate signals. The lock
   counts as one of the tenant's ``FLOWS_PER_TENANT`` flows across every worker, so one
   tenant never holds every slot: when all are in use, return; its turns stay queued, and
   the thread is woken, in the order it was refused, when one of the tenant's flows ends
   (or by the sweeper).
2. If the previous holder died mid-flow, close its open calls and resume its side.
3. Run the waiting turns, one flow each, while the thread is neither stopped nor terminated
   (a turn its dead worker left running is resumed first, or ended when a stop, cancel or
   terminate was asked of it). A turn resting on a person's decision holds the queue: once
   answered it is resumed where it paused (by whichever worker is woken), until then the
   drive ends and no worker waits for it.
4. Release the lock and re-enqueue when a wake-up came while it was held: a wake-up that
   finds the lock taken leaves the holder a note, in the same Redis script (no lost
   wake-ups, and no database read when none came).
The beat sweeper re-enqueues threads with work (or a dead flow) and no live lock holder.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from agents.providers.base import AbortSignal
from common.db_backend.pool import busy_pool_waited_out
from common.outages import OUTAGE_ERRORS
from common.tenant_wall import tenant_of, tenant_scope
from common.time import now_us
from threads.models import (
    TURN_ACTIVE,
    Action,
    ActionStatus,
    Message,
    MessageRole,
    RunStatus,
    Thread,
    Turn,
)
from threads.runtime.engine import Flow, Runtime, Side
from threads.runtime.engine.bell import inputs_ring
from threads.runtime.stops import StopReason
from threads.runtime.telemetry_door import telemetry
from threads.services import wakeups
from threads.services.control import (
    active_turn,
    child_close,
    interrupted_turn_end,
    paused_turn,
)
from threads.services.fence import StaleFence, fence_retire, fence_take, thread_refresh
from threads.services.heartbeat import Heartbeat
from threads.services.lock import (
    FlowsLimitReached,
    ThreadLock,
    lock_acquire,
    lock_ttl_ms,
    outage_note,
    outage_noted,
)
from threads.services.recovery import close_unanswered_calls, incident_record
from threads.services.status import thread_rest, turn_fail_crashed, turn_resume
from threads.services.subagents import awaits_release, session_end
from usage import budgets

logger = logging.getLogger(__name__)

INTERRUPTED = "Interrupted: the worker running this flow stopped before the tool call finished"
INTERRUPTED_BY_OUTAGE = "Interrupted: an outage cut the flow short before the tool call finished"
SWEEP_BATCH = 1000
# At most this long between retries, so work resumes within seconds of the service's return.
MAX_OUTAGE_BACKOFF_S = 4


@dataclass
class DriveResult:
    acquired: bool
    fence: int | None = None
    reasons: list[StopReason] = field(default_factory=list)
    stale: bool = False
    deferred: bool = False  # the tenant's flow slots were all in use
    outage: bool = False  # an outage paused the flow; its turn waits to be resumed


def thread_drive(
    *,
    thread_id: uuid.UUID | str,
    tenant_id: uuid.UUID | str | None = None,
    runtime: Runtime | None = None,
    parent_abort: AbortSignal | None = None,
    attempt: int = 0,
) -> DriveResult:
    """Run ``thread_id``'s pending work if no one else is; see the module docstring.
    Idempotent: a duplicate delivery finds the lock taken or the inbox empty. ``tenant_id``
    (the thread's, as the wake-up carries it) saves reading it first. ``parent_abort``: a
    blocking subagent call drives its child here; stopping the parent's flow stops it.
    ``attempt`` counts the drives in a row that an outage cut short (see
    :func:`outage_backoff_s`)."""
    if tenant_id is None:
        tenant_id = tenant_of(Thread, thread_id)  # whose it is; then it acts for that tenant
        if tenant_id is None:
            return DriveResult(acquired=False)
    with tenant_scope(tenant_id), telemetry().drive(tenant_id=tenant_id, thread_id=thread_id):
        return _drive(thread_id, tenant_id, runtime, parent_abort, attempt)


def _drive(
    thread_id: Any,
    tenant_id: Any,
    runtime: Runtime | None,
    parent_abort: AbortSignal | None,
    attempt: int,
) -> DriveResult:
    # A blocking subagent call's child runs in its parent's flow slot.
    counted = settings.FLOWS_PER_TENANT if parent_abort is None else None
    try:
        lock = lock_acquire(
            tenant_id=tenant_id, thread_id=thread_id, note_if_held=True, tenant_flows=counted
        )
    except FlowsLimitReached:
        return DriveResult(acquired=False, deferred=True)
    except OUTAGE_ERRORS as error:
        logger.warning("thread %s: the lock store is unreachable (%s)", thread_id, error)
        _retry(thread_id, tenant_id, attempt)
        return DriveResult(acquired=False, outage=True)
    if lock is None:  # the holder finds our note when it releases, and wakes the thread
        return DriveResult(acquired=False)
    result = DriveResult(acquired=True)
    abort = AbortSignal()
    unlink = parent_abort.add_callback(abort.set) if parent_abort is not None else None
    try:
        taken = fence_take(thread_id=thread_id, tenant_id=tenant_id)
        if taken is None:  # deleted (or not this tenant's): nothing to run
            return DriveResult(acquired=False)
        thread, fence, next_turn_id = taken
        result.fence = fence
        with Heartbeat(
            lock,
            tenant_id=tenant_id,
            thread_id=thread_id,
            on_signal=lambda signal: inputs_ring(thread_id) if signal == "inputs" else abort.set(),
            on_lost=lambda: _lock_lost(thread, fence, abort),
        ):
            runtime = runtime or Runtime(release_connection=True)
            with busy_pool_waited_out():  # out of connections is not an outage
                _run_flows(thread, fence, runtime, abort, result, next_turn_id=next_turn_id,
                           lease=(lock.key, lock.token))  # fmt: skip
    except StaleFence as error:
        result.stale = True
        logger.warning("thread %s: %s; this worker stops writing", thread_id, error.message)
    except OUTAGE_ERRORS as error:
        # Redis or PostgreSQL went away: the turn stays active, to be taken over and
        # resumed by the retry below (or the sweeper) as after a crash.
        logger.warning("thread %s: drive cut short by an outage: %s", thread_id, error)
        connection.close()  # the next statement opens a fresh connection
        result.outage = True
        with contextlib.suppress(*OUTAGE_ERRORS):  # Redis down too: the next drive sees a crash
            outage_note(tenant_id=tenant_id, thread_id=thread_id)
    finally:
        if unlink is not None:
            unlink()
        _release(lock, result)
    if result.outage:
        _retry(thread_id, tenant_id, attempt)
    elif lock.woken:
        wakeups.wake_thread(thread_id, tenant_id)
    if lock.next_waiting is not None:  # a thread of the tenant refused a slot: its turn now
        wakeups.wake_thread(lock.next_waiting, tenant_id)
    return result


def outage_backoff_s(attempt: int) -> float:
    """How long a thread whose drive an outage cut short waits before the next: 1 s, doubling
    up to :data:`MAX_OUTAGE_BACKOFF_S`."""
    return float(min(MAX_OUTAGE_BACKOFF_S, 2**attempt))


def _retry(thread_id: Any, tenant_id: Any, attempt: int) -> None:
    """Drive the thread again after the backoff; when even that cannot be sent (the broker is
    down too), the sweeper wakes it once the outage is over."""
    wakeups.wake_thread(
        thread_id, tenant_id, countdown=outage_backoff_s(attempt), attempt=attempt + 1
    )


def _release(lock: ThreadLock, result: DriveResult) -> None:
    """Release the lock; when Redis is unreachable it expires on its own."""
    try:
        lock.release()
    except OUTAGE_ERRORS as error:
        logger.warning("lock %s not released (%s); it expires on its own", lock.key, error)
        result.outage = True


def _lock_lost(thread: Thread, fence: int, abort: AbortSignal) -> None:
    """The heartbeat found the lock gone. Retire the fence, then abort, so the flow's abort
    handling cannot write either: a lost lock is not a user's stop, and the thread stays
    ``running`` for the sweeper to hand to the next worker. On a thread of its own: the
    process's one heartbeat must not wait on the database (it renews every other lock)."""

    def retire() -> None:
        try:
            with tenant_scope(thread.tenant_id):
                fence_retire(thread=thread, fence=fence)
        finally:
            connection.close()  # this thread's own connection, back to the pool
            abort.set()

    threading.Thread(target=retire, name=f"lock-lost:{thread.pk}", daemon=True).start()


def _run_flows(
    thread: Thread,
    fence: int,
    runtime: Runtime,
    abort: AbortSignal,
    result: DriveResult,
    *,
    next_turn_id: Any,
    lease: tuple[str, str] | None = None,
) -> None:
    """Run the thread's turns, one flow each, until none waits. Precondition: ``thread``
    and ``next_turn_id`` are as :func:`fence_take` read them; ``lease`` is the lock's key
    and token (the flows' spend reservations live as long as it)."""
    flow: Flow | None = None
    pending = next_turn_id is not None
    while not abort.is_set:
        if flow is not None:
            ended = flow.pending_after
            pending = thread_refresh(thread=thread) if ended is None else ended
            next_turn_id = None
        # Only a dead worker's turn is still active here (a flow ends its own).
        turn = active_turn(thread=thread) if thread.status in TURN_ACTIVE else None
        if turn is None and thread.paused_turn_id is not None:
            turn = paused_turn(thread=thread)
        if thread.terminated_at is not None or thread.stop_requested:
            if turn is not None:
                interrupted_turn_end(thread=thread, fence=fence, turn=turn)
            return
        resume: Side | None = None
        resumption: Action | None = None
        if turn is not None and turn.cancel_requested:
            interrupted_turn_end(thread=thread, fence=fence, turn=turn)
            flow, next_turn_id, pending = None, None, True
            continue
        if turn is not None and turn.pk == thread.paused_turn_id and turn.resume:
            if not turn_resume(thread=thread, fence=fence, turn=turn):  # a budget's wait
                return  # it still waits for room: the thread waits without a worker
        elif turn is not None and turn.pk == thread.paused_turn_id:
            resumption = _answered(thread, fence, turn)
            if resumption is None:
                return  # a person has yet to decide: the thread waits without a worker
        elif turn is not None:
            resume = _recover(thread, fence, turn)
        elif next_turn_id is not None:  # read with the fence: no statement of its own
            turn = Turn(id=next_turn_id, tenant_id=thread.tenant_id, thread=thread,
                        status=RunStatus.QUEUED)  # fmt: skip
        elif pending:
            turn = _next_turn(thread)
        if turn is None:
            if thread.status == RunStatus.QUEUED:
                thread_rest(thread=thread, fence=fence, rest=thread.rest_status)
            return
        try:
            flow = Flow(
                thread, fence=fence, runtime=runtime, abort=abort, turn=turn, resume_side=resume,
                drive=thread_drive, resumption=resumption, lease=lease,
            )  # fmt: skip
            reason = flow.run()
        except (StaleFence, *OUTAGE_ERRORS):
            # An outage is not the turn's fault: it stays active, and the next drive takes it
            # over as after a crash (thread_drive).
            raise
        except Exception as error:
            # A bug or a broken definition: the turn and the thread show "failed" and wait
            # for a new request instead of being retried in a loop.
            logger.exception("thread %s: the flow of turn %s failed", thread.pk, turn.pk)
            turn_fail_crashed(
                thread=thread, fence=fence, turn=turn, error=f"{type(error).__name__}: {error}"
            )
            reason = StopReason.STEP_ERROR
            if thread.parent_id is not None:  # its parent hears of the failed session
                turn.refresh_from_db()
                if session_end(child=thread, turn=turn, reason=str(reason)):
                    child_close(child=thread)
            # The turns queued behind it are requests of their own: they run next.
            flow, next_turn_id, pending = None, None, True
        result.reasons.append(reason)
        if reason in (StopReason.ABORTED_BY_USER, StopReason.TERMINATED):
            return
        if reason in (StopReason.ACTION_REQUIRED, StopReason.WAITING_RESOURCE):
            return  # the turn rests on a person or a budget; the others wait behind it


def _answered(thread: Thread, fence: int, turn: Turn) -> Action | None:
    """The answered action the paused ``turn`` resumes from, once it runs again under
    ``fence``; None while it still waits for a person."""
    if turn.status != RunStatus.QUEUED:
        return None
    action = (
        Action.objects.filter(turn_id=turn.pk)
        .exclude(status=ActionStatus.PENDING)
        .order_by("-created_at")
        .first()
    )
    if action is None or not turn_resume(thread=thread, fence=fence, turn=turn):
        return None
    return action


def _next_turn(thread: Thread) -> Turn | None:
    return (
        Turn.objects.filter(thread_id=thread.pk, host__isnull=True, status=RunStatus.QUEUED)
        .order_by("position")
        .first()
    )


def _recover(thread: Thread, fence: int, turn: Turn) -> Side | None:
    """After a worker died mid-turn, or an outage cut its drive short (its turn still says
    running): close its open calls and return the side to resume, or None when its step had
    ended. The thread's incident says which of the two it was (:func:`outage_noted`)."""
    if outage_noted(tenant_id=thread.tenant_id, thread_id=thread.pk, turn_id=turn.pk):
        logger.info("thread %s: resuming a turn an outage cut short", thread.pk)
        incident = ("outage", "an outage of PostgreSQL or Redis cut this turn short; it resumed")
        reason = INTERRUPTED_BY_OUTAGE
    else:
        logger.warning("thread %s: taking over a turn whose worker stopped", thread.pk)
        incident = ("takeover", "the worker running this turn stopped; another took it over")
        reason = INTERRUPTED
    budgets.release_thread(thread_id=thread.pk)  # what its dead flow held reserved
    with transaction.atomic():
        close_unanswered_calls(thread=thread, fence=fence, reason=reason)
        closing = awaits_release(parent=thread)  # its blocking subagent calls were closed too
        incident_record(thread=thread, fence=fence, turn=turn, incident=incident)
    for child in closing:
        child_close(child=child)
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


def threads_sweep() -> int:
    """Re-enqueue threads that have waiting turns (not parked by a stop nor held back by a
    turn waiting for a person, submitted at least ``THREAD_SWEEP_GRACE_S`` ago) or a turn
    marked running, and no live lock holder (a crashed worker, a lost broker message).
    Returns how many were woken. A running turn whose lock is overdue for renewal (its
    holder most likely died) is woken for the moment the lock expires, so a takeover waits
    for the lock's TTL, not also for the next sweep.

    The grace spares the broker a second task for every turn whose wake-up is still queued
    behind others (under load, most of them): a lost wake-up is recovered that much later."""
    submitted_before = now_us() - int(settings.THREAD_SWEEP_GRACE_S * 1_000_000)
    waiting = Turn.objects.filter(
        Q(thread__paused_turn__isnull=True) | Q(thread__paused_turn__status=RunStatus.QUEUED),
        status=RunStatus.QUEUED,
        created_at__lt=submitted_before,
        host__isnull=True,
        thread__stop_requested=False,
        thread__terminated_at__isnull=True,
    ).values_list("thread_id", "tenant_id")
    running = Turn.objects.filter(status__in=TURN_ACTIVE, host__isnull=True).values_list(
        "thread_id", "tenant_id"
    )
    active = dict(running[:SWEEP_BATCH])
    candidates = dict(waiting.distinct()[:SWEEP_BATCH]) | active
    overdue_ms = settings.THREAD_LOCK_TTL_MS // 2
    woken = 0
    for thread_id, tenant_id in candidates.items():
        left_ms = lock_ttl_ms(tenant_id=tenant_id, thread_id=thread_id)
        if left_ms is None:
            wakeups.wake_thread(thread_id, tenant_id)
            woken += 1
        elif thread_id in active and left_ms < overdue_ms:
            # Its holder missed a renewal (they come every third of the TTL): most likely it
            # died. Wake the thread as the lock expires, not up to a sweep interval later.
            wakeups.wake_thread(thread_id, tenant_id, countdown=left_ms / 1000 + 0.05)
    return woken
