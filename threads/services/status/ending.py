"""Ending turns, and letting a thread rest.

:func:`turn_finish` ends the running (or paused) turn and what joined it in one statement,
cancelling its pending actions (``_ACTIONS_CANCEL``); :func:`thread_rest` lets a thread with
no running turn rest; :func:`turn_fail_crashed` does either when a flow raised. Each writes
``thread.status`` when the thread's status changed, and a turn's end its end event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction

from common.time import now_us
from threads.events import TURN_END_EVENTS, Outbox, publish
from threads.models import TURN_TERMINAL, RunStatus, Thread, Turn
from threads.services.fence import HAS_WAITING, STATE_COLUMNS, StaleFence, apply_state
from threads.services.status.rules import ACTIVE, PAUSED, REST, thread_status_publish

S = RunStatus

# The pending actions of the turn being ended (a CTE of _END): cancelled, since their turn
# ends first (a stop, cancel or terminate while it waited).
_ACTIONS_CANCEL = (
    "UPDATE threads_action SET status = 'cancelled', resolved_at = %(now)s "
    "WHERE turn_id = %(turn)s AND status = 'pending' "
    "RETURNING id, kind, tool_call_id, tool_name"
)
# An input its flow queued for itself (``queue_message``) is part of the turn: cancelled with
# it. One that joined from outside (a posted message, ``multitask_strategy=join``) is
# someone's request: never cancelled with the turn it joined, it waits as a turn of its own.
_KEPT = "(%(keep)s OR source <> 'queue_message')"
_LEFT_OVER = (
    "EXISTS (SELECT 1 FROM threads_turn l WHERE l.host_id = %(turn)s AND l.status = 'queued' "  # noqa: S608
    f"AND {_KEPT})"
)
# One statement: the running (or paused) turn and the inputs it drained end; inputs it
# never drained become turns of their own (or, when it was cancelled, those it queued for
# itself are cancelled with it); its pending actions are cancelled; the thread no longer records it
# as paused and rests in ``rest``, or shows ``queued`` when turns wait and no stop parks
# them. Only while ``fence`` is current. Built from constants; every value is a parameter.
_END = (
    # The row as it was (a statement's CTEs share one snapshot): was the turn paused?
    "WITH was AS (SELECT paused_turn_id FROM threads_thread WHERE id = %(thread)s), "  # noqa: S608
    "t AS (UPDATE threads_thread SET "
    f"status = CASE WHEN NOT stop_requested AND ({HAS_WAITING} OR {_LEFT_OVER}) "
    "THEN 'queued' ELSE %(rest)s END, rest_status = %(rest)s, acting_side = '', "
    "paused_turn_id = CASE WHEN paused_turn_id = %(turn)s THEN NULL ELSE paused_turn_id END, "
    f"updated_at = %(now)s WHERE id = %(thread)s AND fence = %(fence)s "
    f"RETURNING id, {STATE_COLUMNS}, {_LEFT_OVER}), "
    "ended AS (UPDATE threads_turn SET status = %(status)s, ended_at = %(now)s, "
    "outcome = %(outcome)s, error = %(error)s, usage = %(usage)s, cancel_requested = '' "
    "WHERE thread_id IN (SELECT id FROM t) AND ((id = %(turn)s AND status = ANY(%(active)s)) "
    # A paused turn (waiting, or answered and queued to resume) ends only cancelled.
    "OR (id = %(turn)s AND %(status)s = 'cancelled' AND (status = ANY(%(paused)s) "
    "OR (status = 'queued' AND %(turn)s IN (SELECT paused_turn_id FROM was)))) "
    "OR (host_id = %(turn)s AND status = ANY(%(active)s))) RETURNING id), "
    f"left_over AS (UPDATE threads_turn SET host_id = CASE WHEN {_KEPT} THEN NULL "
    f"ELSE host_id END, status = CASE WHEN {_KEPT} THEN status ELSE 'cancelled' END, "
    f"ended_at = CASE WHEN {_KEPT} THEN NULL ELSE %(now)s END "
    "WHERE thread_id IN (SELECT id FROM t) AND host_id = %(turn)s AND status = 'queued'), "
    # A person's decisions the turn still waited for are moot now.
    f"moot AS ({_ACTIONS_CANCEL}) "
    "SELECT t.*, EXISTS (SELECT 1 FROM ended WHERE id = %(turn)s), "
    "(SELECT array_agg(ARRAY[id::text, kind, tool_call_id, tool_name]) FROM moot) FROM t"
)


_THREAD_LOCK = "SELECT 1 FROM threads_thread WHERE id = %s FOR NO KEY UPDATE"


def turn_finish(
    *,
    thread: Thread,
    fence: int,
    turn: Turn,
    status: str,
    rest: str,
    outcome: str,
    error: str = "",
    usage: Mapping[str, Any] | None = None,
    outbox: Outbox | None = None,
) -> bool:
    """End ``turn`` (and what joined it) in ``status`` with ``outcome`` (the stop reason) and
    let the thread rest in ``rest``, or show ``queued`` when turns wait; one statement, with
    ``thread.status`` (when it changed) and the turn's end event. Refreshes ``thread`` as
    :func:`threads.services.fence.thread_refresh` does and returns whether turns wait.
    Raises StaleFence when ``fence`` is no longer the thread's."""
    assert status in TURN_TERMINAL
    assert rest in REST
    usage_field = Turn._meta.get_field("usage")
    before = thread.status
    now = now_us()
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        # The thread row first, in a statement of its own: an input joining this turn
        # (threads.services.inbox) holds that row until it commits, and _END's snapshot,
        # taken after this wait, then sees it as left over (a single statement's snapshot
        # would predate the wait, and the joined input would be orphaned).
        cursor.execute(_THREAD_LOCK, [thread.pk])
        cursor.execute(
            _END,
            {"rest": rest, "now": now, "thread": thread.pk, "fence": fence, "status": status,
             "outcome": outcome, "error": error[:10_000],
             "usage": usage_field.get_db_prep_save(usage, connection), "turn": turn.pk,
             "active": ACTIVE, "paused": sorted(PAUSED), "keep": status != S.CANCELLED},
        )  # fmt: skip
        row = cursor.fetchone()
        if row is not None:
            *state, left_over, ended, moot = row[1:]
            waiting = apply_state(thread, state) or bool(left_over)
            for action_id, kind, call_id, name in moot or ():
                publish(
                    thread, "action.resolved",
                    {"action_id": str(action_id), "turn_id": str(turn.pk), "kind": kind,
                     "tool_call_id": call_id, "name": name, "status": "cancelled"},
                    outbox=outbox,
                )  # fmt: skip
            thread_status_publish(thread, before, outcome, outbox)
        if row is not None and thread.paused_turn_id == turn.pk:
            thread.paused_turn_id = None
        if row is not None and ended:  # a turn cancelled before it started has ended already
            turn.status, turn.ended_at, turn.outcome, turn.error = status, now, outcome, error
            turn.usage = dict(usage) if usage is not None else None
            publish(
                thread, TURN_END_EVENTS[status],
                {"turn_id": str(turn.pk), "status": status, "reason": outcome,
                 "flow_id": outbox.flow_id if outbox is not None else "", "usage": turn.usage,
                 "started_at": turn.started_at},
                outbox=outbox,
            )  # fmt: skip
    if row is None:  # nothing was written; raised after the block, as in message_inject
        raise StaleFence.of(thread, fence)
    return waiting


def thread_rest(
    *, thread: Thread, fence: int | None, rest: str, reason: str | None = None,
    outbox: Outbox | None = None,
) -> None:  # fmt: skip
    """Let a thread with no running turn rest in ``rest`` (``queued`` while turns wait and
    no stop parks them), with ``thread.status`` when it changed. ``fence`` None: a caller
    that holds no lock (a queue change that emptied the queue)."""
    assert rest in REST
    before = thread.status
    sql = (
        "UPDATE threads_thread SET status = CASE WHEN NOT stop_requested AND "  # noqa: S608
        f"{HAS_WAITING} THEN 'queued' ELSE %s END, rest_status = %s, acting_side = '', "
        "updated_at = %s WHERE id = %s AND (%s::bigint IS NULL OR fence = %s) "
        f"AND status <> ALL(%s) RETURNING status"
    )
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(sql, [rest, rest, now_us(), thread.pk, fence, fence, ACTIVE])
        row = cursor.fetchone()
        if row is not None:
            thread.status, thread.rest_status = row[0], rest
            thread_status_publish(thread, before, reason, outbox)
    # Nothing written: a running turn holds the status, or (raised after the block, as in
    # message_inject) the fence is stale.
    if row is None and fence is not None:
        current = Thread.objects.filter(pk=thread.pk, fence=fence).exists()
        if not current:
            raise StaleFence.of(thread, fence)


def turn_fail_crashed(*, thread: Thread, fence: int, turn: Turn | None, error: str) -> None:
    """A flow raised (a bug or a broken definition): its turn and the thread show
    ``failed``, with their events, and wait for a new request instead of a retry loop."""
    with transaction.atomic():
        if turn is not None and turn.status not in TURN_TERMINAL:
            turn_finish(
                thread=thread, fence=fence, turn=turn, status=S.FAILED, rest=S.FAILED,
                outcome="step_error", error=error,
            )  # fmt: skip
        else:
            thread_rest(thread=thread, fence=fence, rest=S.FAILED, reason="step_error")
