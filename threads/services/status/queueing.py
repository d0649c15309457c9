"""Entering and leaving the queue of turns: each change writes ``queue.changed`` with it.

A turn enters ``queued`` (:func:`turn_enqueue`), is cancelled while it waits
(:func:`turns_cancel_waiting`) or moves to the front (:func:`turn_promote`); a thread shown
``queued`` whose queue emptied rests again (:func:`thread_settle`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from common.time import now_us
from threads.events import Outbox, publish, publish_many
from threads.models import RunStatus, Thread, Turn
from threads.services.fence import HAS_WAITING
from threads.services.status.rules import (
    REST,
    thread_status_change,
    thread_status_publish,
    turn_json,
)

S = RunStatus

# One statement: lock the open thread's row (a terminated thread inserts nothing), lift a
# user stop when asked, show a resting thread as queued (not while a stop parks its turns
# or a paused turn holds the queue),
# then append the turn. The row lock is taken before the position is drawn, so positions
# follow commit order: the queue is FIFO. ``front`` puts the turn before every waiting one.
_ENQUEUE = (
    "WITH t AS (UPDATE threads_thread SET "
    "status = CASE WHEN (NOT stop_requested OR %(clear)s) AND status = ANY(%(rest)s) "
    "AND %(host)s::uuid IS NULL AND paused_turn_id IS NULL THEN 'queued' ELSE status END, "
    "updated_at = %(now)s, stop_requested = stop_requested AND NOT %(clear)s "
    "WHERE id = %(thread)s AND terminated_at IS NULL RETURNING id, status), "
    "ins AS (INSERT INTO threads_turn (id, tenant_id, thread_id, position, host_id, kind, "
    "source, strategy, payload, metadata, status, cancel_requested, created_at, outcome, error, "
    '"user") '
    "SELECT %(id)s, %(tenant)s, t.id, CASE WHEN %(front)s THEN LEAST(nextval("
    "'threads_turn_position_seq'), (SELECT MIN(position) - 1 FROM threads_turn w "
    "WHERE w.thread_id = t.id AND w.status = 'queued' AND w.host_id IS NULL)) "
    "ELSE nextval('threads_turn_position_seq') END, %(host)s, %(kind)s, %(source)s, "
    "%(strategy)s, %(payload)s, %(metadata)s, 'queued', '', %(now)s, '', '', %(user)s FROM t "
    "RETURNING position) "
    "SELECT ins.position, t.status FROM ins, t"
)


def turn_enqueue(
    *,
    turn: Turn,
    thread: Thread,
    clear_stop: bool = False,
    front: bool = False,
    outbox: Outbox | None = None,
) -> bool:
    """Insert ``turn`` (built, not saved) as ``queued``, with its ``queue.changed`` event and
    the thread's status; joins the caller's transaction. False when the thread is
    terminated or gone (nothing was written)."""
    from_json = Turn._meta.get_field("payload")
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        before = thread.status
        cursor.execute(
            _ENQUEUE,
            {"clear": clear_stop, "rest": list(REST), "host": turn.host_id, "now": turn.created_at,
             "thread": thread.pk, "id": turn.pk, "tenant": thread.tenant_id, "front": front,
             "kind": turn.kind, "source": turn.source, "strategy": turn.strategy,
             "payload": from_json.get_db_prep_save(turn.payload, connection),
             "metadata": from_json.get_db_prep_save(turn.metadata, connection),
             "user": turn.user},
        )  # fmt: skip
        row = cursor.fetchone()
        if row is None:
            return False
        turn.position, thread.status = row
        turn.status = S.QUEUED
        turn._state.adding = False
        status = thread_status_change(thread, before, None)
        added = ("queue.changed", {"change": "added", "item": turn_json(turn)})
        events = [added] if status is None else [status, added]
        if outbox is None:
            publish_many(thread, events)  # one statement for both
        else:
            for event in events:
                publish(thread, *event, outbox=outbox)
    return True


def turns_cancel_waiting(
    *, thread: Thread, turn_ids: Sequence[Any] | None = None, change: str = "cancelled",
    outcome: str = "cancelled",
) -> list[Turn]:  # fmt: skip
    """Cancel waiting turns (``turn_ids``, or all of the thread's), with one
    ``queue.changed`` (``change``: ``cancelled`` or ``removed``); returns them. An answered
    paused turn waiting to resume is not among them: it ends as a running turn does.
    Precondition: inside ``transaction.atomic`` with the thread row locked (a take cannot
    race it)."""
    paused = Thread.objects.filter(pk=thread.pk, paused_turn_id=OuterRef("pk"))
    rows = Turn.objects.filter(thread_id=thread.pk, status=S.QUEUED).exclude(Exists(paused))
    if turn_ids is not None:
        rows = rows.filter(pk__in=turn_ids)
    cancelled = list(rows.select_for_update())
    if not cancelled:
        return []
    now = now_us()
    Turn.objects.filter(pk__in=[turn.pk for turn in cancelled]).update(
        status=S.CANCELLED, ended_at=now, outcome=outcome
    )
    for turn in cancelled:
        turn.status, turn.ended_at, turn.outcome = S.CANCELLED, now, outcome
    publish(thread, "queue.changed", {"change": change, "items": [turn_json(t) for t in cancelled]})
    return cancelled


def turn_promote(*, thread: Thread, turn: Turn) -> None:
    """Move a waiting turn before every other waiting turn, with ``queue.changed``.
    Precondition: inside ``transaction.atomic`` with the thread row locked."""
    first = (
        Turn.objects.filter(thread_id=thread.pk, status=S.QUEUED, host__isnull=True)
        .order_by("position")
        .values_list("position", flat=True)
        .first()
    )
    if first is not None and first < turn.position:
        turn.position = first - 1
        Turn.objects.filter(pk=turn.pk).update(position=turn.position)
    publish(thread, "queue.changed", {"change": "promoted", "item": turn_json(turn)})


def thread_settle(*, thread: Thread) -> None:
    """After a queue change by someone holding no lock: a thread shown ``queued`` whose
    queue emptied shows its rest status again. One statement; ``thread.status`` when it
    changed."""
    before = thread.status
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE threads_thread SET status = rest_status, updated_at = %s "  # noqa: S608
            f"WHERE id = %s AND status = 'queued' AND NOT {HAS_WAITING} RETURNING status",
            [now_us(), thread.pk],
        )
        row = cursor.fetchone()
        if row is not None:
            thread.status = row[0]
            thread_status_publish(thread, before, None, None)
