"""``/api/v1/threads/{id}/logs``: the thread's model and tool call records.

The list is in the list shape, newest first (``?order=asc``: oldest first), keyset on the
creation time; ``?kind=`` keeps one kind.
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import NotFound
from common.pagination import PAGE_PARAMETERS, paginate
from common.schema import page_of
from threads.api.base import ThreadScopedView
from threads.models import Log
from threads.services.logs import log_get, log_rows


class LogSerializer(serializers.Serializer[Log]):
    """A record of something a thread did: a model call (`llm`), a tool call (`tool`), a
    flow (`flow`), a subagent exchange (`subagent`), a code run (`code`) or an incident
    (`incident`). `created_at` is microseconds since the Unix epoch."""

    id = serializers.UUIDField()
    kind = serializers.CharField(help_text="`llm`, `tool`, `flow`, `subagent`, `code`, …")
    message_id = serializers.UUIDField(
        allow_null=True, help_text="the message a model call wrote, or a tool call's result"
    )
    parent_id = serializers.UUIDField(allow_null=True, help_text="the log this one belongs to")
    # Collected into the declared fields by the metaclass: Serializer.data stays as it is.
    data = serializers.DictField(  # type: ignore[assignment]
        help_text="the record itself; its fields depend on `kind`"
    )
    created_at = serializers.IntegerField()


def log_output(log: Log) -> dict[str, Any]:
    return dict(LogSerializer().to_representation(log))


class LogListQuery(serializers.Serializer[Any]):
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    kind = serializers.CharField(required=False)


class LogListView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's logs",
        description="Newest first; `order=asc` for oldest first. `kind` keeps one kind.",
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("order", str, enum=["asc", "desc"], description="default `desc`"),
            OpenApiParameter("kind", str, description="only this kind: `llm`, `tool`, …"),
        ],
        responses=page_of(LogSerializer),
        operation_id="thread_logs_list",
    )
    def get(self, request: Request, thread_id: str) -> Response:
        query = LogListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = log_rows(thread=self.thread(), **query.validated_data)
        return paginate(request, rows, log_output, view=self)


class LogDetailView(ThreadScopedView):
    @extend_schema(
        summary="Read a thread's log", responses=LogSerializer, operation_id="thread_logs_retrieve"
    )
    def get(self, request: Request, thread_id: str, log_id: str) -> Response:
        log = log_get(thread=self.thread(), log_id=log_id)
        if log is None:
            raise NotFound(f"no log {log_id} in this thread")
        return Response(log_output(log))


urlpatterns = [
    path("logs", LogListView.as_view(), name="thread-logs"),
    path("logs/<uuid:log_id>", LogDetailView.as_view(), name="thread-log-detail"),
]
