"""``/api/v1/threads/{id}/events``: the thread's event log, paged as JSON or followed as
Server-Sent Events (``Accept: text/event-stream``).

SSE frames are ``id: <sequence>`` (persisted events only), ``event: <type>`` and
``data: <envelope JSON>``. ``Last-Event-ID`` (sent by EventSource on reconnect) overrides
``?after=``. Under ASGI the stream replays the log and then follows the thread live, with a
comment line after ``KEEPALIVE_S`` quiet seconds and a read of the log when nothing arrived
for a while (``threads.streams.IDLE_RECHECK_S``: an event whose live message was dropped
still arrives, even the thread's last); under WSGI it replays the log and ends. A
terminated thread's stream ends after its events; a request for a terminated thread with
nothing newer is answered ``204`` (EventSource stops reconnecting).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from common.time import now
from tenancy.credentials import REVOKED, credential_groups, credentials_expire_at
from tenancy.viewsets import request_principal
from threads.api.base import ThreadScopedView
from threads.broadcast import unbatched
from threads.events import EventType, thread_group
from threads.models import Thread
from threads.services.events import event_envelopes
from threads.streams import Delivery, EventCursor

EVENT_STREAM = "text/event-stream"
KEEPALIVE_S = 15.0


class EventStreamRenderer(BaseRenderer):
    """Lets ``Accept: text/event-stream`` through content negotiation; errors render as JSON."""

    media_type = EVENT_STREAM
    format = "sse"
    charset = None

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        rendered: bytes = JSONRenderer().render(data)
        return rendered


class EventListQuery(serializers.Serializer[Any]):
    after = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)


def _after(request: Request, query: EventListQuery) -> int:
    last_event_id = request.headers.get("Last-Event-ID")
    if last_event_id is None:
        return int(query.validated_data["after"])
    if not last_event_id.strip().isdigit():
        raise ValidationFailed("Last-Event-ID must be an event sequence", field="Last-Event-ID")
    return int(last_event_id.strip())


def _frame(delivery: Delivery) -> bytes:
    head = f"id: {delivery.sequence}\n" if delivery.sequence is not None else ""
    return f"{head}event: {delivery.type}\ndata: {delivery.text}\n\n".encode()


class EventListView(ThreadScopedView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        parameters=[
            EventListQuery,
            OpenApiParameter("Last-Event-ID", str, OpenApiParameter.HEADER, required=False),
        ],
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="`{events, next_after, has_more}`; with `Accept: "
                "text/event-stream`, a stream of the same envelopes",
            ),
            204: OpenApiResponse(description="terminated thread, nothing after `after`"),
        },
        operation_id="thread_events_list",
    )
    def get(self, request: Request, thread_id: str) -> HttpResponseBase:
        query = EventListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        thread = self.thread()
        after = _after(request, query)
        if request.accepted_renderer.media_type == EVENT_STREAM:
            return _event_stream(request, thread, after)
        limit = int(query.validated_data["limit"])
        envelopes = event_envelopes(thread=thread, after=after, limit=limit + 1)
        page = envelopes[:limit]
        return Response(
            {
                "events": page,
                "next_after": page[-1]["sequence"] if page else after,
                "has_more": len(envelopes) > limit,
            }
        )


def _event_stream(request: Request, thread: Thread, after: int) -> HttpResponseBase:
    if thread.terminated_at is not None and not event_envelopes(
        thread=thread, after=after, limit=1
    ):
        return HttpResponse(status=204)
    return sse_response(request, EventCursor(thread=thread, after=after, reasoning=_opted(request)))


def _opted(request: Request) -> bool:
    """``?reasoning=1``: the caller also wants ``reasoning.delta`` events."""
    return request.query_params.get("reasoning", "") in ("1", "true", "yes")


class StreamScope:
    """What one stream sends: every event (a thread's), or a filter with an end (a turn's).
    ``ended`` is checked once the replay is done (a scope that already ended sends no live
    events)."""

    def keep(self, delivery: Delivery) -> bool:
        return True

    def last(self, delivery: Delivery) -> bool:
        """Whether the stream ends after ``delivery``."""
        return delivery.type == EventType.THREAD_TERMINATED

    ended = False


def sse_response(
    request: Request, cursor: EventCursor, scope: StreamScope | None = None
) -> StreamingHttpResponse:
    """``cursor``'s events as Server-Sent Events: replayed then followed live under ASGI,
    replayed only under WSGI."""
    scope = scope or StreamScope()
    principal = request_principal(request)
    credentials = _Credentials(credential_groups(principal), credentials_expire_at(principal))
    content = (
        _follow(cursor, scope, credentials)
        if isinstance(request._request, ASGIRequest)
        else _replay(cursor, scope)
    )
    response = StreamingHttpResponse(content, content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _replay(cursor: EventCursor, scope: StreamScope) -> Iterator[bytes]:
    """WSGI: the stored events after the cursor, then the end of the stream."""
    for delivery in cursor.replay_now():
        if scope.keep(delivery):
            yield _frame(delivery)
            if scope.last(delivery):
                return


@dataclass(frozen=True)
class _Credentials:
    """What a stream's credentials are: the groups that hear of their loss, and the key's
    expiry (the stream ends with a ``revoked`` event at either, as sockets close 4401)."""

    groups: list[str]
    expires_at: dt.datetime | None

    def seconds_left(self) -> float | None:
        if self.expires_at is None:
            return None
        return (self.expires_at - now()).total_seconds()


REVOKED_FRAME = (
    b'event: revoked\ndata: {"error": {"code": "unauthenticated", "message": "the '
    b'credentials of this stream were revoked or expired"}}\n\n'
)


async def _follow(
    cursor: EventCursor, scope: StreamScope, credentials: _Credentials
) -> AsyncIterator[bytes]:
    """ASGI: subscribe, replay, then relay live events (the cursor de-duplicates the seam)
    and what the cursor's idle rechecks find, until the scope ends or the credentials go
    away. Everything runs on this generator's task, so the cursor is never read twice at
    once."""
    thread = cursor.thread
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    groups = [thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk), *credentials.groups]
    for group in groups:
        await layer.group_add(group, channel)
    receiving: asyncio.Task[dict[str, Any]] | None = None
    try:
        yield b"retry: 2000\n\n"
        async for delivery in cursor.replay():
            if scope.keep(delivery):
                yield _frame(delivery)
                if scope.last(delivery):
                    return
        if thread.terminated_at is not None or scope.ended:
            return
        keepalive_at = time.monotonic() + KEEPALIVE_S
        while True:
            left = credentials.seconds_left()
            if left is not None and left <= 0:
                yield REVOKED_FRAME
                return
            if time.monotonic() >= keepalive_at:
                yield b": keepalive\n\n"
                keepalive_at = time.monotonic() + KEEPALIVE_S
            if receiving is None:
                receiving = asyncio.ensure_future(layer.receive(channel))
            wait = min(keepalive_at - time.monotonic(), cursor.recheck_in())
            wait = max(0.0, wait if left is None else min(wait, left))
            done, _ = await asyncio.wait({receiving}, timeout=wait)
            if done:
                message, receiving = receiving.result(), None
                if message.get("type") == REVOKED:
                    yield REVOKED_FRAME
                    return
                deliveries = [d for one in unbatched(message) for d in await cursor.admit(one)]
            elif cursor.recheck_in() <= 0:
                deliveries = await cursor.recheck()
            else:
                continue
            frames, ended = _framed(deliveries, scope)
            for frame in frames:
                yield frame
            if ended:
                return
            if frames:
                keepalive_at = time.monotonic() + KEEPALIVE_S
    finally:
        if receiving is not None:
            receiving.cancel()
        for group in groups:
            await layer.group_discard(group, channel)


def _framed(deliveries: Sequence[Delivery], scope: StreamScope) -> tuple[list[bytes], bool]:
    """The frames ``scope`` keeps of ``deliveries``, and whether the stream ends with them."""
    frames: list[bytes] = []
    for delivery in deliveries:
        if scope.keep(delivery):
            frames.append(_frame(delivery))
            if scope.last(delivery):
                return frames, True
    return frames, False


urlpatterns = [
    path("events", EventListView.as_view(), name="thread-events"),
]
