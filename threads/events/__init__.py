"""Thread events: one envelope, a closed vocabulary, a gap-free per-thread log.

Every runtime fact of a thread is published with :func:`publish`, or by a running turn
through its :class:`Outbox` (which adds the turn, flow and step ids). A persisted event
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

Payloads are declared once per type in :mod:`.payloads` (TypedDicts); :func:`publish`
refuses an unknown type or a payload missing a required key. Payloads never carry secret
values (KV changes carry the key, not the value). A message payload larger than
``INLINE_LIMIT`` bytes is replaced by its id and a ``refs`` entry pointing at the message.
"""

from threads.events.envelope import (
    Envelope,
    envelope_of,
    session_id_of,
    tenant_group,
    thread_group,
)
from threads.events.outbox import (
    ASYNC_COMMIT,
    DEFERRED,
    QUEUE_CHANGES_ENDING_TURNS,
    Outbox,
    publish,
    publish_many,
)
from threads.events.payloads import PAYLOADS
from threads.events.vocabulary import (
    EPHEMERAL,
    INLINE_LIMIT,
    LIFECYCLE,
    SCHEMA_VERSION,
    TURN_END_EVENTS,
    EventType,
    UnknownEvent,
)

__all__ = [
    "ASYNC_COMMIT",
    "DEFERRED",
    "EPHEMERAL",
    "INLINE_LIMIT",
    "LIFECYCLE",
    "PAYLOADS",
    "QUEUE_CHANGES_ENDING_TURNS",
    "SCHEMA_VERSION",
    "TURN_END_EVENTS",
    "Envelope",
    "EventType",
    "Outbox",
    "UnknownEvent",
    "envelope_of",
    "publish",
    "publish_many",
    "session_id_of",
    "tenant_group",
    "thread_group",
]
