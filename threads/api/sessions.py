"""``GET /api/v1/sessions/{session_id}``: a session's durable snapshot (agent-runtime-events
``get_session``): its tree of threads, each thread's last turns and event cursor."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from common.schema import error_response, microseconds
from threads.api.base import TenantObjectView
from threads.api.run_outputs import TurnSerializer
from threads.models import RunStatus
from threads.services.sessions import (
    MAX_SESSION_THREADS,
    RECENT_TURNS,
    SessionSnapshot,
    SessionThread,
    session_snapshot,
)
from threads.services.status import turn_json

SESSION_DESCRIPTION = (
    "A session is a tree of threads: its id is its root thread's id, and every subagent "
    "thread spawned below the root belongs to it. The answer lists the threads root first, "
    f"then by creation (at most {MAX_SESSION_THREADS}; `truncated` says when the session "
    f"holds more), each with its depth, its stored status, its last {RECENT_TURNS} turns "
    "(newest first, as the turns list shows them) and its `events_cursor`: the sequence of "
    "its last event, to follow its events from (`after`). A child thread's id is a 404 "
    "naming its session (`details.session_id`). The route takes no query parameters: any "
    "is a 400 naming it."
)


class SessionThreadOutput(serializers.Serializer[Any]):
    """One thread of a session."""

    id = serializers.UUIDField()
    parent_id = serializers.UUIDField(allow_null=True, help_text="null for the root")
    relationship = serializers.CharField(
        allow_null=True, help_text="the relationship it was spawned under; null for the root"
    )
    agent = serializers.CharField(help_text="the thread's current agent")
    name = serializers.CharField(
        allow_null=True, help_text="the label its spawn gave it (its `name:` tag); null: none"
    )
    status = serializers.ChoiceField(
        choices=RunStatus.choices,
        help_text="the stored status (the thread read refines it where only a read can know)",
    )
    depth = serializers.IntegerField(help_text="0 for the root, 1 for its children, …")
    created_at = microseconds("when it was created")
    updated_at = microseconds("when its row last changed")
    last_activity_at = microseconds("when it last did something")
    terminated_at = microseconds("when it was terminated", allow_null=True)
    recent_turns = TurnSerializer(
        many=True, help_text=f"its last {RECENT_TURNS} turns, newest first"
    )
    events_cursor = serializers.IntegerField(help_text="the sequence of its last event (0: none)")


class SessionOutput(serializers.Serializer[Any]):
    """A session's snapshot: its root, its threads and where each one's events stand."""

    session_id = serializers.UUIDField()
    root_thread_id = serializers.UUIDField(help_text="the session's id: its root thread")
    created_at = microseconds("when the root thread was created")
    updated_at = microseconds("the latest change or activity of any of its threads")
    thread_count = serializers.IntegerField(help_text="how many threads the session holds")
    truncated = serializers.BooleanField(
        help_text=f"true when it holds more than {MAX_SESSION_THREADS} and the rest are cut"
    )
    threads = SessionThreadOutput(many=True, help_text="root first, then by creation")
    events_cursor = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="each listed thread's id and the sequence of its last event (0: none)",
    )


def _thread_json(entry: SessionThread, snapshot: SessionSnapshot) -> dict[str, Any]:
    thread = entry.thread
    return {
        "id": str(thread.pk),
        "parent_id": str(thread.parent_id) if thread.parent_id else None,
        "relationship": thread.parent_relationship or None,
        "agent": thread.agent_name,
        "name": entry.name,
        "status": thread.status,
        "depth": entry.depth,
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "last_activity_at": thread.last_activity_at,
        "terminated_at": thread.terminated_at,
        "recent_turns": [
            turn_json(turn, message_ids=snapshot.message_ids[turn.pk])
            for turn in entry.recent_turns
        ],
        "events_cursor": entry.events_cursor,
    }


def session_json(snapshot: SessionSnapshot) -> dict[str, Any]:
    root = snapshot.root
    return {
        "session_id": str(root.pk),
        "root_thread_id": str(root.pk),
        "created_at": root.created_at,
        "updated_at": snapshot.updated_at,
        "thread_count": snapshot.thread_count,
        "truncated": snapshot.truncated,
        "threads": [_thread_json(entry, snapshot) for entry in snapshot.threads],
        "events_cursor": {str(entry.thread.pk): entry.events_cursor for entry in snapshot.threads},
    }


class SessionView(TenantObjectView):
    """Resolves ``session_id`` within the caller's tenant (any role reads)."""

    def resolve(self) -> object:
        return self.snapshot()

    def snapshot(self) -> SessionSnapshot:
        """The URL's session, read once per request."""
        cached: SessionSnapshot | None = getattr(self, "_snapshot", None)
        if cached is None:
            cached = session_snapshot(
                tenant=self.principal.tenant, session_id=self.kwargs["session_id"]
            )
            self._snapshot = cached
        return cached

    @extend_schema(
        summary="Read a session: its threads, their last turns and event cursors",
        description=SESSION_DESCRIPTION,
        responses={
            200: SessionOutput,
            404: error_response(
                404, "No such session for this tenant, or the id is a child thread's"
            ),
        },
        operation_id="session_get",
    )
    def get(self, request: Request, session_id: str) -> Response:
        for name in request.query_params:
            raise ValidationFailed(
                f"unknown query parameter {name[:100]!r} (this route takes none)", field=name
            )
        return Response(session_json(self.snapshot()))


urlpatterns = [
    path("sessions/<uuid:session_id>", SessionView.as_view(), name="session-detail"),
]
