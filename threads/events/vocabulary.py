"""The closed vocabulary of thread events: the types and their sets (each type's payload is
declared in :mod:`threads.events.payloads`)."""

from __future__ import annotations

from enum import StrEnum

SCHEMA_VERSION = 1
# Message payloads above this many bytes of JSON are referenced, not copied.
INLINE_LIMIT = 16 * 1024


class EventType(StrEnum):
    """The closed vocabulary. Each value's payload is the TypedDict of the same name
    (:data:`threads.events.payloads.PAYLOADS`)."""

    THREAD_CREATED = "thread.created"
    THREAD_UPDATED = "thread.updated"
    THREAD_TERMINATED = "thread.terminated"
    THREAD_DELETED = "thread.deleted"
    THREAD_STATUS = "thread.status"
    QUEUE_CHANGED = "queue.changed"
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLED = "turn.cancelled"
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
    TOOL_CATALOG_RESOLVED = "tool.catalog.resolved"
    TOOL_STARTED = "tool.started"
    TOOL_PROGRESS = "tool.progress"
    TOOL_RESULT = "tool.result"
    TOOL_FAILED = "tool.failed"
    PERMISSION_EVALUATED = "permission.evaluated"
    PERMISSION_REQUESTED = "permission.requested"
    PERMISSION_RESOLVED = "permission.resolved"
    ACTION_REQUIRED = "action.required"
    ACTION_RESOLVED = "action.resolved"
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
    SUBAGENT_CLOSED = "subagent.closed"
    WEBHOOK_DISABLED = "webhook.disabled"
    COST_RECORDED = "cost.recorded"
    LIMIT_CHANGED = "limit.changed"
    CONTEXT_COMPACTION_STARTED = "context.compaction.started"
    CONTEXT_COMPACTION_COMPLETED = "context.compaction.completed"
    CONTEXT_COMPACTION_FAILED = "context.compaction.failed"
    RUNTIME_WARNING = "runtime.warning"
    RUNTIME_ERROR = "runtime.error"
    OUTPUT_SPILLED = "output.spilled"
    CUSTOM = "custom"


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
        EventType.ACTION_REQUIRED,
        EventType.ACTION_RESOLVED,
    }
)
MESSAGE_TYPES = frozenset({EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED})


# The event that ends a turn, by the turn's terminal status.
TURN_END_EVENTS = {
    "completed": EventType.TURN_COMPLETED,
    "failed": EventType.TURN_FAILED,
    "blocked": EventType.TURN_FAILED,
    "cancelled": EventType.TURN_CANCELLED,
    "timed_out": EventType.TURN_FAILED,
}


class UnknownEvent(ValueError):
    """A type outside the vocabulary, or a payload missing a required key (a bug)."""
