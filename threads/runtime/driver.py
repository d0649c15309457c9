"""``drive_thread``: the holder of a thread's lock runs its flows until the inbox is empty.

1. Take the per-thread Redis lock (never wait: the holder drains the inbox anyway) and
   the next fence; a heartbeat renews the lock and relays stop/terminate signals.
2. If the previous holder died mid-flow, close its open calls and resume its side.
3. Run the waiting turns, one flow each, while the thread is neither stopped nor terminated
   (a turn its dead worker left running is resumed first, or ended when a stop, cancel or
   terminate was asked of it).
4. Release the lock and re-enqueue when a wake-up came while it was held: a wake-up that
   finds the lock taken leaves the holder a note, in the same Redis script (no lost
   wake-ups, and no database read when none came).
The beat sweeper re-enqueues threads with work (or a dead flow) and no live lock holder.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from agents.providers.base import AbortSignal
from threads.models import TURN_ACTIVE, Message, MessageRole, RunStatus, Thread, Turn
from threads.runtime.engine import Flow, Runtime, Side
from threads.runtime.stops import StopReason
from threads.services import wakeups
from threads.services.control import active_turn, child_close, interrupted_turn_end
from threads.services.fence import StaleFence, fence_retire, fence_take, thread_refresh
from threads.services.lock import Heartbeat, lock_acquire, lock_is_held
from threads.services.logs import log_create
from threads.services.recovery import close_unanswered_calls
from threads.services.status import thread_rest, turn_fail_crashed
from threads.services.subagents import awaits_release, session_end

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
    parent_abort: AbortSignal | None = None,
) -> DriveResult:
    """Run ``thread_id``'s pending work if no one else is; see the module docstring.
    Idempotent: a duplicate delivery finds the lock taken or the inbox empty. ``tenant_id``
    (the thread's, as the wake-up carries it) saves reading it first. ``parent_abort``: a
    blocking subagent call drives its child here; stopping the parent's flow stops it."""
    if tenant_id is None:
        tenant_id = Thread.objects.filter(pk=thread_id).values_list("tenant_id", flat=True).first()
        if tenant_id is None:
            return DriveResult(acquired=False)
    lock = lock_acquire(tenant_id=tenant_id, thread_id=thread_id, note_if_held=True)
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
            on_signal=lambda _signal: abort.set(),
            on_lost=lambda: _lock_lost(thread, fence, abort),
        ):
            runtime = runtime or Runtime(release_connection=True)
            _run_flows(thread, fence, runtime, abort, result, next_turn_id=next_turn_id)
    except StaleFence as error:
        result.stale = True
        logger.warning("thread %s: %s; this worker stops writing", thread_id, error.message)
    finally:
        if unlink is not None:
            unlink()
        lock.release()
    if lock.woken:
        wakeups.wake_thread(thread_id, tenant_id)
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
    next_turn_id: Any,
) -> None:
    """Run the thread's turns, one flow each, until none waits. Precondition: ``thread``
    and ``next_turn_id`` are as :func:`fence_take` read them."""
    flow: Flow | None = None
    pending = next_turn_id is not None
    while not abort.is_set:
        if flow is not None:
            ended = flow.pending_after
            pending = thread_refresh(thread=thread) if ended is None else ended
            next_turn_id = None
        # Only a dead worker's turn is still active here (a flow ends its own).
        turn = active_turn(thread=thread) if thread.status in TURN_ACTIVE else None
        if thread.terminated_at is not None or thread.stop_requested:
            if turn is not None:
                interrupted_turn_end(thread=thread, fence=fence, turn=turn)
            return
        resume: Side | None = None
        if turn is not None:
            if turn.cancel_requested:
                interrupted_turn_end(thread=thread, fence=fence, turn=turn)
                continue
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
                drive=thread_drive,
            )  # fmt: skip
            reason = flow.run()
        except StaleFence:
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
            flow = None
        result.reasons.append(reason)
        if reason in (StopReason.ABORTED_BY_USER, StopReason.TERMINATED, StopReason.STEP_ERROR):
            return


def _next_turn(thread: Thread) -> Turn | None:
    return (
        Turn.objects.filter(thread_id=thread.pk, host__isnull=True, status=RunStatus.QUEUED)
        .order_by("position")
        .first()
    )


def _recover(thread: Thread, fence: int, turn: Turn) -> Side | None:
    """After a worker died mid-turn (its turn still says running): close its open calls
    and return the side to resume, or None when its step had ended."""
    logger.warning("thread %s: taking over a turn whose worker stopped", thread.pk)
    with transaction.atomic():
        close_unanswered_calls(thread=thread, fence=fence, reason=INTERRUPTED)
        closing = awaits_release(parent=thread)  # its blocking subagent calls were closed too
        log_create(
            thread=thread, kind="incident", fence=fence,
            data={"incident": "takeover", "turn_id": str(turn.pk), "fence": fence,
                  "detail": "the worker running this turn stopped; another took it over"},
        )  # fmt: skip
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
    """Re-enqueue threads that have waiting turns (not parked by a stop) or a turn marked
    running, and no live lock holder (a crashed worker, a lost broker message). Returns how
    many were woken."""

    waiting = Turn.objects.filter(
        status=RunStatus.QUEUED,
        host__isnull=True,
        thread__stop_requested=False,
        thread__terminated_at__isnull=True,
    ).values_list("thread_id", "tenant_id")
    running = Turn.objects.filter(status__in=TURN_ACTIVE, host__isnull=True).values_list(
        "thread_id", "tenant_id"
    )
    candidates = dict(waiting.distinct()[:SWEEP_BATCH]) | dict(running[:SWEEP_BATCH])
    woken = 0
    for thread_id, tenant_id in candidates.items():
        if not lock_is_held(tenant_id=tenant_id, thread_id=thread_id):
            wakeups.wake_thread(thread_id, tenant_id)
            woken += 1
    return woken
