"""``/api/v1/threads/{id}/events``: the thread's event log, paged as JSON or followed as
Server-Sent Events (``Accept: text/event-stream``).

A JSON page is the list shape with the log's own cursor, the event ``sequence``:
``?after=N&limit=L`` answers the events with ``sequence > N``, oldest first, ``next`` the
same URL with ``after`` at the page's last sequence (null on the last page), ``previous``
the page before (null at ``after=0``; sequences are gap-free, so it is ``after=N-L``). A
follower resumes after the last ``sequence`` it received (its ``after`` when the page was
empty): ``next`` stays null on the last page, as in every list.

SSE frames are ``id: <sequence>`` (persisted events only), ``event: <type>`` and
``data: <envelope JSON>``. ``Last-Event-ID`` (sent by EventSource on reconnect) overrides
``?after=``. Under ASGI the stream replays the log and then follows the thread live, with a
comment line after ``KEEPALIVE_S`` quiet seconds and a read of the log when nothing arrived
for a while (``threads.streams.IDLE_RECHECK_S``: an event whose live message was dropped
still arrives, even the thread's last); under WSGI it replays the log and ends. A
terminated thread's stream ends after its events; a request for a terminated thread with
nothing newer is answered ``204`` (EventSource stops reconnecting).

An ``after`` (or ``Last-Event-ID``) below the part of the log the retention policy kept
(``threads.services.events.event_pruned_through``) is answered ``410 events_pruned`` as
JSON; a stream sends an ``event: pruned`` frame with that error instead (its ``id`` the
highest pruned sequence, so a reconnect resumes past it) and carries on from the oldest
kept event. Without ``after`` a reader starts at the oldest kept event, told nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param, replace_query_param

from common.drf import StreamRenderer
from common.errors import DomainError, ValidationFailed
from common.pagination import LIMIT, MAX_LIMIT, MAX_OFFSET, page_limit, page_response
from common.schema import error_response, page_of
from tenancy.credentials import credential_groups, credentials_expire_at
from tenancy.viewsets import request_principal
from threads.api.base import ThreadScopedView
from threads.events import EventType
from threads.models import Thread
from threads.services.events import (
    event_envelopes,
    event_pruned_through,
    event_resume_point,
    events_pruned,
)
from threads.streams import CredentialsGone, Delivery, EventCursor, thread_subscribed

EVENT_STREAM = "text/event-stream"
KEEPALIVE_S = 15.0


class EventStreamRenderer(StreamRenderer):
    """Lets ``Accept: text/event-stream`` through content negotiation; errors render as JSON."""

    media_type = EVENT_STREAM
    format = "sse"


AFTER = "after"


class EventSerializer(serializers.Serializer[Any]):
    """One event of a thread: the envelope every event travels in, on the WebSocket, in
    Server-Sent Events and in the event log. `timestamp` is microseconds since the Unix
    epoch; the fields that say where the event belongs are null when they do not apply."""

    type = serializers.CharField(
        help_text="the event class: `message.created`, `turn.completed`, …"
    )
    event_id = serializers.CharField(help_text="unique")
    sequence = serializers.IntegerField(
        allow_null=True,
        help_text="the event's place in the thread's log, gap-free from 1; null for an event"
        " that is not stored (`model.delta`, `reasoning.delta`), which only streams carry",
    )
    timestamp = serializers.IntegerField(help_text="when it was produced")
    schema_version = serializers.IntegerField(help_text="of the event vocabulary")
    runtime_id = serializers.CharField(help_text="the runtime that produced it")
    tenant_id = serializers.CharField()
    session_id = serializers.CharField(help_text="the root thread of the subagent tree")
    thread_id = serializers.CharField()
    flow_id = serializers.CharField(
        allow_null=True, help_text="the execution attempt of a turn that produced it"
    )
    turn_id = serializers.CharField(allow_null=True)
    step_id = serializers.CharField(allow_null=True)
    tool_call_id = serializers.CharField(allow_null=True)
    subagent_id = serializers.CharField(allow_null=True)
    action_id = serializers.CharField(allow_null=True, help_text="on an action's events")
    trace_id = serializers.CharField(
        allow_null=True,
        help_text="the OpenTelemetry trace (W3C, 32 hex digits) the event was produced in;"
        " null when it was produced outside a trace (tracing off)",
    )
    span_id = serializers.CharField(
        allow_null=True, help_text="the span (16 hex digits) active where it was produced"
    )
    payload = serializers.DictField(help_text="what happened; its fields depend on `type`")
    refs = serializers.DictField(
        allow_null=True, help_text="stable references to large or external facts"
    )


def _after(request: Request) -> int | None:
    """Where the page starts: ``Last-Event-ID`` (an EventSource reconnecting), else
    ``?after=``, else None (from the oldest kept event); a 400 naming the one that is not a
    sequence."""
    field, raw = AFTER, request.query_params.get(AFTER, "")
    if "Last-Event-ID" in request.headers:
        field, raw = "Last-Event-ID", request.headers["Last-Event-ID"].strip()
    if raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_OFFSET:
        raise ValidationFailed(f"must be an event sequence, 0 to {MAX_OFFSET}", field=field)
    return int(raw)


def _frame(delivery: Delivery) -> bytes:
    head = f"id: {delivery.sequence}\n" if delivery.sequence is not None else ""
    return f"{head}event: {delivery.type}\ndata: {delivery.text}\n\n".encode()


def _pruned_frame(error: DomainError, pruned_through: int) -> bytes:
    """The stream's answer to a resume into the pruned part of the log: the error, with the
    highest pruned sequence as its ``id`` (an EventSource reconnecting resumes past it)."""
    data = json.dumps({"error": error.as_dict()})
    return f"id: {pruned_through}\nevent: pruned\ndata: {data}\n\n".encode()


# One 200 of two media types (the schema keeps one description for both): a JSON page, or
# Server-Sent Events, frames of `id` (the event's sequence; none for an event that is not
# stored), `event` (its type) and `data` (its envelope as JSON).
SSE_FRAMES = OpenApiResponse({"type": "string"})
EVENT_PAGE = OpenApiResponse(
    page_of(EventSerializer),
    description="A page of the event log; with `Accept: text/event-stream`, Server-Sent"
    " Events (`id: <sequence>`, `event: <type>`, `data: <the event as JSON>`)",
)


class EventListView(ThreadScopedView):
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        summary="List a thread's events, or follow them as Server-Sent Events",
        description="A page of the thread's event log, oldest first, after the sequence"
        " `after`. `next` is this URL with `after` at the page's last sequence, null on the"
        " last page: a follower polling the log resumes after the last `sequence` it"
        " received. With `Accept: text/event-stream` the answer is a stream instead (replayed"
        " from `after`, then live); `Last-Event-ID` overrides `after`, and a terminated"
        " thread with nothing newer answers 204. An `after` below the part of the log the"
        " retention policy kept answers 410 `events_pruned` (a stream sends an `event: pruned`"
        " frame instead and carries on from the oldest kept event).",
        parameters=[
            OpenApiParameter(
                AFTER, int,
                description="the last sequence already seen (default: from the oldest kept event)",
            ),
            OpenApiParameter(
                LIMIT, int, description=f"events per page, 1 to {MAX_LIMIT} (default 50)"
            ),
            OpenApiParameter(
                "reasoning", bool, description="streams only: also `reasoning.delta` events"
            ),
            OpenApiParameter(
                "Last-Event-ID", str, OpenApiParameter.HEADER, required=False,
                description="the last sequence seen (EventSource sends it on reconnect)",
            ),
        ],
        responses={
            (200, "application/json"): EVENT_PAGE,
            (200, "text/event-stream"): SSE_FRAMES,
            204: OpenApiResponse(description="A terminated thread with nothing after `after`"),
            410: error_response(
                410, "`events_pruned`: the events up to `details.pruned_through` were deleted"
                " by the retention policy; resume after it or read the thread's current state",
            ),
        },
        operation_id="thread_events_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> HttpResponseBase:
        thread = self.thread()
        after = _after(request)
        if request.accepted_renderer.media_type == EVENT_STREAM:
            return _event_stream(request, thread, after)
        limit = page_limit(request)
        start = after or 0
        envelopes = event_envelopes(thread=thread, after=start, limit=limit + 1)
        if after is not None and (not envelopes or envelopes[0]["sequence"] != after + 1):
            # Only a page that does not start right after ``after`` can have met pruning.
            pruned_through = event_pruned_through(thread=thread)
            if after < pruned_through:
                raise events_pruned(pruned_through=pruned_through)
        page = envelopes[:limit]
        return page_response(
            page,
            next=_after_link(request, page[-1]["sequence"]) if len(envelopes) > limit else None,
            previous=_after_link(request, max(start - limit, 0)) if start > 0 else None,
        )


def _after_link(request: Request, after: int) -> str:
    url = request.build_absolute_uri()
    if after == 0:
        return str(remove_query_param(url, AFTER))
    return str(replace_query_param(url, AFTER, after))


def _event_stream(request: Request, thread: Thread, after: int | None) -> HttpResponseBase:
    start, pruned = event_resume_point(thread=thread, after=after)
    if (
        pruned is None
        and thread.terminated_at is not None
        and not event_envelopes(thread=thread, after=start, limit=1)
    ):
        return HttpResponse(status=204)
    cursor = EventCursor(thread=thread, after=start, reasoning=_opted(request))
    first = [] if pruned is None else [_pruned_frame(pruned, start)]
    return sse_response(request, cursor, first=first)


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

    def frame(self, delivery: Delivery) -> bytes:
        """What the stream sends for a kept ``delivery`` (another encoding of the log, such
        as AG-UI's, sends its own frames, or none)."""
        return _frame(delivery)

    def replayed(self) -> None:
        """The replay is done: what follows arrives live (under ASGI only)."""

    ended = False


def sse_response(
    request: Request,
    cursor: EventCursor,
    scope: StreamScope | None = None,
    *,
    first: Sequence[bytes] = (),
) -> StreamingHttpResponse:
    """``cursor``'s events as Server-Sent Events, after the frames ``first``: replayed then
    followed live under ASGI, replayed only under WSGI."""
    scope = scope or StreamScope()
    principal = request_principal(request)
    credentials = _Credentials(credential_groups(principal), credentials_expire_at(principal))
    content = (
        _follow(cursor, scope, credentials, first)
        if isinstance(request._request, ASGIRequest)
        else _replay(cursor, scope, first)
    )
    response = StreamingHttpResponse(content, content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _replay(cursor: EventCursor, scope: StreamScope, first: Sequence[bytes]) -> Iterator[bytes]:
    """WSGI: the stored events after the cursor, then the end of the stream."""
    yield from first
    for delivery in cursor.replay_now():
        if scope.keep(delivery):
            yield scope.frame(delivery)
            if scope.last(delivery):
                return


@dataclass(frozen=True)
class _Credentials:
    """What a stream's credentials are: the groups that hear of their loss, and the key's
    expiry (the stream ends with a ``revoked`` event at either, as sockets close 4401)."""

    groups: list[str]
    expires_at: dt.datetime | None


REVOKED_FRAME = (
    b'event: revoked\ndata: {"error": {"code": "unauthenticated", "message": "the '
    b'credentials of this stream were revoked or expired"}}\n\n'
)


async def _follow(
    cursor: EventCursor, scope: StreamScope, credentials: _Credentials, first: Sequence[bytes]
) -> AsyncIterator[bytes]:
    """ASGI: the scope's frames of the thread's events (:func:`thread_subscribed`: replayed,
    then live), until the scope ends or the credentials go away, with a keepalive comment
    after ``KEEPALIVE_S`` without a frame."""
    thread = cursor.thread

    def replay_over() -> bool:
        scope.replayed()
        return thread.terminated_at is not None or scope.ended

    try:
        async with thread_subscribed(cursor, groups=credentials.groups) as subscription:
            yield b"retry: 2000\n\n"
            for frame in first:
                yield frame
            keepalive_at = time.monotonic() + KEEPALIVE_S
            events = subscription.events(
                expires_at=credentials.expires_at, tick_s=KEEPALIVE_S, replayed=replay_over
            )
            async with contextlib.aclosing(events):
                async for delivery in events:
                    if delivery is not None and scope.keep(delivery):
                        yield scope.frame(delivery)
                        if scope.last(delivery):
                            return
                        keepalive_at = time.monotonic() + KEEPALIVE_S
                    elif time.monotonic() >= keepalive_at:
                        yield b": keepalive\n\n"
                        keepalive_at = time.monotonic() + KEEPALIVE_S
    except CredentialsGone:
        yield REVOKED_FRAME


urlpatterns = [
    path("events", EventListView.as_view(), name="thread-events"),
]
