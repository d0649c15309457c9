"""Taking turns to run, retrying, pausing for a person and carrying on.

A lock holder takes a turn's waiting inputs (:func:`turn_inputs_take`), flips ``running`` and
``retrying`` (:func:`turn_retrying`) and rests the turn on a person's decision
(:func:`turn_pause`); the answer queues it again (:func:`turn_release`) and the next lock
holder runs it on (:func:`turn_resume`). Each writes the thread's status with the turn's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from common.time import now_us
from threads.events import Outbox, publish
from threads.models import RunStatus, Thread, Turn
from threads.services.fence import StaleFence
from threads.services.message_shapes import jsonb_value
from threads.services.status.rules import ACTIVE, PAUSED, thread_status_publish, turn_json

S = RunStatus

# One statement: while ``fence`` is current and no paused turn holds the queue, take the
# turn's waiting inputs (the turn itself the first time, and what it queued for itself
# since), mark the thread running.
_TAKE = (
    "WITH t AS (SELECT id FROM threads_thread WHERE id = %(thread)s AND fence = %(fence)s "
    "AND paused_turn_id IS NULL FOR NO KEY UPDATE), "
    "taken AS (UPDATE threads_turn SET status = 'running', started_at = %(now)s, "
    "fence = %(fence)s WHERE thread_id IN (SELECT id FROM t) AND status = 'queued' "
    "AND (id = %(turn)s OR host_id = %(turn)s) RETURNING id, position, kind, payload, "
    "host_id), "
    "running AS (UPDATE threads_thread SET status = 'running', updated_at = %(now)s "
    "WHERE id IN (SELECT id FROM t) AND EXISTS (SELECT 1 FROM taken) "
    "AND status <> 'running' RETURNING id) "
    "SELECT id, position, kind, payload, host_id, EXISTS (SELECT 1 FROM running) "
    "FROM taken ORDER BY position"
)


def turn_inputs_take(
    *, thread: Thread, fence: int, turn: Turn, outbox: Outbox | None = None
) -> list[Turn]:
    """The waiting inputs of ``turn``, oldest first, now ``running`` under ``fence``: the
    turn itself while it is queued, then what it queued for itself. Nothing when ``fence``
    is stale. Precondition: the caller holds the thread's lock with ``fence``; run it in the
    transaction that stores what the inputs carry."""
    now = now_us()
    with connection.cursor() as cursor:
        cursor.execute(_TAKE, {"thread": thread.pk, "fence": fence, "now": now, "turn": turn.pk})
        rows = cursor.fetchall()
    taken = []
    for id, position, kind, payload, host_id, thread_changed in rows:
        item = turn if id == turn.pk else Turn(id=id, tenant_id=thread.tenant_id, thread=thread)
        item.position, item.kind, item.host_id = position, kind, host_id
        item.payload = jsonb_value(payload)
        item.status, item.fence, item.started_at = S.RUNNING, fence, now
        item._state.adding = False
        taken.append(item)
        if thread_changed and thread.status != S.RUNNING:
            thread.status = S.RUNNING
            publish(thread, "thread.status", {"status": S.RUNNING}, outbox=outbox)
    if taken:
        publish(
            thread, "queue.changed",
            {"change": "taken", "items": [turn_json(item) for item in taken]}, outbox=outbox,
        )  # fmt: skip
    return taken


_RUNNING_SWAP = (
    "WITH u AS (UPDATE threads_turn SET status = %(to)s WHERE id = %(turn)s "
    "AND status = %(from)s AND fence = %(fence)s RETURNING id) "
    "UPDATE threads_thread SET status = %(to)s, updated_at = %(now)s "
    "WHERE id = %(thread)s AND fence = %(fence)s AND status = %(from)s "
    "AND EXISTS (SELECT 1 FROM u)"
)


def turn_retrying(
    *, thread: Thread, fence: int, turn: Turn, retrying: bool, outbox: Outbox | None = None
) -> None:
    """``running`` <-> ``retrying`` for the turn and its thread (a model call's retry or
    fallback began, or the call answered). A no-op when already there or stale."""
    to, frm = (S.RETRYING, S.RUNNING) if retrying else (S.RUNNING, S.RETRYING)
    if turn.status != frm:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _RUNNING_SWAP,
            {"to": to, "from": frm, "turn": turn.pk, "fence": fence, "thread": thread.pk,
             "now": now_us()},
        )  # fmt: skip
        if cursor.rowcount == 1:
            turn.status = thread.status = to
            publish(thread, "thread.status", {"status": to}, outbox=outbox)


# Pausing for a person, and carrying on -----------------------------------------------------

# One statement: the running turn rests in ``waiting_permission``/``waiting_input`` and its
# running thread shows the same and records it as paused; only while ``fence`` is current.
_PAUSE = (
    "WITH t AS (UPDATE threads_thread SET status = %(to)s, paused_turn_id = %(turn)s, "
    "updated_at = %(now)s WHERE id = %(thread)s AND fence = %(fence)s "
    "AND status = ANY(%(active)s) AND EXISTS (SELECT 1 FROM threads_turn WHERE id = %(turn)s "
    "AND status = ANY(%(active)s) AND fence = %(fence)s) RETURNING id) "
    "UPDATE threads_turn SET status = %(to)s, resume = %(resume)s WHERE id = %(turn)s "
    "AND EXISTS (SELECT 1 FROM t)"
)


def turn_pause(
    *,
    thread: Thread,
    fence: int,
    turn: Turn,
    status: str,
    outbox: Outbox | None = None,
    resume: Mapping[str, Any] | None = None,
    reason: str = "action_required",
) -> None:
    """Rest the running ``turn`` in ``status`` (``waiting_permission`` or ``waiting_input``
    until a person answers; ``waiting_resource`` until a budget or quota has room, with
    where it carries on in ``resume``): no flow runs it and its thread's other turns wait
    behind it. With ``thread.status`` (its ``reason``); joins the caller's transaction.
    Raises StaleFence."""
    assert status in PAUSED
    before = thread.status
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _PAUSE,
            {"to": status, "turn": turn.pk, "active": ACTIVE, "fence": fence,
             "now": now_us(), "thread": thread.pk,
             "resume": None if resume is None else cast(Any, Jsonb(dict(resume)))},
        )  # fmt: skip
        paused = cursor.rowcount == 1
        if paused:
            turn.status = thread.status = status
            turn.resume = dict(resume) if resume is not None else None
            thread.paused_turn_id = turn.pk
            thread_status_publish(thread, before, reason, outbox)
    if not paused:
        raise StaleFence.of(thread, fence)


def turn_release(*, thread: Thread, turn: Turn, reason: str = "action_resolved") -> bool:
    """A person answered what ``turn`` waited for (or its budget or quota has room again,
    ``reason`` says which): it waits in the queue to be resumed (it
    stays the thread's paused turn, so it runs before the others), and its thread shows
    ``queued`` unless a stop parks it. With ``queue.changed`` (``resumed``) and the thread's
    status. Precondition: inside ``transaction.atomic`` with the thread row locked. False
    when the turn no longer waits."""
    before = thread.status
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE threads_turn SET status = 'queued' WHERE id = %s AND status = ANY(%s)",
            [turn.pk, sorted(PAUSED)],
        )
        if cursor.rowcount != 1:
            return False
        cursor.execute(
            "UPDATE threads_thread SET status = CASE WHEN stop_requested THEN status "
            "ELSE 'queued' END, updated_at = %s WHERE id = %s AND paused_turn_id = %s "
            "RETURNING status",
            [now_us(), thread.pk, turn.pk],
        )
        row = cursor.fetchone()
    turn.status = S.QUEUED
    if row is not None:
        thread.status = row[0]
        thread_status_publish(thread, before, reason, None)
    publish(thread, "queue.changed", {"change": "resumed", "item": turn_json(turn)})
    return True


# One statement: the answered paused turn of a thread shown ``queued`` (not parked by a
# stop) runs again under ``fence``; the thread no longer records it as paused.
_RESUME = (
    "WITH t AS (UPDATE threads_thread SET status = 'running', paused_turn_id = NULL, "
    "updated_at = %(now)s WHERE id = %(thread)s AND fence = %(fence)s AND status = 'queued' "
    "AND paused_turn_id = %(turn)s AND EXISTS (SELECT 1 FROM threads_turn WHERE id = %(turn)s "
    "AND status = 'queued') RETURNING id) "
    "UPDATE threads_turn SET status = 'running', fence = %(fence)s, resume = NULL "
    "WHERE id = %(turn)s AND EXISTS (SELECT 1 FROM t)"
)


def turn_resume(*, thread: Thread, fence: int, turn: Turn, outbox: Outbox | None = None) -> bool:
    """Run the answered paused ``turn`` again under ``fence`` (``running``, with
    ``queue.changed`` ``taken`` and the thread's status). False when it is not waiting to
    be resumed. Precondition: the caller holds the thread's lock with ``fence``."""
    before = thread.status
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _RESUME, {"fence": fence, "turn": turn.pk, "now": now_us(), "thread": thread.pk}
        )
        if cursor.rowcount != 1:
            return False
        turn.status, turn.fence = S.RUNNING, fence
        thread.status, thread.paused_turn_id = S.RUNNING, None
        thread_status_publish(thread, before, None, outbox)
        publish(
            thread, "queue.changed", {"change": "taken", "items": [turn_json(turn)]},
            outbox=outbox,
        )  # fmt: skip
    return True
