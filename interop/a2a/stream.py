"""A task's events from our event log: ``SendStreamingMessage`` and ``SubscribeToTask`` as
Server-Sent Events, and the wait of a blocking ``SendMessage``.

Both follow the turn's thread with :class:`threads.streams.EventCursor` (subscribe, replay,
then live: in order, each once, gaps filled from the log), on the event loop: a stream or a
wait holds no sync worker thread and no database connection between reads. What a turn's
events become:

- ``turn.started``: a status update, *working*;
- a finished answer of the agent (``message.created``/``message.updated`` of a top-level
  assistant message with text): an artifact update carrying the answer whole (persisted
  events only, so a stream resumed from the log sends the same);
- ``action.required``: a status update, *input-required*, and the stream ends (an
  interrupted task: the answer goes through the REST API's actions, then
  ``SubscribeToTask`` follows the task again);
- the event that ends the turn (``turn.completed``/``failed``/``cancelled``, or a
  ``queue.changed`` that removed or cancelled it while queued): the final status update, read
  from the turn as stored, and the stream ends.

A stream ends too when the caller's key is revoked or expires (an ``error`` event).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from a2a.server.request_handlers.response_helpers import prepare_response_object
from a2a.types import (
    Message,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from channels.db import database_sync_to_async

from common.time import now_us
from interop.a2a.tasks import (
    FINAL_STATES,
    agent_message,
    answer_artifact,
    is_answer,
    task_read,
    task_status,
)
from tenancy.credentials import credential_groups, credentials_expire_at
from tenancy.principals import Principal
from threads.events import QUEUE_CHANGES_ENDING_TURNS, TURN_END_EVENTS, EventType
from threads.models import Turn
from threads.services.turns import turn_messages, turn_reread
from threads.streams import Delivery, EventCursor, thread_follow

KEEPALIVE_S = 15.0
_ENDS = frozenset(TURN_END_EVENTS.values())


@dataclass(frozen=True)
class Follower:
    """Who follows which turn: the turn, and the caller's credentials (the groups that hear
    of their loss, and the key's expiry)."""

    turn: Turn
    groups: list[str]
    expires_at: dt.datetime | None

    @classmethod
    def of(cls, turn: Turn, principal: Principal) -> Follower:
        return cls(turn, credential_groups(principal), credentials_expire_at(principal))


def _deliveries(follower: Follower, after: int) -> AsyncIterator[Delivery | None]:
    """The thread's events after ``after``, replayed then live; None when ``KEEPALIVE_S``
    passed without one. Raises CredentialsGone when the caller's key goes away."""
    cursor = EventCursor(thread=follower.turn.thread, after=after)
    return thread_follow(
        cursor, groups=follower.groups, expires_at=follower.expires_at, tick_s=KEEPALIVE_S
    )


class TaskUpdates:
    """Turns one turn's events into A2A stream responses: for its streams here, and for
    its push notifications (:mod:`interop.a2a.push`)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.turn_id = str(turn.pk)
        self.context_id = str(turn.thread_id)

    def envelope(self, delivery: Delivery) -> dict[str, Any] | None:
        """The delivery's envelope when it is about this turn."""
        if delivery.sequence is None or self.turn_id not in delivery.text:
            return None  # the id's text first: most events of a busy thread are another turn's
        envelope: dict[str, Any] = json.loads(delivery.text)
        if envelope.get("turn_id") == self.turn_id:
            return envelope
        if delivery.type == EventType.QUEUE_CHANGED:
            payload = envelope["payload"]
            items = payload.get("items") or [payload.get("item") or {}]
            if any(item.get("id") == self.turn_id for item in items):
                return envelope
        return None

    def status(
        self, state: TaskState, moment: int, message: Message | None = None
    ) -> StreamResponse:
        return StreamResponse(
            status_update=TaskStatusUpdateEvent(
                task_id=self.turn_id, context_id=self.context_id,
                status=task_status(state, moment, message),
            )
        )  # fmt: skip

    def artifact(self, message: Mapping[str, Any]) -> StreamResponse:
        return StreamResponse(
            artifact_update=TaskArtifactUpdateEvent(
                task_id=self.turn_id, context_id=self.context_id,
                artifact=answer_artifact(message), append=False, last_chunk=True,
            )
        )  # fmt: skip

    @staticmethod
    def _ends(kind: str, payload: Mapping[str, Any]) -> bool:
        return kind in _ENDS or (
            kind == EventType.QUEUE_CHANGED and payload.get("change") in QUEUE_CHANGES_ENDING_TURNS
        )

    def reads(self, envelope: Mapping[str, Any]) -> bool:
        """Whether :meth:`responses` reads the database for this event (the turn's end: the
        turn as stored; a message whose event carried only its id: the message)."""
        kind, payload = envelope["type"], envelope.get("payload") or {}
        if kind in (EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED):
            return "role" not in payload
        return self._ends(kind, payload)

    def responses(self, envelope: Mapping[str, Any]) -> tuple[list[StreamResponse], bool]:
        """What one event of the turn sends, and whether the task's updates end with it
        (reads the database when :meth:`reads` says so)."""
        kind, payload = envelope["type"], envelope.get("payload") or {}
        moment = int(envelope.get("timestamp") or now_us())
        if kind == EventType.TURN_STARTED:
            return [self.status(TaskState.TASK_STATE_WORKING, moment)], False
        if kind in (EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED):
            message = payload if "role" in payload else self._message(str(payload["id"]))
            return ([self.artifact(message)] if message and is_answer(message) else []), False
        if kind == EventType.ACTION_REQUIRED:
            asked = f"{payload.get('kind')} {payload.get('name')}"
            text = f"The task waits for a person's decision: {asked}"
            message = agent_message(text, turn=self.turn, message_id=str(payload.get("action_id")))
            return [self.status(TaskState.TASK_STATE_INPUT_REQUIRED, moment, message=message)], True
        if self._ends(kind, payload):
            task = _task_now(self.turn)
            return [self.status(task.status.state, moment, message=task.status.message)], True
        return [], False

    def _message(self, message_id: str) -> dict[str, Any] | None:
        """A message whose event carried only its id (a large one), read from the log."""
        return next((m for m in turn_messages(turn=self.turn) if m["id"] == message_id), None)


def _task_now(turn: Turn) -> Task:
    return task_read(turn=turn_reread(turn=turn) or turn, history_length=0)


async def task_events(
    follower: Follower, *, first: Task, after: int
) -> AsyncGenerator[StreamResponse | None, None]:
    """The task's stream: ``first`` (the task as it stood), then what its turn's events after
    sequence ``after`` become, until it ends or rests on a person's decision; None when a
    keepalive is due. A task already over sends only ``first``. Raises CredentialsGone."""
    yield StreamResponse(task=first)
    if first.status.state in FINAL_STATES:
        return
    events = TaskUpdates(follower.turn)
    async for delivery in _deliveries(follower, after):
        if delivery is None:
            yield None
            continue
        envelope = events.envelope(delivery)
        if envelope is None:
            continue
        if events.reads(envelope):
            responses, ended = await database_sync_to_async(events.responses)(envelope)
        else:
            responses, ended = events.responses(envelope)
        for response in responses:
            yield response
        if ended:
            return


async def task_outcome(
    follower: Follower, *, after: int, timeout: float, history_length: int | None = None
) -> Task:
    """Wait until the task ends or rests on a person's decision, at most ``timeout``
    seconds, then the task as stored (``history_length``: its most recent messages only).
    Raises CredentialsGone."""
    turn = follower.turn
    stream = task_events(follower, first=Task(), after=after)
    try:
        async with asyncio.timeout(timeout):
            async for _ in stream:
                pass
    except TimeoutError:
        pass
    finally:
        await stream.aclose()
    task: Task = await database_sync_to_async(_task_with_history)(turn, history_length)
    return task


def _task_with_history(turn: Turn, history_length: int | None) -> Task:
    return task_read(turn=turn_reread(turn=turn) or turn, history_length=history_length)


def sse_frame(request_id: str | int | None, response: StreamResponse | None) -> bytes:
    """One Server-Sent Event: a JSON-RPC response carrying ``response``, or a comment (a
    keepalive) for None."""
    if response is None:
        return b": keepalive\n\n"
    body = json.dumps(prepare_response_object(request_id, response, (StreamResponse,)))
    return f"data: {body}\n\n".encode()
