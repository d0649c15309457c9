"""Thread events: one envelope, a closed vocabulary, a gap-free per-thread log.

Every runtime fact of a thread is published with :func:`publish`. A persisted event
(every type but ``model.delta``, ``reasoning.delta`` and ``thread.deleted``) is written to
the thread's log in the caller's transaction (one statement: the thread's counter row is
bumped and the event inserted with the new ``sequence``), so it commits or rolls back with
the fact it describes; it is broadcast to the thread's channel group **after commit**. An
ephemeral event is broadcast at once and never stored.

Sequences are gap-free and unique per thread: the counter row is locked by the writer until
its transaction ends, so concurrent writers are ordered and a rollback returns its numbers.
Broadcasts leave the writer's thread through :mod:`threads.broadcast` (a background sender),
so publishing never waits on Redis. Lifecycle types (``LIFECYCLE``) also go to the tenant's
group for ``/ws/events/``.

Payloads are declared once per type below (TypedDicts); :func:`publish` refuses an unknown
type or a payload missing a required key. Payloads never carry secret values (KV changes
carry the key, not the value). A message payload larger than ``INLINE_LIMIT`` bytes is
replaced by its id and a ``refs`` entry pointing at the message.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction

from common.ids import new_id
from common.time import now_us

if TYPE_CHECKING:
    from collections.abc import Mapping

    from threads.models import Event, Thread

SCHEMA_VERSION = 1
# Message payloads above this many bytes of JSON are referenced, not copied.
INLINE_LIMIT = 16 * 1024


class EventType(StrEnum):
    """The closed vocabulary. Each value's payload is the TypedDict of the same name."""

    THREAD_CREATED = "thread.created"
    THREAD_UPDATED = "thread.updated"
    THREAD_TERMINATED = "thread.terminated"
    THREAD_DELETED = "thread.deleted"
    THREAD_STATUS = "thread.status"
    QUEUE_CHANGED = "queue.changed"
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    STEP_STARTED = "step.started"
    STEP_COMPLETED = "step.completed"
    SIDE_COMPLETED = "side.completed"
    MODEL_REQUESTED = "model.requested"
    MODEL_DELTA = "model.delta"
    REASONING_DELTA = "reasoning.delta"
    MODEL_COMPLETED = "model.completed"
    MODEL_FAILED = "model.failed"
    MESSAGE_CREATED = "message.created"
    MESSAGE_UPDATED = "message.updated"
    MESSAGE_DELETED = "message.deleted"
    TOOL_STARTED = "tool.started"
    TOOL_PROGRESS = "tool.progress"
    TOOL_RESULT = "tool.result"
    TOOL_FAILED = "tool.failed"
    KV_CHANGED = "kv.changed"
    FILE_CHANGED = "file.changed"
    EFFECT_SCHEDULED = "effect.scheduled"
    EFFECT_REMOVED = "effect.removed"
    EFFECT_COMPLETED = "effect.completed"
    EFFECT_FAILED = "effect.failed"
    SUBAGENT_SPAWNED = "subagent.spawned"
    SUBAGENT_STATUS = "subagent.status"
    SUBAGENT_COMPLETED = "subagent.completed"
    SUBAGENT_FAILED = "subagent.failed"
    CUSTOM = "custom"


# Payloads ------------------------------------------------------------------------------------
# Engine events also carry the flow's ``flow_id`` (lifted into the envelope).


class ThreadCreated(TypedDict):
    """A thread was created (API or a parent)."""

    id: str
    agent: str


class ThreadUpdated(TypedDict):
    """Tags or metadata changed (``fields``), or the agent changed by a handoff (``agent``)."""

    id: str
    fields: list[str]
    agent: NotRequired[str]


class ThreadTerminated(TypedDict):
    """Soft terminate: no more work will run. ``terminated_at`` in µs."""

    id: str
    terminated_at: int


class ThreadDeleted(TypedDict):
    """The thread and its children are gone (ephemeral: the log went with them)."""

    id: str


class ThreadStatusChanged(TypedDict):
    """The status read model changed; ``reason`` is the flow's stop reason when one ended it."""

    status: str
    reason: NotRequired[str]


class QueueChanged(TypedDict):
    """The inbox changed: ``change`` is ``added`` (with the ``item``). A flow taking the
    items shows as ``thread.status`` running and the messages' ``message.created``."""

    change: str
    item: dict[str, Any]


class TurnStarted(TypedDict):
    """A flow started (a turn of the runtime spec: one cycle of submitted input)."""

    flow_id: str
    fence: int


class TurnEnded(TypedDict):
    """A flow ended: ``turn.completed``, or ``turn.failed`` when ``reason`` is ``step_error``
    or ``hook_blocked``."""

    flow_id: str
    reason: str


class StepStarted(TypedDict):
    """A step (one model call and its tools) began on ``side``."""

    step: int
    side: str


class StepCompleted(TypedDict):
    step: int
    side: str


class SideCompleted(TypedDict):
    """A side's turn ended (final answer or stop tool); ``turns`` counts each side's."""

    side: str
    turns: dict[str, int]


class ModelRequested(TypedDict):
    """A model call of ``prompt`` started; its answer will be the message ``message_id``."""

    message_id: str
    prompt: str


class ModelDelta(TypedDict):
    """Streamed text (ephemeral) of the answer ``message_id``."""

    message_id: str
    depth: int
    delta: str


class ModelCompleted(TypedDict):
    """A model call answered; the Log row ``log_id`` holds tokens, latency and cost."""

    log_id: str
    message_id: str | None
    model: str
    total_tokens: int
    latency_ms: float
    error: NotRequired[None]


class ModelFailed(TypedDict):
    """A model call failed after retries and fallbacks."""

    log_id: str
    message_id: str | None
    model: str
    error: str | None


class MessagePayload(TypedDict):
    """The message as the API shows it; only ``id`` (and ``refs``) when it is large."""

    id: str


class MessageDeleted(TypedDict):
    id: str


class ToolStarted(TypedDict):
    tool_call_id: str
    name: str


class ToolProgress(TypedDict):
    """A running tool reported progress (reserved: tools cannot report it yet)."""

    tool_call_id: str
    progress: Any


class ToolEnded(TypedDict):
    """A tool call ended (``tool.result`` on success, ``tool.failed`` otherwise); the Log row
    ``log_id`` holds its arguments and duration."""

    tool_call_id: str
    name: str
    status: str
    log_id: str
    error: NotRequired[str | None]


class KvChanged(TypedDict):
    """A KV value was set or deleted (never the value itself)."""

    key: str
    deleted: bool
    updated_at: int


class FileChanged(TypedDict):
    """``change``: ``written`` (a file), ``created`` (a directory) or ``deleted``."""

    path: str
    change: str


class EffectChanged(TypedDict):
    """An effect was scheduled, removed, ran or failed (reserved for the effects runner)."""

    id: str
    name: str


class SubagentChanged(TypedDict):
    """A child thread's lifecycle (reserved for subagents)."""

    subagent_id: str
    status: NotRequired[str]


class Custom(TypedDict):
    """``state.emit(name, data)``; ``data`` is the tool's JSON value."""

    name: str
    data: Any


PAYLOADS: dict[EventType, type] = {
    EventType.THREAD_CREATED: ThreadCreated,
    EventType.THREAD_UPDATED: ThreadUpdated,
    EventType.THREAD_TERMINATED: ThreadTerminated,
    EventType.THREAD_DELETED: ThreadDeleted,
    EventType.THREAD_STATUS: ThreadStatusChanged,
    EventType.QUEUE_CHANGED: QueueChanged,
    EventType.TURN_STARTED: TurnStarted,
    EventType.TURN_COMPLETED: TurnEnded,
    EventType.TURN_FAILED: TurnEnded,
    EventType.STEP_STARTED: StepStarted,
    EventType.STEP_COMPLETED: StepCompleted,
    EventType.SIDE_COMPLETED: SideCompleted,
    EventType.MODEL_REQUESTED: ModelRequested,
    EventType.MODEL_DELTA: ModelDelta,
    EventType.REASONING_DELTA: ModelDelta,
    EventType.MODEL_COMPLETED: ModelCompleted,
    EventType.MODEL_FAILED: ModelFailed,
    EventType.MESSAGE_CREATED: MessagePayload,
    EventType.MESSAGE_UPDATED: MessagePayload,
    EventType.MESSAGE_DELETED: MessageDeleted,
    EventType.TOOL_STARTED: ToolStarted,
    EventType.TOOL_PROGRESS: ToolProgress,
    EventType.TOOL_RESULT: ToolEnded,
    EventType.TOOL_FAILED: ToolEnded,
    EventType.KV_CHANGED: KvChanged,
    EventType.FILE_CHANGED: FileChanged,
    EventType.EFFECT_SCHEDULED: EffectChanged,
    EventType.EFFECT_REMOVED: EffectChanged,
    EventType.EFFECT_COMPLETED: EffectChanged,
    EventType.EFFECT_FAILED: EffectChanged,
    EventType.SUBAGENT_SPAWNED: SubagentChanged,
    EventType.SUBAGENT_STATUS: SubagentChanged,
    EventType.SUBAGENT_COMPLETED: SubagentChanged,
    EventType.SUBAGENT_FAILED: SubagentChanged,
    EventType.CUSTOM: Custom,
}


def _required_keys(payload_type: type) -> frozenset[str]:
    # Annotations are strings here (postponed evaluation), which TypedDict's own
    # ``__required_keys__`` cannot see through; NotRequired is read from the text.
    annotations: dict[str, Any] = payload_type.__annotations__
    return frozenset(
        name
        for name, note in annotations.items()
        if not getattr(note, "__forward_arg__", str(note)).startswith("NotRequired")
    )


_REQUIRED = {kind: _required_keys(payload_type) for kind, payload_type in PAYLOADS.items()}

# Broadcast, never stored (no sequence).
EPHEMERAL = frozenset({EventType.MODEL_DELTA, EventType.REASONING_DELTA, EventType.THREAD_DELETED})
# Also sent to the tenant's group (``/ws/events/``).
LIFECYCLE = frozenset(
    {
        EventType.THREAD_CREATED,
        EventType.THREAD_UPDATED,
        EventType.THREAD_TERMINATED,
        EventType.THREAD_DELETED,
        EventType.THREAD_STATUS,
    }
)
_MESSAGE_TYPES = frozenset({EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED})


# Stop reasons that end a flow in ``turn.failed`` rather than ``turn.completed``.
FAILED_REASONS = frozenset({"step_error", "hook_blocked"})


def turn_ended(reason: str) -> str:
    """The event type that ends a flow stopped for ``reason``."""
    return EventType.TURN_FAILED if str(reason) in FAILED_REASONS else EventType.TURN_COMPLETED


class UnknownEvent(ValueError):
    """A type outside the vocabulary, or a payload missing a required key (a bug)."""


# Groups --------------------------------------------------------------------------------------


def thread_group(*, tenant_id: Any, thread_id: Any) -> str:
    """The Channels group of one thread's events (begins with the tenant id)."""
    return f"{tenant_id}.thread.{thread_id}"


def tenant_group(*, tenant_id: Any) -> str:
    """The Channels group of a tenant's thread lifecycle events."""
    return f"{tenant_id}.events"


# The envelope --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """One event as clients receive it (ARCHITECTURE §6). ``sequence`` is None for ephemeral
    events; ``timestamp`` is µs; ``turn_id`` is the flow id (a flow is one turn)."""

    type: str
    event_id: str
    sequence: int | None
    timestamp: int
    tenant_id: str
    session_id: str
    thread_id: str
    payload: Mapping[str, Any]
    flow_id: str | None = None
    step_id: str | None = None
    tool_call_id: str | None = None
    subagent_id: str | None = None
    refs: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "event_id": self.event_id,
            "sequence": self.sequence,
            "timestamp": self.timestamp,
            "schema_version": SCHEMA_VERSION,
            "runtime_id": settings.PLATFORM_RUNTIME_ID,
            "tenant_id": self.tenant_id,
            "session_id": self.session_id,
            "thread_id": self.thread_id,
            "flow_id": self.flow_id,
            "turn_id": self.flow_id,
            "step_id": self.step_id,
            "tool_call_id": self.tool_call_id,
            "subagent_id": self.subagent_id,
            "payload": self.payload,
            "refs": self.refs,
        }


def envelope_of(event: Event, *, session_id: str | None = None) -> dict[str, Any]:
    """The envelope of a stored event (replay, SSE, JSON paging)."""
    return Envelope(
        type=event.type,
        event_id=str(event.id),
        sequence=event.sequence,
        timestamp=event.created_at,
        tenant_id=str(event.tenant_id),
        session_id=session_id or str(event.thread_id),
        thread_id=str(event.thread_id),
        payload=event.payload,
        flow_id=event.flow_id or None,
        step_id=event.step_id or None,
        tool_call_id=event.tool_call_id or None,
        subagent_id=event.payload.get("subagent_id") if isinstance(event.payload, dict) else None,
        refs=event.refs,
    ).as_json()


def session_id_of(thread: Thread) -> str:
    """The root of the thread's subagent tree (the thread itself when top-level)."""
    if thread.parent_id is None:
        return str(thread.pk)
    from threads.models import Thread as ThreadModel

    parent_id: Any = thread.parent_id
    while True:
        above = ThreadModel.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()
        if above is None:
            return str(parent_id)
        parent_id = above


# Publishing ----------------------------------------------------------------------------------

# Engine progress markers published outside a transaction wait (in this Python thread) for
# the thread's next event and are written with it, in one statement and in order: a flow
# always publishes another event after each of them (the step's pending message, the turn's
# end), so they arrive at most that much later and cost no statement of their own.
DEFERRED = frozenset(
    {
        EventType.TURN_STARTED,
        EventType.STEP_STARTED,
        EventType.STEP_COMPLETED,
        EventType.SIDE_COMPLETED,
    }
)
_local = threading.local()  # .deferred: markers waiting, see DEFERRED; .batch: see batch()
# Events that record no write of their own (progress markers, ``state.emit``): when they
# commit alone they commit asynchronously (no wait for the WAL flush). The events of writes
# always commit synchronously.
ASYNC_COMMIT = DEFERRED | {
    EventType.TURN_COMPLETED,
    EventType.TURN_FAILED,
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
    step_id: str
    tool_call_id: str
    subagent_id: str | None

    def envelope(self, thread: Thread, sequence: int | None, session_id: str) -> dict[str, Any]:
        return Envelope(
            type=self.kind, event_id=str(self.event_id), sequence=sequence,
            timestamp=self.timestamp, tenant_id=str(thread.tenant_id), session_id=session_id,
            thread_id=str(thread.pk), payload=self.payload, flow_id=self.flow_id or None,
            step_id=self.step_id or None, tool_call_id=self.tool_call_id or None,
            subagent_id=self.subagent_id, refs=self.refs,
        ).as_json()  # fmt: skip


def publish(thread: Thread, type: str, payload: Mapping[str, Any]) -> int | None:
    """Record and broadcast one event of ``thread``; returns its sequence (None: ephemeral,
    a progress marker that is written with the thread's next event, see ``DEFERRED``, or
    an event held by a :func:`batch` block until it ends).

    Persisted events are inserted in the caller's transaction (or in their own statement in
    autocommit) and broadcast after commit; a rollback discards both. Raises
    :class:`UnknownEvent` for a type outside the vocabulary or a payload missing a key.
    """
    kind = _checked(type, payload)
    body, refs = _sized(thread, kind, payload)
    flow_id = str(payload.get("flow_id") or "")
    step = payload.get("step")
    row = _Row(
        kind=kind, event_id=new_id(), timestamp=now_us(), payload=body, refs=refs,
        flow_id=flow_id, step_id=f"{flow_id}:{step}" if flow_id and step is not None else "",
        tool_call_id=str(payload.get("tool_call_id") or ""),
        subagent_id=payload.get("subagent_id"),
    )  # fmt: skip
    if kind in EPHEMERAL:
        from threads.broadcast import broadcast

        broadcast(_groups(thread, kind), row.envelope(thread, None, session_id_of(thread)))
        return None
    waiting: dict[Any, list[_Row]] = getattr(_local, "deferred", None) or {}
    _local.deferred = waiting
    if kind in DEFERRED and not connection.in_atomic_block:
        waiting.setdefault(thread.pk, []).append(row)
        return None
    rows = [*waiting.pop(thread.pk, []), row]
    open_batch: _Batch | None = getattr(_local, "batch", None)
    if open_batch is not None and open_batch.holds():
        open_batch.add(thread, rows)
        return None
    return _write(thread, rows)


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
    transaction.on_commit(lambda: _broadcast_all(sent))
    return last


class _Batch:
    """The events a :func:`batch` block published at its own savepoint level, by thread."""

    def __init__(self) -> None:
        self.savepoints = _savepoints()
        self.rows: dict[Any, tuple[Thread, list[_Row]]] = {}

    def holds(self) -> bool:
        """Whether an event published now belongs here: inside the block's transaction and
        not in a savepoint opened since (a savepoint's events are written at once, so its
        rollback takes them along)."""
        return connection.in_atomic_block and _savepoints() == self.savepoints

    def add(self, thread: Thread, rows: Sequence[_Row]) -> None:
        self.rows.setdefault(thread.pk, (thread, []))[1].extend(rows)

    def flush(self) -> None:
        pending, self.rows = self.rows, {}
        for thread, rows in pending.values():
            _write(thread, rows)


def _savepoints() -> tuple[str, ...]:
    """The savepoints open on the connection (``atomic(savepoint=False)`` blocks record
    None: a failure in one rolls back the enclosing level, so they open no level of their
    own)."""
    return tuple(sid for sid in connection.savepoint_ids if sid is not None)


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """``transaction.atomic()`` whose events are written together when the block ends: one
    statement per thread instead of one per :func:`publish` call. Sequences, commit and
    broadcast are as without it; ``publish`` returns None inside.

    Events published in a savepoint opened inside the block are written at once (they must
    roll back with it), so they take sequences before the block's earlier events: run code
    that publishes from savepoints, or user code, under :func:`unbatched`. A nested batch
    first writes what the outer one holds.
    """
    outer: _Batch | None = getattr(_local, "batch", None)
    if outer is not None and outer.holds():
        outer.flush()
    with transaction.atomic():
        current = _local.batch = _Batch()
        try:
            yield
            current.flush()
        finally:
            _local.batch = outer


@contextlib.contextmanager
def unbatched() -> Iterator[None]:
    """Publish at once inside a :func:`batch` block (after writing what it holds): for user
    code (hooks), which may publish from savepoints it opens and rolls back."""
    outer: _Batch | None = getattr(_local, "batch", None)
    if outer is None:
        yield
        return
    if outer.holds():
        outer.flush()
    _local.batch = None
    try:
        yield
    finally:
        _local.batch = outer


def _groups(thread: Thread, kind: EventType) -> list[str]:
    groups = [thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk)]
    if kind in LIFECYCLE:
        groups.append(tenant_group(tenant_id=thread.tenant_id))
    return groups


def _broadcast_all(sent: list[tuple[list[str], dict[str, Any]]]) -> None:
    from threads.broadcast import broadcast_many

    broadcast_many(sent)


def _checked(type: str, payload: Mapping[str, Any]) -> EventType:
    try:
        kind = EventType(type)
    except ValueError:
        raise UnknownEvent(f"{type!r} is not an event type") from None
    missing = _REQUIRED[kind] - payload.keys()
    if missing and kind not in _MESSAGE_TYPES:
        raise UnknownEvent(f"{kind} payload lacks {sorted(missing)}")
    return kind


def _sized(
    thread: Thread, kind: EventType, payload: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Large message payloads become their id plus a reference to the message."""
    body = dict(payload)
    if kind not in _MESSAGE_TYPES:
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
    from threads.models import Event, EventCounter, Thread

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
            (id, tenant_id, thread_id, sequence, type, payload, refs, flow_id, step_id,
             tool_call_id, created_at)
        SELECT row.id, %s, %s, next.last_sequence - %s + row.n, row.type, row.payload,
               row.refs, row.flow_id, row.step_id, row.tool_call_id, row.created_at
        FROM next{", settings" if standalone else ""},
             jsonb_to_recordset(%s::jsonb) AS row
                 (n int, id uuid, type text, payload jsonb, refs jsonb, flow_id text,
                  step_id text, tool_call_id text, created_at bigint)
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
             "refs": row.refs, "flow_id": row.flow_id, "step_id": row.step_id[:80],
             "tool_call_id": row.tool_call_id[:200], "created_at": row.timestamp}
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
