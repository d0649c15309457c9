"""Publishing: the gap-free per-thread log and the broadcast after commit.

:func:`publish` writes one event at once. A running turn publishes through its own
:class:`Outbox` instead, which names the turn, flow and step on every event it writes and,
inside :meth:`Outbox.batch`, holds the events until the block ends and writes them in one
statement. Nothing is buffered anywhere but in an outbox its owner passes around.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction

from common.ids import new_id
from common.time import now_us
from threads.broadcast import broadcast, broadcast_many
from threads.events.envelope import (
    Envelope,
    lifted,
    session_id_of,
    tenant_group,
    thread_group,
    trace_ids,
)
from threads.events.payloads import REQUIRED
from threads.events.vocabulary import (
    EPHEMERAL,
    INLINE_LIMIT,
    LIFECYCLE,
    MESSAGE_TYPES,
    TURN_END_EVENTS,
    EventType,
    UnknownEvent,
)
from threads.events.webhooks import DELIVERED_EVENTS, deliveries_enqueue
from threads.models import Event, EventCounter, Thread

# Events after which a caller waiting on a turn of the thread reads it again: a turn's end,
# or a queue change that removed or cancelled waiting turns (threads.turn_signals). A turn
# added, taken or promoted has not ended: it wakes no one.
# A turn's end, or its pause for a person's decision (a wait answers then too).
WAKES_TURN_WAITERS = frozenset({*TURN_END_EVENTS.values(), EventType.ACTION_REQUIRED})
QUEUE_CHANGES_ENDING_TURNS = frozenset({"removed", "cancelled"})

# Engine progress markers published outside a transaction wait in their outbox for the
# thread's next event and are written with it, in one statement and in order: a flow always
# publishes another event after each of them (the step's pending message, the turn's end),
# so they arrive at most that much later and cost no statement of their own.
DEFERRED = frozenset(
    {
        EventType.TURN_STARTED,
        EventType.STEP_STARTED,
        EventType.STEP_COMPLETED,
        EventType.SIDE_COMPLETED,
        EventType.PERMISSION_EVALUATED,  # then the call starts, or fails, with an event
    }
)
# Events that record no write of their own (progress markers, ``state.emit``): when they
# commit alone they commit asynchronously (no wait for the WAL flush). The events of writes
# always commit synchronously.
ASYNC_COMMIT = DEFERRED | {
    EventType.MODEL_REQUESTED,
    EventType.TOOL_STARTED,
    EventType.TOOL_PROGRESS,
    EventType.CUSTOM,
}


@dataclass
class _Row:
    """One event on its way to the log: the envelope's parts before it has a sequence."""

    kind: EventType
    event_id: Any
    timestamp: int
    payload: dict[str, Any]
    refs: dict[str, Any] | None
    flow_id: str
    turn_id: str
    step_id: str
    tool_call_id: str
    subagent_id: str | None
    action_id: str | None
    trace: tuple[str, str]  # the trace and span ids, ("", "") untraced

    def envelope(self, thread: Thread, sequence: int | None, session_id: str) -> dict[str, Any]:
        return Envelope(
            type=self.kind, event_id=str(self.event_id), sequence=sequence,
            timestamp=self.timestamp, tenant_id=str(thread.tenant_id), session_id=session_id,
            thread_id=str(thread.pk), payload=self.payload, flow_id=self.flow_id or None,
            turn_id=self.turn_id or None, step_id=self.step_id or None,
            tool_call_id=self.tool_call_id or None, subagent_id=self.subagent_id,
            action_id=self.action_id, refs=self.refs, trace_id=self.trace[0] or None,
            span_id=self.trace[1] or None,
        ).as_json()  # fmt: skip


def _row(
    thread: Thread, type: str, payload: Mapping[str, Any], *, turn_id: str = "",
    flow_id: str = "", step_id: str = "",
) -> _Row:  # fmt: skip
    kind = _checked(type, payload)
    body, refs = _sized(thread, kind, payload)
    return _Row(
        kind=kind, event_id=new_id(), timestamp=now_us(), payload=body, refs=refs,
        flow_id=flow_id or str(payload.get("flow_id") or ""),
        turn_id=turn_id or str(payload.get("turn_id") or ""), step_id=step_id,
        tool_call_id=str(payload.get("tool_call_id") or ""),
        subagent_id=payload.get("subagent_id"), action_id=lifted(payload, "action_id"),
        trace=trace_ids(),
    )  # fmt: skip


def publish(
    thread: Thread, type: str, payload: Mapping[str, Any], *, outbox: Outbox | None = None
) -> int | None:
    """Record and broadcast one event of ``thread``; returns its sequence (None: ephemeral,
    or held by ``outbox``, see :meth:`Outbox.publish`).

    Persisted events are inserted in the caller's transaction (or in their own statement in
    autocommit) and broadcast after commit; a rollback discards both. With ``outbox`` (the
    running turn's, when the thread is its thread) the event goes through it. Raises
    :class:`UnknownEvent` for a type outside the vocabulary or a payload missing a key.
    """
    if outbox is not None and outbox.thread.pk == thread.pk:
        return outbox.publish(type, payload)
    row = _row(thread, type, payload)
    if row.kind in EPHEMERAL:
        broadcast(_groups(thread, row.kind), row.envelope(thread, None, session_id_of(thread)))
        return None
    return _write(thread, [row])


def publish_many(thread: Thread, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """:func:`publish` for several events of ``thread`` in order, the persisted ones
    written in one statement."""
    rows = [_row(thread, type, payload) for type, payload in events]
    session_id = session_id_of(thread)
    for row in rows:
        if row.kind in EPHEMERAL:
            broadcast(_groups(thread, row.kind), row.envelope(thread, None, session_id))
    kept = [row for row in rows if row.kind not in EPHEMERAL]
    if kept:
        _write(thread, kept)


@dataclass(eq=False)
class Outbox:
    """A running turn's events: the envelope ids it adds (``turn_id``, ``flow_id``, and
    ``step_id`` while a step runs) and the events it holds until they are written.

    Not thread-safe: one flow owns it. Progress markers (``DEFERRED``) published outside a
    transaction wait here for the next event; inside :meth:`batch` every event waits for
    the block's end.
    """

    thread: Thread
    turn_id: str = ""
    flow_id: str = ""
    step_id: str = ""
    _deferred: list[_Row] = field(default_factory=list)
    _batch: _Batch | None = None

    def publish(self, type: str, payload: Mapping[str, Any]) -> int | None:
        """As :func:`publish`, with this outbox's ids; None when the event is held."""
        row = _row(
            self.thread, type, payload, turn_id=self.turn_id, flow_id=self.flow_id,
            step_id=self.step_id,
        )  # fmt: skip
        thread = self.thread
        if row.kind in EPHEMERAL:
            broadcast(_groups(thread, row.kind), row.envelope(thread, None, session_id_of(thread)))
            return None
        if row.kind in DEFERRED and not connection.in_atomic_block:
            self._deferred.append(row)
            return None
        rows = [*self._deferred, row]
        self._deferred = []
        if self._batch is not None and self._batch.holds():
            self._batch.rows.extend(rows)
            return None
        return _write(thread, rows)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """``transaction.atomic()`` whose events are written together when the block ends:
        one statement instead of one per event. Sequences, commit and broadcast are as
        without it.

        Events published in a savepoint opened inside the block are written at once (they
        must roll back with it), so they take sequences before the block's earlier events:
        run code that publishes from savepoints, or user code, under :meth:`unbatched`. A
        nested batch first writes what the outer one holds.
        """
        outer = self._batch
        if outer is not None and outer.holds():
            outer.flush(self.thread)
        with transaction.atomic():
            current = self._batch = _Batch()
            try:
                yield
                current.flush(self.thread)
            finally:
                self._batch = outer

    @contextlib.contextmanager
    def unbatched(self) -> Iterator[None]:
        """Publish at once inside a :meth:`batch` block (after writing what it holds): for
        user code (hooks), which may publish from savepoints it opens and rolls back."""
        outer = self._batch
        if outer is None:
            yield
            return
        if outer.holds():
            outer.flush(self.thread)
        self._batch = None
        try:
            yield
        finally:
            self._batch = outer

    @contextlib.contextmanager
    def step(self, number: int) -> Iterator[None]:
        """Events published inside carry ``step_id`` ``<turn_id>:<number>``."""
        self.step_id = f"{self.turn_id or self.flow_id}:{number}"
        try:
            yield
        finally:
            self.step_id = ""


class _Batch:
    """The events a batch block published at its own savepoint level."""

    def __init__(self) -> None:
        self.savepoints = _savepoints()
        self.rows: list[_Row] = []

    def holds(self) -> bool:
        """Whether an event published now belongs here: inside the block's transaction and
        not in a savepoint opened since (a savepoint's events are written at once, so its
        rollback takes them along)."""
        return connection.in_atomic_block and _savepoints() == self.savepoints

    def flush(self, thread: Thread) -> None:
        rows, self.rows = self.rows, []
        if rows:
            _write(thread, rows)


def _wakes_turn_waiters(row: _Row) -> bool:
    if row.kind == EventType.QUEUE_CHANGED:
        return row.payload.get("change") in QUEUE_CHANGES_ENDING_TURNS
    return row.kind in WAKES_TURN_WAITERS


def _savepoints() -> tuple[str, ...]:
    """The savepoints open on the connection (``atomic(savepoint=False)`` blocks record
    None: a failure in one rolls back the enclosing level, so they open no level of their
    own)."""
    return tuple(sid for sid in connection.savepoint_ids if sid is not None)


def _write(thread: Thread, rows: Sequence[_Row]) -> int | None:
    """Insert ``rows`` (one statement) and broadcast them after commit; the last sequence."""
    last = _insert(thread, rows)
    if last is None:
        return None  # the thread was deleted under the writer: nothing to tell anyone
    session_id = session_id_of(thread)
    sent = [
        (_groups(thread, item.kind), item.envelope(thread, last - len(rows) + 1 + n, session_id))
        for n, item in enumerate(rows)
    ]
    wake = [str(thread.pk)] if any(_wakes_turn_waiters(row) for row in rows) else []
    transaction.on_commit(lambda: broadcast_many(sent, wake=wake), robust=True)
    hooked = [(row.kind, envelope) for row, (_groups_of, envelope) in zip(rows, sent, strict=True)
              if row.kind in DELIVERED_EVENTS]  # fmt: skip
    if hooked:
        deliveries_enqueue(thread, hooked)
    return last


def _groups(thread: Thread, kind: EventType) -> list[str]:
    groups = [thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk)]
    if kind in LIFECYCLE:
        groups.append(tenant_group(tenant_id=thread.tenant_id))
    return groups


def _checked(type: str, payload: Mapping[str, Any]) -> EventType:
    try:
        kind = EventType(type)
    except ValueError:
        raise UnknownEvent(f"{type!r} is not an event type") from None
    missing = REQUIRED[kind] - payload.keys()
    if missing and kind not in MESSAGE_TYPES:
        raise UnknownEvent(f"{kind} payload lacks {sorted(missing)}")
    return kind


def _sized(
    thread: Thread, kind: EventType, payload: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Large message payloads become their id plus a reference to the message."""
    body = dict(payload)
    if kind not in MESSAGE_TYPES:
        return body, None
    content = body.get("content")
    if isinstance(content, str) and len(content) > INLINE_LIMIT:
        message_id = str(body.get("id"))
        small = {key: body[key] for key in ("id", "role", "status", "seq") if key in body}
        return small, {"message": f"/api/v1/threads/{thread.pk}/messages/{message_id}"}
    return body, None


@functools.cache
def _insert_sql(*, standalone: bool) -> str:
    """The events insert (see :func:`_insert`); ``standalone`` commits asynchronously."""
    counter, event = EventCounter._meta.db_table, Event._meta.db_table
    config = (
        "settings AS (SELECT set_config('synchronous_commit', 'off', true) AS value),"
        if standalone
        else ""
    )
    return f"""
        WITH {config} next AS (
            INSERT INTO {counter} AS c (thread_id, tenant_id, last_sequence)
            SELECT %s, %s, %s WHERE EXISTS (SELECT 1 FROM {Thread._meta.db_table} WHERE id = %s)
            ON CONFLICT (thread_id) DO UPDATE SET last_sequence = c.last_sequence + %s
            RETURNING last_sequence
        )
        INSERT INTO {event}
            (id, tenant_id, thread_id, sequence, type, payload, refs, flow_id, turn_id,
             step_id, tool_call_id, trace_id, span_id, created_at)
        SELECT row.id, %s, %s, next.last_sequence - %s + row.n, row.type, row.payload,
               row.refs, row.flow_id, row.turn_id, row.step_id, row.tool_call_id,
               row.trace_id, row.span_id, row.created_at
        FROM next{", settings" if standalone else ""},
             jsonb_to_recordset(%s::jsonb) AS row
                 (n int, id uuid, type text, payload jsonb, refs jsonb, flow_id text,
                  turn_id text, step_id text, tool_call_id text, trace_id text,
                  span_id text, created_at bigint)
        ORDER BY row.n
        RETURNING sequence
    """  # noqa: S608 - table names come from our models, values are parameters


def _insert(thread: Thread, rows: Sequence[_Row]) -> int | None:
    """Take ``len(rows)`` sequences from the thread's counter and insert the rows with them,
    in order, in one statement (the rows travel as one JSON parameter); returns the last
    sequence, or None when the thread no longer exists (a plain read, not a foreign key:
    see ``Event.thread``).

    The counter row stays locked until the caller's transaction ends, which orders
    concurrent writers of one thread and makes a rollback give its numbers back."""
    # Alone and recording no write, the statement commits asynchronously. WAL order keeps
    # the log gap-free: a server crash can only lose the newest such events, never one
    # before a kept one (a later synchronous commit flushes every earlier one).
    standalone = not connection.in_atomic_block and all(r.kind in ASYNC_COMMIT for r in rows)
    count = len(rows)
    encoded = json.dumps(
        [
            {"n": n, "id": str(row.event_id), "type": str(row.kind), "payload": row.payload,
             "refs": row.refs, "flow_id": row.flow_id, "turn_id": row.turn_id[:64],
             "step_id": row.step_id[:80], "tool_call_id": row.tool_call_id[:200],
             "trace_id": row.trace[0], "span_id": row.trace[1], "created_at": row.timestamp}
            for n, row in enumerate(rows, start=1)
        ],
        cls=DjangoJSONEncoder,
    )  # fmt: skip
    params: list[Any] = [thread.pk, thread.tenant_id, count, thread.pk, count]
    params += [thread.tenant_id, thread.pk, count, encoded]
    sql = _insert_sql(standalone=standalone)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = [int(found[0]) for found in cursor.fetchall()]
    return max(returned) if returned else None
