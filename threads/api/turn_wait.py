"""Waiting for a turn: ``GET /api/v1/turns/{turn_id}/wait`` and ``POST
/api/v1/threads/{id}/turns/wait`` (submit_turn, then wait for that turn).

A wait never holds a sync worker thread: under ASGI the view checks the caller and the turn,
then answers with a body produced on the event loop, written once a notice says the turn may
have ended (:mod:`threads.turn_signals`) or the timeout passed. Under WSGI the body polls the
turn's row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from channels.db import database_sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request

from common.connections import connection_release
from threads import turn_signals
from threads.api.base import IDEMPOTENCY_KEY, WORK_REFUSED, ThreadScopedView, TurnScopedView
from threads.api.run_outputs import ActionSerializer, MessageSerializer, TurnSerializer
from threads.api.turns import TurnSubmitInput, submit_turn
from threads.models import TURN_PAUSED, TURN_TERMINAL, Turn
from threads.services.actions import turn_pending_actions
from threads.services.status import turn_json
from threads.services.turns import turn_messages, turn_reread, turn_status

DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 600.0
# A waiter re-reads the turn at least this often, whatever notices it hears.
RECHECK_S = 5.0

SUBMIT_WAIT_DESCRIPTION = (
    "The body of `POST .../turns`, then the answer of `GET /turns/{turn_id}/wait` for the turn "
    "it queued: `done` is false when `timeout` passed first, and the turn runs on. A repeat "
    "with the same `Idempotency-Key` queues nothing and waits for the first request's turn."
)
WAIT_DESCRIPTION = (
    "Answers once the turn is over, rests on a person's decision (`waiting_permission`, "
    "`waiting_input`: `actions` lists what they are asked) or `timeout` seconds passed."
)


class TurnWaitQuery(serializers.Serializer[Any]):
    timeout = serializers.FloatField(
        min_value=0, max_value=MAX_WAIT_S, default=DEFAULT_WAIT_S,
        help_text=f"seconds to wait, at most {MAX_WAIT_S:.0f} (default {DEFAULT_WAIT_S:.0f})",
    )  # fmt: skip


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


def _with_extra(body: bytes, extra: Mapping[str, Any] | None) -> bytes:
    """``body`` (a JSON object) with ``extra``'s keys added: what a route that waits as a
    part of more work answers besides the turn (``POST /threads/wait``: the thread)."""
    if not extra:
        return body
    return json.dumps({**json.loads(body), **extra}, cls=DjangoJSONEncoder).encode()


def waited(
    request: Request,
    turn: Turn,
    timeout: float,
    since: float,
    extra: Mapping[str, Any] | None = None,
) -> HttpResponseBase:
    """The wait's answer for ``turn``: at once when it is terminal, else a body written on
    the event loop (under ASGI) once it is or ``timeout`` seconds passed. ``since``
    (``time.monotonic()``) is no later than the read or write that gave ``turn`` its
    status. ``extra``: keys added to the answer."""
    if turn.status in _ANSWERED:  # nothing to wait for
        return HttpResponse(_with_extra(_answer(turn), extra), content_type="application/json")
    if not isinstance(request._request, ASGIRequest):
        body = _wait_sync(turn, timeout, extra)
        return StreamingHttpResponse(body, content_type="application/json")
    # The wait holds no connection: this thread's goes back to the pool now (a read after a
    # notice takes one), or concurrent waits would starve the other requests of the pool.
    connection_release()
    body_async = _wait_async(turn, timeout, since, extra)
    return StreamingHttpResponse(body_async, content_type="application/json")


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
        return waited(request, self.turn(), float(query.validated_data["timeout"]), since)


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
        submitted, turn = submit_turn(self, request)
        response = waited(request, turn, float(query.validated_data["timeout"]), since)
        if replayed := submitted.get("Idempotent-Replayed"):
            response["Idempotent-Replayed"] = replayed
        return response


async def _wait_async(
    turn: Turn, timeout: float, since: float, extra: Mapping[str, Any] | None = None
) -> AsyncIterator[bytes]:
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
    if body is None:
        body = await database_sync_to_async(_wait_body)(turn)
    yield _with_extra(body, extra)


def _wait_sync(
    turn: Turn, timeout: float, extra: Mapping[str, Any] | None = None
) -> Iterator[bytes]:
    """WSGI (tests, management tools): poll the row."""
    deadline = time.monotonic() + timeout
    body = _body_once_ended(turn)
    while body is None and time.monotonic() < deadline:
        time.sleep(0.05)
        body = _body_once_ended(turn)
    yield _with_extra(body if body is not None else _wait_body(turn), extra)


turn_urlpatterns = [
    path("turns/<uuid:turn_id>/wait", TurnWaitView.as_view(), name="turn-wait"),
]
urlpatterns = [
    path("turns/wait", ThreadTurnsWaitView.as_view(), name="thread-turns-wait"),
]
