"""A turn's events as an AG-UI event stream: a second encoding of the same log.

:class:`RunScope` is a :class:`threads.api.events.StreamScope`: the turn's stream
(:func:`threads.api.events.sse_response`, replay then live, de-duplicated and gap-free)
hands it each of the turn's events, and it answers the AG-UI events they mean, encoded by
``ag_ui.encoder.EventEncoder``:

- ``step.started`` / ``step.completed`` -> ``STEP_STARTED`` / ``STEP_FINISHED``;
- ``model.delta`` -> ``TEXT_MESSAGE_START`` (first) and ``TEXT_MESSAGE_CONTENT``; the
  answer's ``message.updated`` (completed) sends what no delta carried (a stream that joined
  late, after a reconnect or a replay) and ``TEXT_MESSAGE_END``, then for each tool call of
  the answer ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` / ``TOOL_CALL_END``;
- a tool's result message -> ``TOOL_CALL_RESULT``;
- ``custom`` -> ``CUSTOM``;
- the turn's end -> ``RUN_FINISHED`` (``outcome`` success, or cancelled) or ``RUN_ERROR``
  (failed); its pause on an action -> ``RUN_FINISHED`` whose outcome is success with the
  frontend tool call it waits for (``pendingToolCallIds``), or an ``interrupt`` (a person's
  approval or input: the interrupt's id is the action's).

The run's closing events are sent once the stream of the turn has ended
(:func:`run_body`): the steps and message left open are closed and, when the run changed the
thread's values, a ``STATE_SNAPSHOT`` of them comes first. Events of subprompts (messages
below the top level) and what AG-UI has no event for (costs, permissions, queue moves) are
left out; they stay in the thread's own event stream.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from channels.db import database_sync_to_async
from django.http import StreamingHttpResponse

from threads.api.events import REVOKED_FRAME, StreamScope
from threads.events import QUEUE_CHANGES_ENDING_TURNS, EventType
from threads.models import Thread
from threads.runtime.client_tools import RESULT_SCHEMA
from threads.services.message_shapes import tool_calls_json
from threads.services.values import value_list, value_of
from threads.streams import Delivery

ENCODER = EventEncoder()
# The turn's events a run maps (all others of the turn are left out, unparsed).
_MAPPED = frozenset({
    EventType.STEP_STARTED, EventType.STEP_COMPLETED, EventType.MODEL_DELTA,
    EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED, EventType.CUSTOM,
    EventType.KV_CHANGED, EventType.ACTION_REQUIRED, EventType.RUNTIME_ERROR,
    EventType.TURN_COMPLETED, EventType.TURN_FAILED, EventType.TURN_CANCELLED,
    EventType.QUEUE_CHANGED,
})  # fmt: skip


def encoded(events: Sequence[BaseEvent]) -> bytes:
    return "".join(ENCODER.encode(event) for event in events).encode()


def state_snapshot(thread: Thread) -> StateSnapshotEvent:
    """The thread's values (its KV store) as AG-UI state, by key."""
    values = {row.key: value_of(thread=thread, row=row).value for row in value_list(thread=thread)}
    return StateSnapshotEvent(snapshot=values)


def run_started(*, thread_id: str, run_id: str, ours: Mapping[str, str]) -> RunStartedEvent:
    """The run's first event; ``ours`` (our thread's and turn's ids) rides in its metadata."""
    return RunStartedEvent(
        thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION, metadata=dict(ours)
    )


class RunScope(StreamScope):
    """One run: the events of turn ``turn_id`` mapped to AG-UI events, for run ``run_id``
    of the frontend's thread ``thread_id``. ``frontend_tools`` are the run's frontend tool
    names; ``answered`` the calls whose results the frontend sent with this run (not sent
    back). Holds what is open (the message being streamed, steps, sent calls) and how the
    run ends, once it has (:attr:`ending`)."""

    def __init__(
        self,
        *,
        turn_id: str,
        thread_id: str,
        run_id: str,
        frontend_tools: frozenset[str] = frozenset(),
        answered: frozenset[str] = frozenset(),
    ) -> None:
        self.turn_id = turn_id
        self.thread_id = thread_id
        self.run_id = run_id
        self.frontend_tools = frontend_tools
        self.answered = answered
        self.streamed: dict[str, str] = {}  # text sent per message
        # Deltas are never stored: an answer's are streamed only when it began after the
        # replay (every delta of it then arrives live); one that began before is sent whole
        # when it completes. Deltas that overtake their answer's start wait for it.
        self.live = False
        self.followed: set[str] = set()
        self.unfollowed: set[str] = set()
        self.early: dict[str, list[str]] = {}
        self.open_message: str | None = None
        self.finished: set[str] = set()  # answers whose end was sent
        self.steps: list[str] = []  # open steps, by name
        self.calls: set[str] = set()  # tool calls sent
        self.results: set[str] = set()  # tool results sent
        self.state_changed = False
        self.error: tuple[str, str | None] | None = None  # the last runtime.error
        self.ending: BaseEvent | None = None

    # StreamScope --------------------------------------------------------------------------

    def keep(self, delivery: Delivery) -> bool:
        if delivery.type not in _MAPPED or self.turn_id not in delivery.text:
            return False
        envelope = json.loads(delivery.text)
        if delivery.type == EventType.QUEUE_CHANGED:
            payload = envelope["payload"]
            items = payload.get("items") or [payload.get("item") or {}]
            return payload.get("change") in QUEUE_CHANGES_ENDING_TURNS and any(
                item.get("id") == self.turn_id for item in items
            )
        return bool(envelope.get("turn_id") == self.turn_id)

    def last(self, delivery: Delivery) -> bool:
        return self.ending is not None

    def frame(self, delivery: Delivery) -> bytes:
        envelope = json.loads(delivery.text)
        return encoded(list(self.map(delivery.type, envelope.get("payload") or {})))

    def replayed(self) -> None:
        self.live = True

    # Mapping ------------------------------------------------------------------------------

    def map(self, kind: str, payload: Mapping[str, Any]) -> Iterator[BaseEvent]:
        """The AG-UI events one of the turn's events means (none for most)."""
        if kind == EventType.STEP_STARTED:
            name = f"step {payload.get('step')}"
            self.steps.append(name)
            yield StepStartedEvent(step_name=name)
        elif kind == EventType.STEP_COMPLETED:
            yield from self._text_end()
            name = f"step {payload.get('step')}"
            if name in self.steps:  # a resumed step started in an earlier run
                self.steps.remove(name)
                yield StepFinishedEvent(step_name=name)
        elif kind == EventType.MODEL_DELTA:
            if payload.get("depth") == 0 and payload.get("delta"):
                yield from self._delta(str(payload["message_id"]), str(payload["delta"]))
        elif kind in (EventType.MESSAGE_CREATED, EventType.MESSAGE_UPDATED):
            yield from self._message(payload)
        elif kind == EventType.CUSTOM:
            yield CustomEvent(name=str(payload.get("name")), value=payload.get("data"))
        elif kind == EventType.KV_CHANGED:
            self.state_changed = True
        elif kind == EventType.RUNTIME_ERROR:
            self.error = (str(payload.get("message") or ""), payload.get("code"))
        elif kind == EventType.ACTION_REQUIRED:
            self.ending = self._paused(payload)
        elif kind == EventType.TURN_COMPLETED:
            self.ending = RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id)
        elif kind == EventType.TURN_FAILED:
            message, code = self.error or (f"the run ended {payload.get('status')}", None)
            self.ending = RunErrorEvent(
                message=message or str(payload.get("reason")), code=code or payload.get("reason")
            )
        else:  # turn.cancelled, or the queued turn removed or cancelled
            self.ending = RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id,
                outcome=RunFinishedCancelledOutcome(),
            )  # fmt: skip

    def _message(self, message: Mapping[str, Any]) -> Iterator[BaseEvent]:
        """A top-level message stored or updated: a completed answer's rest, end and tool
        calls; a tool's result."""
        if message.get("parent_id") or message.get("depth"):
            return
        message_id = str(message.get("id"))
        if message.get("role") == "assistant" and message.get("status") == "pending":
            yield from self._answer_started(message_id)
        elif message.get("role") == "assistant":
            if message_id in self.finished:
                return
            self.finished.add(message_id)
            self.early.pop(message_id, None)
            content = message.get("content")
            sent = self.streamed.get(message_id, "")
            if isinstance(content, str) and content.startswith(sent) and len(content) > len(sent):
                yield from self._text(message_id, content[len(sent) :])
            yield from self._text_end()
            yield from self._tool_calls(message_id, message.get("tool_calls"))
        elif message.get("role") == "tool" and message.get("tool_call_id"):
            call_id = str(message["tool_call_id"])
            if call_id in self.answered or call_id in self.results:
                return
            self.results.add(call_id)
            content = message.get("content")
            yield ToolCallResultEvent(
                message_id=message_id, tool_call_id=call_id, role="tool",
                content=content if isinstance(content, str) else "",
            )  # fmt: skip

    def _answer_started(self, message_id: str) -> Iterator[BaseEvent]:
        """An answer's pending row: followed from here when the stream is live (with the
        deltas that overtook it), else left to its completion."""
        if message_id in self.followed or message_id in self.unfollowed:
            return
        if not self.live:
            self.unfollowed.add(message_id)
            return
        self.followed.add(message_id)
        for delta in self.early.pop(message_id, []):
            yield from self._text(message_id, delta)

    def _delta(self, message_id: str, delta: str) -> Iterator[BaseEvent]:
        if message_id in self.followed:
            yield from self._text(message_id, delta)
        elif message_id not in self.unfollowed and message_id not in self.finished:
            self.early.setdefault(message_id, []).append(delta)

    def _text(self, message_id: str, delta: str) -> Iterator[BaseEvent]:
        if self.open_message != message_id:
            yield from self._text_end()
            self.open_message = message_id
            yield TextMessageStartEvent(message_id=message_id, role="assistant")
        self.streamed[message_id] = self.streamed.get(message_id, "") + delta
        yield TextMessageContentEvent(message_id=message_id, delta=delta)

    def _text_end(self) -> Iterator[BaseEvent]:
        if self.open_message is not None:
            yield TextMessageEndEvent(message_id=self.open_message)
            self.open_message = None

    def _tool_calls(self, message_id: str, answered: object) -> Iterator[BaseEvent]:
        """The answer's tool calls (``tool_calls``: ``[{id, name, arguments}]`` as the API
        answers them; events stored before that carry the JSON string of OpenAI's shape,
        read alike), each as start, arguments and end."""
        calls = tool_calls_json(answered if isinstance(answered, str | list) else None)
        for call in calls:
            call_id = call["id"]
            if call_id in self.calls:
                continue
            self.calls.add(call_id)
            yield ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=call["name"], parent_message_id=message_id
            )
            yield ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(call["arguments"]))
            yield ToolCallEndEvent(tool_call_id=call_id)

    def _paused(self, payload: Mapping[str, Any]) -> RunFinishedEvent:
        """The run's end when the turn rests on an action: a frontend tool's call is left
        for the frontend to answer; anything else a person owes is an interrupt."""
        action = payload.get("action") or {}
        call_id = payload.get("tool_call_id")
        if (
            payload.get("kind") == "input"
            and payload.get("name") in self.frontend_tools
            and action.get("schema") == RESULT_SCHEMA
            and isinstance(call_id, str)
        ):
            outcome: Any = RunFinishedSuccessOutcome(pending_tool_call_ids=[call_id])
        else:
            expires = action.get("expires_at")
            interrupt = Interrupt(
                id=str(payload.get("action_id")),
                reason="tool_approval" if payload.get("kind") == "approval" else "input",
                message=action.get("prompt") or f"{payload.get('name')} waits for a person",
                tool_call_id=call_id if isinstance(call_id, str) else None,
                response_schema=action.get("schema") if isinstance(action.get("schema"),
                                                                   dict) else None,
                expires_at=_iso(expires) if isinstance(expires, int) else None,
                metadata={"decisions": action.get("decisions") or [],
                          "arguments": action.get("arguments")},
            )  # fmt: skip
            outcome = RunFinishedInterruptOutcome(interrupts=[interrupt])
        return RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)

    # The end ------------------------------------------------------------------------------

    def closing(self, thread: Thread) -> list[BaseEvent]:
        """The run's last events, once the turn's stream ended: what is open closed, the
        thread's values when the run changed them, then the ending (a ``RUN_ERROR`` when the
        stream ended before the turn did: revoked credentials, a terminated thread). Reads
        the database."""
        events: list[BaseEvent] = list(self._text_end())
        while self.steps:
            events.append(StepFinishedEvent(step_name=self.steps.pop()))
        if self.state_changed:
            events.append(state_snapshot(thread))
        events.append(
            self.ending
            or RunErrorEvent(
                message="the stream ended before the run did (the credentials were revoked "
                "or expired, or the thread was terminated)",
                code="stream_ended",
            )
        )
        return events


def _iso(microseconds: int) -> str:
    return dt.datetime.fromtimestamp(microseconds / 1_000_000, tz=dt.UTC).isoformat()


def run_response(
    stream: StreamingHttpResponse, scope: RunScope, thread: Thread
) -> StreamingHttpResponse:
    """``stream`` (the turn's events as ``scope`` frames them), then the run's closing
    events, as one response with the stream's headers."""
    body: AsyncIterator[bytes] | Iterator[bytes]
    if stream.is_async:
        frames = cast(AsyncIterator[bytes], stream.streaming_content)
        body = run_body(frames, lambda: scope.closing(thread))
    else:
        body = _run_body_sync(
            cast(Iterator[bytes], stream.streaming_content), lambda: scope.closing(thread)
        )
    response = StreamingHttpResponse(body, content_type=ENCODER.get_content_type())
    for header in ("Cache-Control", "X-Accel-Buffering"):
        response[header] = stream[header]
    return response


async def run_body(
    frames: AsyncIterator[bytes], closing: Callable[[], list[BaseEvent]]
) -> AsyncIterator[bytes]:
    """ASGI: the turn's frames (a ``revoked`` frame becomes the run's error), then the
    closing events, read off the event loop."""
    async with contextlib.aclosing(cast(AsyncGenerator[bytes, None], frames)) as inner:
        async for chunk in inner:
            if chunk and chunk != REVOKED_FRAME:
                yield chunk
    yield encoded(await database_sync_to_async(closing)())


def _run_body_sync(
    frames: Iterator[bytes], closing: Callable[[], list[BaseEvent]]
) -> Iterator[bytes]:
    """WSGI: the turn's frames as far as the log holds them, then the closing events."""
    for chunk in frames:
        if chunk and chunk != REVOKED_FRAME:
            yield chunk
    yield encoded(closing())
