"""Turns: read one or a thread's, remove or promote a waiting one, and the thread read model.

Submitting is :mod:`threads.services.inbox`; cancelling is :mod:`threads.services.control`;
status changes go through :mod:`threads.services.status`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Q, QuerySet

from common.errors import Conflict, NotFound, ValidationFailed
from common.ids import id_of
from common.rows import columns_of
from common.time import now_us
from tenancy.models import Tenant
from threads.events import EventType
from threads.models import (
    TURN_ACTIVE,
    Event,
    Log,
    Message,
    MessageStatus,
    RunStatus,
    Thread,
    Turn,
)
from threads.services.actions import pending_actions
from threads.services.control import paused_turn
from threads.services.fence import fence_check
from threads.services.lock import lock_is_held
from threads.services.message_shapes import StoredMessage, message_answer, stored_json
from threads.services.spending import routing_limit_summary
from threads.services.status import thread_settle, turn_json, turn_promote, turns_cancel_waiting
from threads.services.variable_requests import pending_variable_requests

INCIDENTS_SHOWN = 5

_TURN_MESSAGES_SQL = (
    f"SELECT {', '.join(StoredMessage._fields)} FROM threads_message "  # noqa: S608
    "WHERE thread_id = %s AND turn_id = %s ORDER BY seq"
)


def turn_get(*, tenant: Tenant, turn_id: uuid.UUID | str) -> Turn:
    """``tenant``'s turn (its thread attached, and to it ``tenant``); another tenant's, or
    a malformed id, is NotFound. One hand-written statement (:mod:`common.rows`), scoped to
    the tenant as ``for_tenant`` scopes."""
    try:
        key = id_of(turn_id)
    except ValueError as error:
        raise NotFound(f"no turn {turn_id}") from error
    turns, threads = columns_of(Turn), columns_of(Thread)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {turns.sql}, {threads.sql} FROM threads_turn "  # noqa: S608
            "JOIN threads_thread ON threads_thread.id = threads_turn.thread_id "
            "WHERE threads_turn.id = %s AND threads_turn.tenant_id = %s",
            [key, tenant.pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound(f"no turn {turn_id}")
    turn, thread = turns.build(row[: len(turns)]), threads.build(row[len(turns) :])
    Thread.tenant.field.set_cached_value(thread, tenant)
    Turn.thread.field.set_cached_value(turn, thread)
    return turn


def turn_reread(*, turn: Turn) -> Turn | None:
    """``turn`` as stored now (its thread attached as ``turn``'s is); None when it is gone."""
    turns = columns_of(Turn)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {turns.sql} FROM threads_turn WHERE id = %s", [turn.pk])  # noqa: S608
        row = cursor.fetchone()
    if row is None:
        return None
    current = turns.build(row)
    if Turn.thread.is_cached(turn):
        Turn.thread.field.set_cached_value(current, turn.thread)
    return current


def turn_status(*, turn: Turn) -> str | None:
    """``turn``'s stored status (None when it is gone): the cheapest look."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT status FROM threads_turn WHERE id = %s", [turn.pk])
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def turn_list(*, thread: Thread, status: str | None = None) -> QuerySet[Turn]:
    """The thread's turns, newest first (inputs that joined a turn are listed with it);
    ``status`` filters by the stored status."""
    rows = Turn.objects.for_tenant(thread.tenant).filter(thread=thread, host__isnull=True)
    if status is not None:
        if status not in RunStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(RunStatus.values)}", field="status"
            )
        rows = rows.filter(status=status)
    return rows.order_by("-created_at", "-position")


def turn_message_ids(*, turns: Sequence[Turn]) -> dict[uuid.UUID, list[str]]:
    """The ids of the messages each turn wrote, in order (one hand-written statement: every
    turn read answers them)."""
    found: dict[uuid.UUID, list[str]] = {turn.pk: [] for turn in turns}
    if not found:
        return found
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT turn_id, id FROM threads_message WHERE turn_id = ANY(%s) ORDER BY seq",
            [list(found)],
        )
        for turn_id, message_id in cursor.fetchall():
            found[turn_id].append(str(message_id))
    return found


def turn_messages(*, turn: Turn) -> list[dict[str, Any]]:
    """The messages ``turn`` wrote (its answer among them), oldest first, as the API
    answers them (:func:`message_answer`)."""
    return stored_json(_TURN_MESSAGES_SQL, [turn.thread_id, turn.pk], shape=message_answer)


def _check_waiting(turn: Turn, paused_turn_id: Any, change: str) -> None:
    """Conflict unless ``turn`` waits in the queue as a turn of its own that never ran."""
    if turn.status != RunStatus.QUEUED or turn.host_id is not None:
        raise Conflict(f"turn {turn.pk} is {turn.status}; only a queued turn can be {change}")
    if turn.pk == paused_turn_id:
        raise Conflict(
            f"turn {turn.pk} resumes after a person's decision; it can be cancelled, not {change}"
        )


def turn_remove(*, thread: Thread, turn: Turn) -> Turn:
    """remove_queued_turn: a waiting turn ends ``cancelled`` (``queue.changed`` removed).
    Conflict when it is not waiting."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        turn.refresh_from_db()
        _check_waiting(turn, locked.paused_turn_id, "removed")
        turns_cancel_waiting(thread=thread, turn_ids=[turn.pk], change="removed", outcome="removed")
        thread_settle(thread=thread)
    turn.refresh_from_db()
    return turn


def turn_promote_queued(*, thread: Thread, turn: Turn) -> Turn:
    """promote_queued_turn: a waiting turn moves to the front of the queue
    (``queue.changed`` promoted). Conflict when it is not waiting."""
    with transaction.atomic():
        locked = fence_check(thread=thread, fence=None)
        turn.refresh_from_db()
        _check_waiting(turn, locked.paused_turn_id, "promoted")
        turn_promote(thread=thread, turn=turn)
    return turn


# The read model --------------------------------------------------------------------------


def _worker_holds(thread: Thread) -> bool | None:
    """Whether a worker holds the thread's lock; None when Redis cannot be asked."""
    try:
        return lock_is_held(tenant_id=thread.tenant_id, thread_id=thread.pk)
    except redis.RedisError:
        return None


def read_status(thread: Thread) -> str:
    """The thread's status as the read model shows it: the stored status, refined where
    only a read can know: ``lost`` (a turn runs but no worker holds the thread), ``stale``
    (the lock store cannot be asked), ``streaming`` (a model answer is being streamed),
    ``waiting_resource`` (stored while a turn waits for a budget or quota; derived when turns
    have waited past twice the sweep interval and no worker holds the thread)."""
    stored = thread.status
    if stored in TURN_ACTIVE:
        live = _worker_holds(thread)
        if live is None:
            return RunStatus.STALE
        if not live:
            return RunStatus.LOST
        if (
            stored == RunStatus.RUNNING
            and Message.objects.filter(
                thread_id=thread.pk, status=MessageStatus.PENDING, depth=0
            ).exists()
        ):
            return RunStatus.STREAMING
        return stored
    if stored == RunStatus.QUEUED and not thread.stop_requested:
        oldest = (
            Turn.objects.filter(thread_id=thread.pk, status=RunStatus.QUEUED, host__isnull=True)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        patience_us = 2 * settings.THREAD_SWEEP_INTERVAL_S * 1_000_000
        if oldest is not None and now_us() - oldest > patience_us:
            live = _worker_holds(thread)
            if live is False:
                return RunStatus.WAITING_RESOURCE
    return stored


# The stored statuses a derived one is read from.
_DERIVED_FROM = {
    RunStatus.STREAMING: (RunStatus.RUNNING,),
    RunStatus.LOST: tuple(TURN_ACTIVE),
    RunStatus.STALE: tuple(TURN_ACTIVE),
    RunStatus.WAITING_RESOURCE: (RunStatus.QUEUED, RunStatus.WAITING_RESOURCE),
}
# Stored statuses the read model may show as a derived one instead.
_REFINED = frozenset({RunStatus.RUNNING, RunStatus.RETRYING, RunStatus.QUEUED})
# A derived status filter looks at this many of the newest candidate threads.
DERIVED_FILTER_CAP = 1000


def threads_in_status(rows: QuerySet[Thread], status: str) -> QuerySet[Thread]:
    """``rows`` whose read-model status is ``status``. A status the read model never refines
    filters the column; one it derives (``lost``, ``stale``, ``streaming``,
    ``waiting_resource``) or refines (``running``, ``retrying``, ``queued``) is read for the
    newest :data:`DERIVED_FILTER_CAP` threads stored in what it comes from."""
    sources = _DERIVED_FROM.get(RunStatus(status))
    if sources is None and status not in _REFINED:
        return rows.filter(status=status)
    candidates = rows.filter(status__in=sources or (status,)).order_by("-created_at")
    matching = [row.pk for row in candidates[:DERIVED_FILTER_CAP] if read_status(row) == status]
    return rows.filter(pk__in=matching)


def _outcome(turn: Turn | None) -> dict[str, Any] | None:
    if turn is None:
        return None
    return {"turn_id": str(turn.pk), "status": turn.status, "outcome": turn.outcome or None,
            "error": turn.error or None, "ended_at": turn.ended_at}  # fmt: skip


def thread_read_model(*, thread: Thread) -> dict[str, Any]:
    """get_thread_read: status, the active turn, the queued turns in order, the last
    outcome, pending requests and recent incidents."""
    turns = Turn.objects.filter(thread_id=thread.pk, host__isnull=True)
    # The running turn, else the one resting on a person's decision.
    active = turns.filter(status__in=TURN_ACTIVE).first() or paused_turn(thread=thread)
    queued = list(turns.filter(status=RunStatus.QUEUED).order_by("position"))
    last = turns.filter(ended_at__isnull=False).order_by("-ended_at").first()
    incidents = Log.objects.filter(thread_id=thread.pk, kind="incident").order_by("-created_at")
    return {
        "status": read_status(thread),
        "stored_status": thread.status,
        "stop_requested": thread.stop_requested,
        "active_turn": turn_json(active) if active is not None else None,
        "queued_turns": [turn_json(turn) for turn in queued],
        "last_outcome": _outcome(last),
        # What waits for a person: the actions a turn rests on (approvals, input requests)
        # and the variable-bootstrap requests of deferred subagents, oldest first.
        "pending_requests": [
            *pending_actions(thread=thread),
            *pending_variable_requests(thread=thread),
        ],
        "incidents": [{"at": row.created_at, **row.data} for row in incidents[:INCIDENTS_SHOWN]],
        "routing_limit_summary": routing_limit_summary(thread=thread, turn=active),
    }


def turn_events_start(turn: Turn) -> int:
    """The sequence after which ``turn``'s events come (a stream of the turn replays from
    it): before its first event (its ``queue.changed`` ``added``), or the thread's newest
    when it has none yet (one read, so none can slip between)."""
    found = Event.objects.filter(thread_id=turn.thread_id).aggregate(
        first=Min(
            "sequence",
            filter=Q(turn_id=str(turn.pk))
            | Q(type=EventType.QUEUE_CHANGED, payload__item__id=str(turn.pk)),
        ),
        newest=Max("sequence"),
    )
    if found["first"] is not None:
        return int(found["first"]) - 1
    return int(found["newest"] or 0)
