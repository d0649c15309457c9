"""Stopping threads and cancelling turns (spec DIGEST §18.5, runtime §10; interrupt_turn).

A stop sets the thread's persistent ``stop_requested`` flag and signals the lock holder,
whose flow aborts its model call at once and ends its turn ``cancelled``; waiting turns stay
parked until a new user message lifts the stop. When no flow runs but a turn is marked
running (its worker died), the caller takes the lock and ends the turn itself. Stopping a
thread with nothing running or waiting changes nothing.

A cancel (``POST /turns/{id}/cancel``, or a turn submitted with ``interrupt`` or
``rollback``) ends one turn: a waiting turn at once, a running one through its flow as a stop
does, without parking the turns behind it. Terminate is soft: the thread refuses new work
(409), waiting turns are cancelled and the running one is aborted.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Subquery

from common.time import now_us
from threads.events import Outbox, publish
from threads.models import TURN_ACTIVE, TURN_TERMINAL, Message, RunStatus, Thread, Turn
from threads.services.fence import fence_acquire, fence_check
from threads.services.inbox import terminated_error, turn_cancel_request
from threads.services.lock import control_send, lock_acquire
from threads.services.messages import message_delete, message_inject
from threads.services.recovery import close_unanswered_calls
from threads.services.status import (
    thread_rest,
    thread_settle,
    turn_finish,
    turns_cancel_waiting,
)
from threads.services.subagents import link_close

STOPPED_BY_USER = "Execution stopped by user"
# What a cancelled turn's open calls and closing message say, by cancel mode.
CANCEL_TEXT = {
    "cancel": "Turn cancelled by user",
    "interrupt": "Turn interrupted by a newer turn",
}
# The outcome (stop reason) a cancelled turn records, by cancel mode.
CANCEL_OUTCOME = {"cancel": "cancelled", "interrupt": "interrupted", "rollback": "rolled_back"}


def _signal(thread: Thread, signal: str) -> None:
    control_send(tenant_id=thread.tenant_id, thread_id=thread.pk, signal=signal)


def active_turn(*, thread: Thread) -> Turn | None:
    """The turn a flow runs (or ran, when its worker died), if any."""
    return Turn.objects.filter(
        thread_id=thread.pk, host__isnull=True, status__in=TURN_ACTIVE
    ).first()


def paused_turn(*, thread: Thread) -> Turn | None:
    """The turn resting on a person's decision, or answered and waiting to resume (the
    thread's ``paused_turn``, read now), if any."""
    paused = Thread.objects.filter(pk=thread.pk).values("paused_turn_id")
    return Turn.objects.filter(pk=Subquery(paused)).first()


def current_turn(*, thread: Thread) -> Turn | None:
    """The turn a stop or terminate ends: the active one, else the paused one."""
    return active_turn(thread=thread) or paused_turn(thread=thread)


@dataclass(frozen=True)
class StopResult:
    """What a stop did: the running turn it stopped, or how many waiting turns it parked."""

    stopped_turn: Turn | None
    parked: int


def thread_stop(*, thread: Thread) -> StopResult:
    """POST .../stop. The running turn (if any) aborts and ends ``cancelled`` with its open
    calls closed and ``Execution stopped by user`` added; waiting turns are parked. A no-op
    (no flag, no message, no event) on a thread with nothing running or waiting. Conflict on
    a terminated thread."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        if locked.terminated_at is not None:
            raise terminated_error()
        running = current_turn(thread=thread)
        waiting = Turn.objects.filter(
            thread_id=thread.pk, host__isnull=True, status=RunStatus.QUEUED
        )
        if locked.paused_turn_id is not None:  # answered, not resumed: it ends, not parks
            waiting = waiting.exclude(pk=locked.paused_turn_id)
        parked = waiting.count()
        if running is None and parked == 0:
            return StopResult(None, 0)
        Thread.objects.filter(pk=thread.pk).update(stop_requested=True, updated_at=now_us())
        thread.stop_requested = True
        if running is not None:
            transaction.on_commit(lambda: _signal(thread, "stop"), robust=True)
    if running is not None:
        _finish_without_flow(thread)
    return StopResult(running, parked)


def _finish_without_flow(thread: Thread) -> None:
    """When no worker holds the thread (its flow's worker died, or its turn rests on a
    person's decision), end its running or paused turn here as the flow would have;
    otherwise the flow got the signal and does it."""
    lock = lock_acquire(tenant_id=thread.tenant_id, thread_id=thread.pk)
    if lock is None:
        return  # a flow runs: it sees the signal and ends the turn itself
    try:
        fence, _waiting = fence_acquire(thread=thread)
        turn = current_turn(thread=thread)
        if turn is not None:
            interrupted_turn_end(thread=thread, fence=fence, turn=turn)
    finally:
        lock.release()


def interruption_close(
    *, thread: Thread, fence: int, turn: Turn, outbox: Outbox | None = None
) -> str:
    """Close what an interrupted turn left open as the interruption's cause says, and return
    the outcome to record: ``terminated`` (its calls get ``Thread terminated``),
    ``aborted_by_user`` (a stop, or an abort with no cause recorded such as
    ``execution.stop()``), or the cancel's (see :func:`cancel_close`).

    Precondition: the caller holds the thread's lock with ``fence``, and ``thread``'s
    ``terminated_at`` and ``stop_requested`` and ``turn``'s ``cancel_requested`` are current.
    """
    if thread.terminated_at is not None:
        close_unanswered_calls(
            thread=thread, fence=fence, reason="Thread terminated", outbox=outbox
        )
        return "terminated"
    if not thread.stop_requested and turn.cancel_requested:
        return cancel_close(thread=thread, fence=fence, turn=turn, outbox=outbox)
    flow_id = outbox.flow_id if outbox is not None else None
    stop_close(thread=thread, fence=fence, flow_id=flow_id or None, outbox=outbox)
    return "aborted_by_user"


def interrupted_turn_end(*, thread: Thread, fence: int, turn: Turn) -> None:
    """A turn whose worker died while a stop, cancel or terminate was asked of it: close it
    as its flow would have and end it ``cancelled``, in one transaction. Precondition as
    :func:`interruption_close`."""
    with transaction.atomic():
        outcome = interruption_close(thread=thread, fence=fence, turn=turn)
        turn_finish(
            thread=thread, fence=fence, turn=turn, status=RunStatus.CANCELLED,
            rest=RunStatus.CANCELLED, outcome=outcome,
        )  # fmt: skip


def stop_close(
    *, thread: Thread, fence: int, flow_id: str | None = None, outbox: Outbox | None = None
) -> None:
    """Close what a stopped turn left open and add the stop message, as one transaction with
    their events. Precondition: the caller holds the thread's lock with ``fence``."""
    metadata = {"status_kind": "stopped_by_user", **({"flow_id": flow_id} if flow_id else {})}
    with transaction.atomic():
        close_unanswered_calls(thread=thread, fence=fence, reason=STOPPED_BY_USER, outbox=outbox)
        message_inject(
            thread=thread, role="system", content=STOPPED_BY_USER, metadata=metadata,
            fence=fence, outbox=outbox,
        )  # fmt: skip


def cancel_close(*, thread: Thread, fence: int, turn: Turn, outbox: Outbox | None = None) -> str:
    """Close a cancelled turn as its cancel mode says and return the outcome to record:
    ``cancel`` and ``interrupt`` close its open calls and add a system message (what it
    wrote stays); ``rollback`` deletes every message it wrote. Precondition: the caller
    holds the thread's lock with ``fence``."""
    mode = turn.cancel_requested or "cancel"
    with transaction.atomic():
        if mode == "rollback":
            written = Message.objects.filter(thread_id=thread.pk, turn_id=turn.pk)
            for message_id in written.order_by("-seq").values_list("id", flat=True):
                message_delete(thread=thread, message_id=message_id, fence=fence, outbox=outbox)
        else:
            text = CANCEL_TEXT.get(mode, CANCEL_TEXT["cancel"])
            close_unanswered_calls(thread=thread, fence=fence, reason=text, outbox=outbox)
            message_inject(
                thread=thread, role="system", content=text, fence=fence, outbox=outbox,
                metadata={"status_kind": f"turn_{CANCEL_OUTCOME[mode]}", "turn_id": str(turn.pk)},
            )  # fmt: skip
    return CANCEL_OUTCOME[mode]


def turn_cancel(*, thread: Thread, turn: Turn) -> Turn:
    """interrupt_turn (``POST /turns/{id}/cancel``): a waiting turn ends ``cancelled`` at once;
    a running or paused one is aborted and closed (what it wrote stays; its pending actions
    are cancelled); a finished one is left as it is. Idempotent. Returns the turn as it
    stands."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        turn.refresh_from_db()
        if turn.status in TURN_TERMINAL:
            return turn
        if turn.status == RunStatus.QUEUED and locked.paused_turn_id != turn.pk:
            turns_cancel_waiting(thread=thread, turn_ids=[turn.pk])
            thread_settle(thread=thread)
            turn.refresh_from_db()
            return turn
        if not turn.cancel_requested:
            turn_cancel_request(thread=thread, turn=turn, mode="cancel")
    _finish_without_flow(thread)
    turn.refresh_from_db()
    return turn


def thread_terminate(*, thread: Thread, keep_status: bool = False) -> bool:
    """Soft-terminate: set ``terminated_at``, cancel waiting turns, abort the running one;
    the parent's registry entry says ``terminated`` (``subagent.closed``) and the thread's
    live children are terminated too (runtime §10). ``keep_status``: a thread with nothing
    running keeps its status (a non-resumable child closed after its session completed).
    Idempotent; returns False when the thread was already terminated."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        if locked.terminated_at is not None:
            return False
        now = now_us()
        Thread.objects.filter(pk=thread.pk).update(terminated_at=now, updated_at=now)
        thread.terminated_at = now
        turns_cancel_waiting(thread=thread, outcome="terminated")
        running = current_turn(thread=thread)
        if running is not None:
            transaction.on_commit(lambda: _signal(thread, "terminate"), robust=True)
        elif keep_status:
            thread_settle(thread=thread)
        else:
            thread_rest(thread=thread, fence=None, rest=RunStatus.CANCELLED, reason="terminated")
        publish(thread, "thread.terminated", {"id": str(thread.pk), "terminated_at": now})
        link_close(child=thread, at=now)
        children = list(
            Thread.objects.filter(parent_id=thread.pk, terminated_at__isnull=True).select_related(
                "tenant"
            )
        )
    for child in children:
        thread_terminate(thread=child)
    if running is not None:
        _finish_without_flow(thread)
    return True


def child_close(*, child: Thread) -> None:
    """Close a non-resumable child once its session's outcome was delivered (runtime §10:
    "auto-terminated after delivering terminal payloads"); its status stays."""
    thread_terminate(thread=child, keep_status=True)
