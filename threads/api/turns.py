"""Turns: ``POST/GET /api/v1/threads/{id}/turns`` (submit_turn, list) and
``/api/v1/turns/{turn_id}`` (get, remove, cancel, promote, wait, stream).

``wait`` and ``stream`` never hold a sync worker thread while they wait: under ASGI the view
checks the caller and the turn, then answers with a body produced on the event loop, which
``wait`` writes once a notice says the turn may have ended (:mod:`threads.turn_signals`)
and ``stream`` as the thread's channel group delivers its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max, Min, Q
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.connections import connection_release
from common.pagination import PAGE_PARAMETERS, paginate_page
from common.schema import error_response, page_of
from threads import turn_signals
from threads.api.base import (
    IDEMPOTENCY_KEY,
    WORK_REFUSED,
    ThreadScopedView,
    TurnScopedView,
    idempotent,
)
from threads.api.events import EventStreamRenderer, StreamScope, sse_response
from threads.api.messages import MessageSendInput
from threads.api.run_outputs import (
    ActionSerializer,
    MessageSerializer,
    QueuedMessageSerializer,
    TurnSerializer,
)
from threads.events import QUEUE_CHANGES_ENDING_TURNS, TURN_END_EVENTS, EventType
from threads.models import (
    TURN_PAUSED,
    TURN_TERMINAL,
    Event,
    RunStatus,
    Turn,
    TurnSource,
    TurnStrategy,
)
from threads.services.actions import turn_pending_actions
from threads.services.attachments import attachments_store
from threads.services.control import turn_cancel
from threads.services.inbox import message_queue, queued_message_fields
from threads.services.status import turn_json
from threads.services.turns import (
    turn_list,
    turn_message_ids,
    turn_messages,
    turn_promote_queued,
    turn_remove,
    turn_reread,
    turn_status,
)
from threads.streams import Delivery, EventCursor

DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 600.0
# A waiter re-reads the turn at least this often, whatever notices it hears.
RECHECK_S = 5.0


SUBMIT_DESCRIPTION = (
    "Queues a message as a turn and answers 202 with it at once. `multitask_strategy` says "
    "what happens to a turn already running: `enqueue` (wait behind it, in submission order), "
    "`reject` (409 `thread_busy` naming it), `interrupt` (it ends cancelled, what it wrote "
    "stays) or `rollback` (it ends cancelled and what it wrote is deleted). A repeat with the "
    "same `Idempotency-Key` answers the first answer and queues nothing."
)
SUBMIT_WAIT_DESCRIPTION = (
    "The body of `POST .../turns`, then the answer of `GET /turns/{turn_id}/wait` for the turn "
    "it queued: `done` is false when `timeout` passed first, and the turn runs on. A repeat "
    "with the same `Idempotency-Key` queues nothing and waits for the first request's turn."
)
WAIT_DESCRIPTION = (
    "Answers once the turn is over, rests on a person's decision (`waiting_permission`, "
    "`waiting_input`: `actions` lists what they are asked) or `timeout` seconds passed."
)
REMOVE_DESCRIPTION = "The queued turn ends `cancelled` (outcome `removed`); 409 for any other."
CANCEL_DESCRIPTION = (
    "A queued turn ends `cancelled` at once; a running one is aborted (what it wrote stays, "
    "its open calls are closed) and may still show `running` for a moment: wait for it. A "
    "finished turn is left as it is."
)
STREAM_DESCRIPTION = (
    "The turn's events as Server-Sent Events, from its `queue.changed` `added` to the event "
    "that ends it (`turn.completed`, `turn.failed`, `turn.cancelled`, or `queue.changed` "
    "`removed`/`cancelled`)."
)
REASONING = OpenApiParameter(
    "reasoning", bool, OpenApiParameter.QUERY, description="also `reasoning.delta` events"
)


class TurnSubmitInput(serializers.Serializer[Any]):
    input = MessageSendInput(help_text="the message: content, role, attachments, silent, metadata")
    multitask_strategy = serializers.ChoiceField(
        choices=TurnStrategy.choices, default=TurnStrategy.ENQUEUE
    )
    metadata = serializers.DictField(required=False, help_text="the turn's metadata")


class TurnListQuery(serializers.Serializer[Any]):
    status = serializers.ChoiceField(
        choices=RunStatus.choices, required=False, help_text="only the turns in this status"
    )


class TurnWaitQuery(serializers.Serializer[Any]):
    timeout = serializers.FloatField(
        min_value=0, max_value=MAX_WAIT_S, default=DEFAULT_WAIT_S,
        help_text=f"seconds to wait, at most {MAX_WAIT_S:.0f} (default {DEFAULT_WAIT_S:.0f})",
    )  # fmt: skip


class SubmittedTurnSerializer(TurnSerializer):
    """A submitted turn, queued; for a message, the message as it will be stored."""

    message_id = serializers.UUIDField(
        required=False, help_text="for a message: the id it will have"
    )
    message = QueuedMessageSerializer(
        required=False, help_text="for a message: the message as it will be stored"
    )


class TurnWaitSerializer(serializers.Serializer[Any]):
    """A turn after a wait: the turn, the messages it wrote, and whether it is over."""

    turn = TurnSerializer()
    messages = MessageSerializer(many=True, help_text="what the turn wrote, oldest first")
    done = serializers.BooleanField(
        help_text="the turn is over; false when the timeout passed first, or when it rests on "
        "a person's decision"
    )
    actions = ActionSerializer(
        many=True, required=False,
        help_text="while the turn rests on a person's decision: what they are asked",
    )  # fmt: skip


def submitted_json(turn: Turn) -> dict[str, Any]:
    """A 202 answer: the turn, and for a message turn the message as it will be stored."""
    return {**turn_json(turn), **queued_message_fields(turn)}


def _detail(turn: Turn) -> dict[str, Any]:
    return turn_json(turn, message_ids=turn_message_ids(turns=[turn])[turn.pk])


def _listed(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    written = turn_message_ids(turns=turns)
    return [turn_json(turn, message_ids=written[turn.pk]) for turn in turns]


def _submit(view: ThreadScopedView, request: Request) -> tuple[Response, Turn]:
    """submit_turn from the request's body: the answer (202, or the first answer given for
    a repeated ``Idempotency-Key``) and the turn it names."""
    payload = TurnSubmitInput(data=request.data)
    payload.is_valid(raise_exception=True)
    data = payload.validated_data
    thread = view.thread()
    given = data["input"]
    created: list[Turn] = []

    def submit() -> tuple[int, dict[str, Any]]:
        refs = attachments_store(thread=thread, items=given.get("attachments", []))
        turn = message_queue(
            thread=thread, role=given["role"], content=given.get("content"),
            attachments=refs, silent=given["silent"], metadata=given.get("metadata"),
            source=TurnSource.SUBMIT, strategy=data["multitask_strategy"],
            turn_metadata=data.get("metadata"),
        )  # fmt: skip
        created.append(turn)
        return status.HTTP_202_ACCEPTED, submitted_json(turn)

    answer = idempotent(request, view.principal, submit)
    turn = created[0] if created else Turn.objects.get(pk=answer.data["id"], thread=thread)
    return answer, turn


class ThreadTurnsView(ThreadScopedView):
    @extend_schema(
        summary="Submit a turn to a thread", description=SUBMIT_DESCRIPTION,
        request=TurnSubmitInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: SubmittedTurnSerializer, 409: WORK_REFUSED},
        operation_id="thread_turns_submit",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """submit_turn: queue a message as a turn and answer 202 with it at once.
        ``multitask_strategy`` says what happens to a turn already running: ``enqueue``
        (wait behind it, FIFO), ``reject`` (409 naming it), ``interrupt`` (it ends
        cancelled, what it wrote stays) or ``rollback`` (it ends cancelled and what it wrote
        is deleted). ``Idempotency-Key`` makes a retry return the first answer."""
        return _submit(self, request)[0]

    @extend_schema(
        summary="List a thread's turns", description="Newest first.",
        parameters=[TurnListQuery, *PAGE_PARAMETERS], responses=page_of(TurnSerializer),
        operation_id="thread_turns_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's turns, newest first; ``?status=`` filters by status."""
        query = TurnListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = turn_list(thread=self.thread(), status=query.validated_data.get("status"))
        return paginate_page(request, rows, _listed, view=self)


NOT_QUEUED = error_response(409, "The turn is not queued")
# One Server-Sent Event: ``id`` (the event's sequence; none for a transient event),
# ``event`` (its type) and ``data`` (its envelope as JSON).
SSE_EVENT = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "event": {"type": "string"},
                   "data": {"type": "string"}},
    "required": ["event", "data"],
}  # fmt: skip


class TurnDetailView(TurnScopedView):
    @extend_schema(summary="Get a turn", responses=TurnSerializer, operation_id="turns_retrieve")
    def get(self, request: Request, turn_id: str) -> Response:
        """The turn: status, outcome, error, usage and the ids of the messages it wrote."""
        return Response(_detail(self.turn()))

    @extend_schema(
        summary="Remove a queued turn", description=REMOVE_DESCRIPTION,
        responses={200: TurnSerializer, 409: NOT_QUEUED}, operation_id="turns_remove",
    )  # fmt: skip
    def delete(self, request: Request, turn_id: str) -> Response:
        """remove_queued_turn: a queued turn ends cancelled (outcome ``removed``); 409 for a
        turn that is not queued."""
        turn = self.turn()
        return Response(_detail(turn_remove(thread=turn.thread, turn=turn)))


class TurnCancelView(TurnScopedView):
    @extend_schema(
        summary="Cancel a turn", description=CANCEL_DESCRIPTION, request=None,
        responses=TurnSerializer, operation_id="turns_cancel",
    )  # fmt: skip
    def post(self, request: Request, turn_id: str) -> Response:
        """interrupt_turn: a queued turn ends cancelled at once; a running one is aborted
        (what it wrote stays, its open calls are closed). Idempotent; a finished turn is
        left as it is. Answers the turn as it stands (a running one may still be
        ``running`` for a moment: wait for it)."""
        turn = self.turn()
        return Response(_detail(turn_cancel(thread=turn.thread, turn=turn)))


class TurnPromoteView(TurnScopedView):
    @extend_schema(
        summary="Move a queued turn to the front of its thread's queue", request=None,
        responses={200: TurnSerializer, 409: NOT_QUEUED}, operation_id="turns_promote",
    )  # fmt: skip
    def post(self, request: Request, turn_id: str) -> Response:
        """promote_queued_turn: the queued turn moves to the front of its thread's queue;
        409 for a turn that is not queued."""
        turn = self.turn()
        return Response(_detail(turn_promote_queued(thread=turn.thread, turn=turn)))


# Waiting ------------------------------------------------------------------------------------


def _wait_body(turn: Turn) -> bytes:
    """The answer for ``turn`` as read now (as last read, when it is gone)."""
    return _answer(turn_reread(turn=turn) or turn)


def _answer(turn: Turn) -> bytes:
    messages = turn_messages(turn=turn)
    body = {"turn": turn_json(turn, message_ids=[message["id"] for message in messages]),
            "messages": messages, "done": turn.status in TURN_TERMINAL}  # fmt: skip
    if turn.status in TURN_PAUSED:  # what the person is asked
        body["actions"] = turn_pending_actions(turn=turn)
    return json.dumps(body, cls=DjangoJSONEncoder).encode()


# A wait answers once the turn is over, or rests on a person's decision.
_ANSWERED = TURN_TERMINAL | TURN_PAUSED


def _body_once_ended(turn: Turn, *, woken: bool = False) -> bytes | None:
    """The answer when the turn has ended (or is gone), else None. A first look reads the
    status alone; after a notice (the turn has likely ended) the whole turn at once."""
    if not woken:
        status = turn_status(turn=turn)
        if status is not None and status not in _ANSWERED:
            return None
    current = turn_reread(turn=turn)
    if current is not None and current.status not in _ANSWERED:
        return None
    return _answer(current or turn)


WAIT_ANSWER = OpenApiResponse(
    TurnWaitSerializer,
    description="`{turn, messages, done}`: the turn, the messages it wrote, and whether it "
    "is terminal (false when the timeout passed first, or when the turn rests on a person's "
    "decision: then `actions` lists what they are asked)",
)


def _waited(request: Request, turn: Turn, timeout: float, since: float) -> HttpResponseBase:
    """The wait's answer for ``turn``: at once when it is terminal, else a body written on
    the event loop (under ASGI) once it is or ``timeout`` seconds passed. ``since``
    (``time.monotonic()``) is no later than the read or write that gave ``turn`` its
    status."""
    if turn.status in _ANSWERED:  # nothing to wait for
        return HttpResponse(_answer(turn), content_type="application/json")
    if not isinstance(request._request, ASGIRequest):
        return StreamingHttpResponse(_wait_sync(turn, timeout), content_type="application/json")
    # The wait holds no connection: this thread's goes back to the pool now (a read after a
    # notice takes one), or concurrent waits would starve the other requests of the pool.
    connection_release()
    return StreamingHttpResponse(_wait_async(turn, timeout, since), content_type="application/json")


class TurnWaitView(TurnScopedView):
    @extend_schema(
        summary="Wait for a turn to end", description=WAIT_DESCRIPTION,
        parameters=[TurnWaitQuery], responses={200: WAIT_ANSWER}, operation_id="turns_wait",
    )  # fmt: skip
    def get(self, request: Request, turn_id: str) -> HttpResponseBase:
        """Block until the turn is terminal, rests on a person's decision
        (``waiting_permission``/``waiting_input``: the answer lists its pending ``actions``)
        or ``timeout`` seconds (default 30, at most 600) pass, then answer the turn, the
        messages it wrote and ``done``."""
        since = time.monotonic()
        query = TurnWaitQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        return _waited(request, self.turn(), float(query.validated_data["timeout"]), since)


class ThreadTurnsWaitView(ThreadScopedView):
    @extend_schema(
        summary="Submit a turn to a thread and wait for it to end",
        description=SUBMIT_WAIT_DESCRIPTION,
        request=TurnSubmitInput, parameters=[TurnWaitQuery, IDEMPOTENCY_KEY],
        responses={200: WAIT_ANSWER, 409: WORK_REFUSED},
        operation_id="thread_turns_submit_wait",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> HttpResponseBase:
        """submit_turn, then wait for that turn in the same request: the body of ``POST
        …/turns``, the answer of ``GET /turns/{id}/wait`` (``timeout`` seconds, default 30,
        at most 600; ``done`` is false when it passed first and the turn runs on). A repeat
        with the same ``Idempotency-Key`` waits for the first request's turn."""
        since = time.monotonic()
        query = TurnWaitQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        submitted, turn = _submit(self, request)
        response = _waited(request, turn, float(query.validated_data["timeout"]), since)
        if replayed := submitted.get("Idempotent-Replayed"):
            response["Idempotent-Replayed"] = replayed
        return response


async def _wait_async(turn: Turn, timeout: float, since: float) -> AsyncIterator[bytes]:
    """Read the turn whenever a notice says a turn of its thread may have ended
    (:mod:`threads.turn_signals`), at least every ``RECHECK_S``. The first read is skipped
    when the turn had not ended at ``since`` and no notice can have slipped by since."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    signals = turn_signals.waiters()
    thread_id = str(turn.thread_id)
    with signals.registered(thread_id) as woken:
        await signals.ready()  # registered first: an end committed after the read wakes us
        unread = signals.quiet_since(thread_id, since)  # it has not ended: nothing to read
        noticed, body = False, None
        while True:
            if unread:
                body, unread = None, False
            else:
                woken.clear()
                body = await database_sync_to_async(_body_once_ended)(turn, woken=noticed)
            remaining = deadline - loop.time()
            if body is not None or remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(remaining, RECHECK_S))
            noticed = woken.is_set()
    yield body if body is not None else await database_sync_to_async(_wait_body)(turn)


def _wait_sync(turn: Turn, timeout: float) -> Iterator[bytes]:
    """WSGI (tests, management tools): poll the row."""
    deadline = time.monotonic() + timeout
    body = _body_once_ended(turn)
    while body is None and time.monotonic() < deadline:
        time.sleep(0.05)
        body = _body_once_ended(turn)
    yield body if body is not None else _wait_body(turn)


# Streaming ------------------------------------------------------------------------------------


class _TurnScope(StreamScope):
    """A turn's events, ending with the event that ends it."""

    def __init__(self, turn: Turn) -> None:
        self.turn_id = str(turn.pk)
        self.ended = turn.status in TURN_TERMINAL

    def keep(self, delivery: Delivery) -> bool:
        if delivery.type == EventType.QUEUE_CHANGED:
            return self._in_queue_change(delivery)
        # The id's text first: most frames of a busy thread are another turn's.
        return self.turn_id in delivery.text and (
            json.loads(delivery.text).get("turn_id") == self.turn_id
        )

    def last(self, delivery: Delivery) -> bool:
        if delivery.type in TURN_END_EVENTS.values():
            return True
        if delivery.type == EventType.QUEUE_CHANGED:
            payload = json.loads(delivery.text)["payload"]
            return payload.get("change") in QUEUE_CHANGES_ENDING_TURNS
        return False

    def _in_queue_change(self, delivery: Delivery) -> bool:
        payload = json.loads(delivery.text)["payload"]
        items = payload.get("items") or [payload.get("item") or {}]
        return any(item.get("id") == self.turn_id for item in items)


def _turn_start(turn: Turn) -> int:
    """The sequence after which the turn's stream replays: before its first event, or the
    thread's newest event when it has none yet (one read, so none can slip between)."""
    found = Event.objects.filter(thread_id=turn.thread_id).aggregate(
        first=Min(
            "sequence",
            filter=Q(turn_id=str(turn.pk))
            | Q(type=EventType.QUEUE_CHANGED, payload__item__id=str(turn.pk)),
        ),
        newest=Max("sequence"),
    )
    if found["first"] is not None:
        return int(found["first"]) - 1
    return int(found["newest"] or 0)


class TurnStreamView(TurnScopedView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        summary="Stream a turn's events", description=STREAM_DESCRIPTION,
        parameters=[REASONING],
        responses={(200, "text/event-stream"): OpenApiResponse(
            SSE_EVENT, description="Server-Sent Events of the turn")},
        operation_id="turns_stream",
    )  # fmt: skip
    def get(self, request: Request, turn_id: str) -> HttpResponseBase:
        """The turn's events as Server-Sent Events, from its first (its ``queue.changed``
        added) until the event that ends it; ``?reasoning=1`` adds ``reasoning.delta``."""
        turn = self.turn()
        reasoning = request.query_params.get("reasoning", "") in ("1", "true", "yes")
        cursor = EventCursor(thread=turn.thread, after=_turn_start(turn), reasoning=reasoning)
        return sse_response(request, cursor, _TurnScope(turn))


turn_urlpatterns = [
    path("turns/<uuid:turn_id>", TurnDetailView.as_view(), name="turn-detail"),
    path("turns/<uuid:turn_id>/cancel", TurnCancelView.as_view(), name="turn-cancel"),
    path("turns/<uuid:turn_id>/promote", TurnPromoteView.as_view(), name="turn-promote"),
    path("turns/<uuid:turn_id>/wait", TurnWaitView.as_view(), name="turn-wait"),
    path("turns/<uuid:turn_id>/stream", TurnStreamView.as_view(), name="turn-stream"),
]
urlpatterns = [
    path("turns", ThreadTurnsView.as_view(), name="thread-turns"),
    path("turns/wait", ThreadTurnsWaitView.as_view(), name="thread-turns-wait"),
]
