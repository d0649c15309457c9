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

import json
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
    """The inbox changed: ``change`` is ``added`` (with the ``item``) or ``taken`` (``count``
    items consumed by a flow)."""

    change: str
    item: NotRequired[dict[str, Any]]
    count: NotRequired[int]


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
    """``change``: created, updated, deleted, directory_created, directory_deleted, ..."""

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


def publish(thread: Thread, type: str, payload: Mapping[str, Any]) -> int | None:
    """Record and broadcast one event of ``thread``; returns its sequence (None: ephemeral).

    Persisted events are inserted in the caller's transaction (or in their own statement in
    autocommit) and broadcast after commit; a rollback discards both. Raises
    :class:`UnknownEvent` for a type outside the vocabulary or a payload missing a key.
    """
    kind = _checked(type, payload)
    body, refs = _sized(thread, kind, payload)
    flow_id = str(payload.get("flow_id") or "")
    step = payload.get("step")
    step_id = f"{flow_id}:{step}" if flow_id and step is not None else ""
    tool_call_id = str(payload.get("tool_call_id") or "")
    event_id = new_id()
    timestamp = now_us()
    sequence = None
    if kind not in EPHEMERAL:
        sequence = _insert(
            thread, event_id=event_id, type=kind, payload=body, refs=refs, flow_id=flow_id,
            step_id=step_id, tool_call_id=tool_call_id, created_at=timestamp,
        )  # fmt: skip
    envelope = Envelope(
        type=kind, event_id=str(event_id), sequence=sequence, timestamp=timestamp,
        tenant_id=str(thread.tenant_id), session_id=session_id_of(thread),
        thread_id=str(thread.pk), payload=body, flow_id=flow_id or None,
        step_id=step_id or None, tool_call_id=tool_call_id or None,
        subagent_id=payload.get("subagent_id"), refs=refs,
    ).as_json()  # fmt: skip
    groups = [thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk)]
    if kind in LIFECYCLE:
        groups.append(tenant_group(tenant_id=thread.tenant_id))
    from threads.broadcast import broadcast

    if sequence is None:
        broadcast(groups, envelope)
    else:
        transaction.on_commit(lambda: broadcast(groups, envelope))
    return sequence


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


def _insert(
    thread: Thread,
    *,
    event_id: Any,
    type: str,
    payload: dict[str, Any],
    refs: dict[str, Any] | None,
    flow_id: str,
    step_id: str,
    tool_call_id: str,
    created_at: int,
) -> int:
    """Bump the thread's counter and insert the event in one statement; returns its sequence.

    The counter row stays locked until the caller's transaction ends, which orders
    concurrent writers of one thread and makes a rollback give its number back."""
    from threads.models import Event, EventCounter

    counter, event = EventCounter._meta.db_table, Event._meta.db_table
    sql = f"""
        WITH next AS (
            INSERT INTO {counter} AS c (thread_id, tenant_id, last_sequence)
            VALUES (%s, %s, 1)
            ON CONFLICT (thread_id) DO UPDATE SET last_sequence = c.last_sequence + 1
            RETURNING last_sequence
        )
        INSERT INTO {event}
            (id, tenant_id, thread_id, sequence, type, payload, refs, flow_id, step_id,
             tool_call_id, created_at)
        SELECT %s, %s, %s, next.last_sequence, %s, %s::jsonb, %s::jsonb, %s, %s, %s, %s
        FROM next
        RETURNING sequence
    """  # noqa: S608 - table names come from our models, values are parameters
    encoded_refs = None if refs is None else json.dumps(refs)
    params = [
        thread.pk, thread.tenant_id,
        event_id, thread.tenant_id, thread.pk, type, json.dumps(payload, cls=DjangoJSONEncoder),
        encoded_refs, flow_id, step_id[:80], tool_call_id[:200], created_at,
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])
