"""Streaming a turn: ``GET /api/v1/turns/{turn_id}/stream``, the turn's events as
Server-Sent Events, from its ``queue.changed`` ``added`` to the event that ends it.

The stream never holds a sync worker thread: under ASGI the view checks the caller and the
turn, then answers with a body produced on the event loop as the thread's channel group
delivers its events (:func:`threads.api.events.sse_response`).
"""

from __future__ import annotations

import json

from django.http import HttpResponseBase
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from threads.api.base import TurnScopedView
from threads.api.events import EventStreamRenderer, StreamScope, sse_response
from threads.events import QUEUE_CHANGES_ENDING_TURNS, TURN_END_EVENTS, EventType
from threads.models import TURN_TERMINAL, Turn
from threads.services.turns import turn_events_start
from threads.streams import Delivery, EventCursor

STREAM_DESCRIPTION = (
    "The turn's events as Server-Sent Events, from its `queue.changed` `added` to the event "
    "that ends it (`turn.completed`, `turn.failed`, `turn.cancelled`, or `queue.changed` "
    "`removed`/`cancelled`)."
)
REASONING = OpenApiParameter(
    "reasoning", bool, OpenApiParameter.QUERY, description="also `reasoning.delta` events"
)
# One Server-Sent Event: ``id`` (the event's sequence; none for a transient event),
# ``event`` (its type) and ``data`` (its envelope as JSON).
SSE_EVENT = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "event": {"type": "string"},
                   "data": {"type": "string"}},
    "required": ["event", "data"],
}  # fmt: skip


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
        cursor = EventCursor(thread=turn.thread, after=turn_events_start(turn), reasoning=reasoning)
        return sse_response(request, cursor, _TurnScope(turn))


turn_urlpatterns = [
    path("turns/<uuid:turn_id>/stream", TurnStreamView.as_view(), name="turn-stream"),
]
