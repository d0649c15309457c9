"""The one door for status changes of threads and turns.

Every change of ``Thread.status`` or ``Turn.status`` happens here and writes the row and its
event in one transaction: ``thread.status`` once per change of the thread's status,
``queue.changed`` for every change to the queue of turns, ``turn.started`` and the turn's
end (``turn.completed``, ``turn.failed``, ``turn.cancelled``). The statements the engine runs
on every turn are literal SQL, one per change, with the transition rules in their ``WHERE``
and ``CASE`` clauses; :data:`THREAD_TRANSITIONS` and :data:`TURN_TRANSITIONS` state the same
rules as tables (a test drives every statement from every status and checks the table).

Statuses are the vocabulary of :class:`threads.models.RunStatus`. A thread's stored status is
``queued`` while turns wait, ``running``/``retrying`` while one runs, and otherwise its
``rest_status``: how its last turn ended (``completed``, ``waiting_input``, ``failed``,
``cancelled``, ``blocked``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from common.time import now_us
from threads.events import TURN_END_EVENTS, Outbox, publish, publish_many
from threads.models import THREAD_REST, TURN_PAUSED, TURN_TERMINAL, RunStatus, Thread, Turn
from threads.services.fence import HAS_WAITING, STATE_COLUMNS, StaleFence, apply_state
from threads.services.messages import jsonb_value

S = RunStatus

# Which stored status may follow which (a thread's status outside these never changes).
_REST = frozenset(THREAD_REST)
# A paused turn's thread shows its turn's status (``waiting_input`` is also a rest status).
_PAUSED = frozenset(TURN_PAUSED)
THREAD_TRANSITIONS: Mapping[str, frozenset[str]] = {
    **{rest: frozenset({S.QUEUED, S.RUNNING, S.CANCELLED} | _REST) for rest in _REST},
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED} | _REST),
    S.RUNNING: frozenset({S.RETRYING, S.QUEUED, S.CANCELLED} | _REST | _PAUSED),
    S.RETRYING: frozenset({S.RUNNING, S.QUEUED, S.CANCELLED} | _REST | _PAUSED),
    S.WAITING_PERMISSION: frozenset({S.QUEUED, S.CANCELLED} | _REST),
}
TURN_TRANSITIONS: Mapping[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.RETRYING} | TURN_TERMINAL | _PAUSED),
    S.RETRYING: frozenset({S.RUNNING} | TURN_TERMINAL | _PAUSED),
    # Answered: queued to be resumed; or ended while it waited (a stop, cancel, terminate).
    **{paused: frozenset({S.QUEUED, S.CANCELLED}) for paused in _PAUSED},
    **{end: frozenset() for end in TURN_TERMINAL},
}
_ACTIVE = [S.RUNNING, S.RETRYING]
# The statuses of the vocabulary no row holds, and why; docs/engine.md says the same.
NOT_STORED: Mapping[str, str] = {
    S.ACCEPTED: "a turn is stored queued in the transaction that accepts it; the 202 answer "
    "is the acceptance",
    S.PREPARING: "context, model and tools are resolved inside running, in the same step",
    S.STREAMING: "read model only: a model answer of the running turn is pending",
    S.LOST: "read model only: a turn runs and no worker holds the thread's lock",
    S.STALE: "read model only: the lock store cannot be asked whether a worker is alive",
    S.WAITING_RESOURCE: "read model only: turns waited past twice the sweep interval and no "
    "worker holds the thread",
}


def turn_json(turn: Turn, *, message_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """A turn as the API shows it (and as ``queue.changed`` carries it)."""
    body: dict[str, Any] = {
        "id": str(turn.id),
        "thread_id": str(turn.thread_id),
        "kind": turn.kind,
        "source": turn.source,
        "strategy": turn.strategy,
        "status": turn.status,
        "input": turn.payload,
        "metadata": turn.metadata,
        "created_at": turn.created_at,
        "started_at": turn.started_at,
        "ended_at": turn.ended_at,
        "outcome": turn.outcome or None,
        "error": turn.error or None,
        "usage": turn.usage,
        "joined_turn_id": str(turn.host_id) if turn.host_id else None,
    }
    if message_ids is not None:
        body["message_ids"] = list(message_ids)
    return body


def _thread_status_event(
    thread: Thread, before: str, reason: str | None, outbox: Outbox | None
) -> None:
    event = _thread_status_change(thread, before, reason)
    if event is not None:
        publish(thread, *event, outbox=outbox)


def _thread_status_change(
    thread: Thread, before: str, reason: str | None
) -> tuple[str, dict[str, Any]] | None:
    """The ``thread.status`` event for a change from ``before``, if the status changed."""
    if thread.status == before:
        return None
    payload: dict[str, Any] = {"status": thread.status}
    if reason:
        payload["reason"] = reason
    return "thread.status", payload


# Entering the queue --------------------------------------------------------------------------

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
    "source, strategy, payload, metadata, status, cancel_requested, created_at, outcome, error) "
    "SELECT %(id)s, %(tenant)s, t.id, CASE WHEN %(front)s THEN LEAST(nextval("
    "'threads_turn_position_seq'), (SELECT MIN(position) - 1 FROM threads_turn w "
    "WHERE w.thread_id = t.id AND w.status = 'queued' AND w.host_id IS NULL)) "
    "ELSE nextval('threads_turn_position_seq') END, %(host)s, %(kind)s, %(source)s, "
    "%(strategy)s, %(payload)s, %(metadata)s, 'queued', '', %(now)s, '', '' FROM t "
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
            {"clear": clear_stop, "rest": list(_REST), "host": turn.host_id, "now": turn.created_at,
             "thread": thread.pk, "id": turn.pk, "tenant": thread.tenant_id, "front": front,
             "kind": turn.kind, "source": turn.source, "strategy": turn.strategy,
             "payload": from_json.get_db_prep_save(turn.payload, connection),
             "metadata": from_json.get_db_prep_save(turn.metadata, connection)},
        )  # fmt: skip
        row = cursor.fetchone()
        if row is None:
            return False
        turn.position, thread.status = row
        turn.status = S.QUEUED
        turn._state.adding = False
        status = _thread_status_change(thread, before, None)
        added = ("queue.changed", {"change": "added", "item": turn_json(turn)})
        events = [added] if status is None else [status, added]
        if outbox is None:
            publish_many(thread, events)  # one statement for both
        else:
            for event in events:
                publish(thread, *event, outbox=outbox)
    return True


# Taking and running ---------------------------------------------------------------------------

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
    with connection.cursor() as cursor:
        cursor.execute(
            _TAKE, {"thread": thread.pk, "fence": fence, "now": now_us(), "turn": turn.pk}
        )
        rows = cursor.fetchall()
    taken = []
    for id, position, kind, payload, host_id, thread_changed in rows:
        item = turn if id == turn.pk else Turn(id=id, tenant_id=thread.tenant_id, thread=thread)
        item.position, item.kind, item.host_id = position, kind, host_id
        item.payload = jsonb_value(payload)
        item.status, item.fence = S.RUNNING, fence
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
    "UPDATE threads_turn SET status = %(to)s WHERE id = %(turn)s AND EXISTS (SELECT 1 FROM t)"
)


def turn_pause(
    *, thread: Thread, fence: int, turn: Turn, status: str, outbox: Outbox | None = None
) -> None:
    """Rest the running ``turn`` in ``status`` (``waiting_permission`` or ``waiting_input``)
    until a person answers: no flow runs it and its thread's other turns wait behind it.
    With ``thread.status``; joins the caller's transaction. Raises StaleFence."""
    assert status in _PAUSED
    before = thread.status
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _PAUSE,
            {"to": status, "turn": turn.pk, "active": _ACTIVE, "fence": fence,
             "now": now_us(), "thread": thread.pk},
        )  # fmt: skip
        paused = cursor.rowcount == 1
        if paused:
            turn.status = thread.status = status
            thread.paused_turn_id = turn.pk
            _thread_status_event(thread, before, "action_required", outbox)
    if not paused:
        raise StaleFence.of(thread, fence)


def turn_release(*, thread: Thread, turn: Turn) -> bool:
    """A person answered what ``turn`` waited for: it waits in the queue to be resumed (it
    stays the thread's paused turn, so it runs before the others), and its thread shows
    ``queued`` unless a stop parks it. With ``queue.changed`` (``resumed``) and the thread's
    status. Precondition: inside ``transaction.atomic`` with the thread row locked. False
    when the turn no longer waits."""
    before = thread.status
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE threads_turn SET status = 'queued' WHERE id = %s AND status = ANY(%s)",
            [turn.pk, sorted(_PAUSED)],
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
        _thread_status_event(thread, before, "action_resolved", None)
    publish(thread, "queue.changed", {"change": "resumed", "item": turn_json(turn)})
    return True


# One statement: the answered paused turn of a thread shown ``queued`` (not parked by a
# stop) runs again under ``fence``; the thread no longer records it as paused.
_RESUME = (
    "WITH t AS (UPDATE threads_thread SET status = 'running', paused_turn_id = NULL, "
    "updated_at = %(now)s WHERE id = %(thread)s AND fence = %(fence)s AND status = 'queued' "
    "AND paused_turn_id = %(turn)s AND EXISTS (SELECT 1 FROM threads_turn WHERE id = %(turn)s "
    "AND status = 'queued') RETURNING id) "
    "UPDATE threads_turn SET status = 'running', fence = %(fence)s WHERE id = %(turn)s "
    "AND EXISTS (SELECT 1 FROM t)"
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
        _thread_status_event(thread, before, None, outbox)
        publish(
            thread, "queue.changed", {"change": "taken", "items": [turn_json(turn)]},
            outbox=outbox,
        )  # fmt: skip
    return True


# Ending -----------------------------------------------------------------------------------

# The pending actions of the turn being ended (a CTE of _END): cancelled, since their turn
# ends first (a stop, cancel or terminate while it waited).
ACTIONS_CANCEL = (
    "UPDATE threads_action SET status = 'cancelled', resolved_at = %(now)s "
    "WHERE turn_id = %(turn)s AND status = 'pending' "
    "RETURNING id, kind, tool_call_id, tool_name"
)
_LEFT_OVER = (
    "EXISTS (SELECT 1 FROM threads_turn l WHERE l.host_id = %(turn)s AND l.status = 'queued')"
)
# One statement: the running (or paused) turn and the inputs it drained end; inputs it
# queued for itself but never drained become turns of their own (or, when it was cancelled,
# are cancelled with it); its pending actions are cancelled; the thread no longer records it
# as paused and rests in ``rest``, or shows ``queued`` when turns wait and no stop parks
# them. Only while ``fence`` is current. Built from constants; every value is a parameter.
_END = (
    # The row as it was (a statement's CTEs share one snapshot): was the turn paused?
    "WITH was AS (SELECT paused_turn_id FROM threads_thread WHERE id = %(thread)s), "  # noqa: S608
    "t AS (UPDATE threads_thread SET "
    f"status = CASE WHEN NOT stop_requested AND ({HAS_WAITING} OR (%(keep)s AND {_LEFT_OVER})) "
    "THEN 'queued' ELSE %(rest)s END, rest_status = %(rest)s, acting_side = '', "
    "paused_turn_id = CASE WHEN paused_turn_id = %(turn)s THEN NULL ELSE paused_turn_id END, "
    f"updated_at = %(now)s WHERE id = %(thread)s AND fence = %(fence)s "
    f"RETURNING id, {STATE_COLUMNS}, %(keep)s AND {_LEFT_OVER}), "
    "ended AS (UPDATE threads_turn SET status = %(status)s, ended_at = %(now)s, "
    "outcome = %(outcome)s, error = %(error)s, usage = %(usage)s, cancel_requested = '' "
    "WHERE thread_id IN (SELECT id FROM t) AND ((id = %(turn)s AND status = ANY(%(active)s)) "
    # A paused turn (waiting, or answered and queued to resume) ends only cancelled.
    "OR (id = %(turn)s AND %(status)s = 'cancelled' AND (status = ANY(%(paused)s) "
    "OR (status = 'queued' AND %(turn)s IN (SELECT paused_turn_id FROM was)))) "
    "OR (host_id = %(turn)s AND status = ANY(%(active)s))) RETURNING id), "
    "left_over AS (UPDATE threads_turn SET host_id = CASE WHEN %(keep)s THEN NULL "
    "ELSE host_id END, status = CASE WHEN %(keep)s THEN status ELSE 'cancelled' END, "
    "ended_at = CASE WHEN %(keep)s THEN NULL ELSE %(now)s END "
    "WHERE thread_id IN (SELECT id FROM t) AND host_id = %(turn)s AND status = 'queued'), "
    # A person's decisions the turn still waited for are moot now.
    f"moot AS ({ACTIONS_CANCEL}) "
    "SELECT t.*, EXISTS (SELECT 1 FROM ended WHERE id = %(turn)s), "
    "(SELECT array_agg(ARRAY[id::text, kind, tool_call_id, tool_name]) FROM moot) FROM t"
)


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
    assert rest in _REST
    usage_field = Turn._meta.get_field("usage")
    before = thread.status
    now = now_us()
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            _END,
            {"rest": rest, "now": now, "thread": thread.pk, "fence": fence, "status": status,
             "outcome": outcome, "error": error[:10_000],
             "usage": usage_field.get_db_prep_save(usage, connection), "turn": turn.pk,
             "active": _ACTIVE, "paused": sorted(_PAUSED), "keep": status != S.CANCELLED},
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
            _thread_status_event(thread, before, outcome, outbox)
        if row is not None and thread.paused_turn_id == turn.pk:
            thread.paused_turn_id = None
        if row is not None and ended:  # a turn cancelled before it started has ended already
            turn.status, turn.ended_at, turn.outcome, turn.error = status, now, outcome, error
            turn.usage = dict(usage) if usage is not None else None
            publish(
                thread, TURN_END_EVENTS[status],
                {"turn_id": str(turn.pk), "status": status, "reason": outcome,
                 "flow_id": outbox.flow_id if outbox is not None else "", "usage": turn.usage},
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
    assert rest in _REST
    before = thread.status
    sql = (
        "UPDATE threads_thread SET status = CASE WHEN NOT stop_requested AND "  # noqa: S608
        f"{HAS_WAITING} THEN 'queued' ELSE %s END, rest_status = %s, acting_side = '', "
        "updated_at = %s WHERE id = %s AND (%s::bigint IS NULL OR fence = %s) "
        f"AND status <> ALL(%s) RETURNING status"
    )
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(sql, [rest, rest, now_us(), thread.pk, fence, fence, _ACTIVE])
        row = cursor.fetchone()
        if row is not None:
            thread.status, thread.rest_status = row[0], rest
            _thread_status_event(thread, before, reason, outbox)
    # Nothing written: a running turn holds the status, or (raised after the block, as in
    # message_inject) the fence is stale.
    if row is None and fence is not None:
        current = Thread.objects.filter(pk=thread.pk, fence=fence).exists()
        if not current:
            raise StaleFence.of(thread, fence)


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
            _thread_status_event(thread, before, None, None)


# Queue changes ------------------------------------------------------------------------------


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
