"""The rules of the status machine, and what every door of it shares.

:data:`THREAD_TRANSITIONS` and :data:`TURN_TRANSITIONS` state as tables which stored status may
follow which (the statements of the sibling modules carry the same rules in their ``WHERE`` and
``CASE`` clauses); :data:`NOT_STORED` says why the rest of the vocabulary is never stored.
:func:`turn_json` is a turn as the API and ``queue.changed`` show it, and
:func:`thread_status_publish` writes the one ``thread.status`` event of a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from threads.events import Outbox, publish
from threads.models import THREAD_REST, TURN_PAUSED, TURN_TERMINAL, RunStatus, Thread, Turn

S = RunStatus

# Which stored status may follow which (a thread's status outside these never changes).
REST = frozenset(THREAD_REST)
# A paused turn's thread shows its turn's status (``waiting_input`` is also a rest status).
PAUSED = frozenset(TURN_PAUSED)
THREAD_TRANSITIONS: Mapping[str, frozenset[str]] = {
    **{rest: frozenset({S.QUEUED, S.RUNNING, S.CANCELLED} | REST) for rest in REST},
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED} | REST),
    S.RUNNING: frozenset({S.RETRYING, S.QUEUED, S.CANCELLED} | REST | PAUSED),
    S.RETRYING: frozenset({S.RUNNING, S.QUEUED, S.CANCELLED} | REST | PAUSED),
    S.WAITING_PERMISSION: frozenset({S.QUEUED, S.CANCELLED} | REST),
    S.WAITING_RESOURCE: frozenset({S.QUEUED, S.CANCELLED} | REST),
}
TURN_TRANSITIONS: Mapping[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.RETRYING} | TURN_TERMINAL | PAUSED),
    S.RETRYING: frozenset({S.RUNNING} | TURN_TERMINAL | PAUSED),
    # Answered: queued to be resumed; or ended while it waited (a stop, cancel, terminate).
    **{paused: frozenset({S.QUEUED, S.CANCELLED}) for paused in PAUSED},
    **{end: frozenset() for end in TURN_TERMINAL},
}
# The statuses of a running turn (a list: the statements take it as a parameter).
ACTIVE = [S.RUNNING, S.RETRYING]
# The statuses of the vocabulary no row holds, and why; docs/engine.md says the same.
NOT_STORED: Mapping[str, str] = {
    S.ACCEPTED: "a turn is stored queued in the transaction that accepts it; the 202 answer "
    "is the acceptance",
    S.PREPARING: "context, model and tools are resolved inside running, in the same step",
    S.STREAMING: "read model only: a model answer of the running turn is pending",
    S.LOST: "read model only: a turn runs and no worker holds the thread's lock",
    S.STALE: "read model only: the lock store cannot be asked whether a worker is alive",
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
        "user": turn.user or None,
    }
    if message_ids is not None:
        body["message_ids"] = list(message_ids)
    return body


def thread_status_publish(
    thread: Thread, before: str, reason: str | None, outbox: Outbox | None
) -> None:
    """Publish :func:`thread_status_change`'s event, if the status changed."""
    event = thread_status_change(thread, before, reason)
    if event is not None:
        publish(thread, *event, outbox=outbox)


def thread_status_change(
    thread: Thread, before: str, reason: str | None
) -> tuple[str, dict[str, Any]] | None:
    """The ``thread.status`` event for a change from ``before``, if the status changed."""
    if thread.status == before:
        return None
    payload: dict[str, Any] = {"status": thread.status}
    if reason:
        payload["reason"] = reason
    return "thread.status", payload
