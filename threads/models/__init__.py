"""Thread storage: threads and everything a thread owns.

Timestamps are microseconds since the Unix epoch (``BigIntegerField``), as the
spec's ThreadState speaks them. Every row carries ``tenant`` (TenantOwned) as
well as ``thread`` so that scoping never depends on a join.
"""

from threads.models.actions import Action, ActionKind, ActionStatus
from threads.models.events import Event, EventCounter
from threads.models.schedules import Schedule, ScheduleAction
from threads.models.statuses import (
    THREAD_REST,
    TURN_ACTIVE,
    TURN_PAUSED,
    TURN_TERMINAL,
    RunStatus,
)
from threads.models.storage import EnvType, TenantEnv, ThreadEnv, ThreadFile, ThreadValue
from threads.models.subagents import SubagentLink, VariableRequest
from threads.models.threads import Log, Message, MessageRole, MessageStatus, Thread, ThreadOwned
from threads.models.turns import (
    EffectStatus,
    IdempotencyKey,
    ScheduledEffect,
    Turn,
    TurnKind,
    TurnSource,
    TurnStrategy,
)
from threads.models.webhooks import DeliveryStatus, WebhookDelivery, WebhookEndpoint

__all__ = [
    "THREAD_REST",
    "TURN_ACTIVE",
    "TURN_PAUSED",
    "TURN_TERMINAL",
    "Action",
    "ActionKind",
    "ActionStatus",
    "DeliveryStatus",
    "EffectStatus",
    "EnvType",
    "Event",
    "EventCounter",
    "IdempotencyKey",
    "Log",
    "Message",
    "MessageRole",
    "MessageStatus",
    "RunStatus",
    "Schedule",
    "ScheduleAction",
    "ScheduledEffect",
    "SubagentLink",
    "TenantEnv",
    "Thread",
    "ThreadEnv",
    "ThreadFile",
    "ThreadOwned",
    "ThreadValue",
    "Turn",
    "TurnKind",
    "TurnSource",
    "TurnStrategy",
    "VariableRequest",
    "WebhookDelivery",
    "WebhookEndpoint",
]
