"""``/api/v1/threads/{id}/logs``: the thread's model and tool call records."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import NotFound
from common.pagination import MAX_OFFSET
from threads.api.base import ThreadScopedView
from threads.services.logs import log_get, log_json, log_list


class LogListQuery(serializers.Serializer[Any]):
    limit = serializers.IntegerField(min_value=0, max_value=1000, default=100)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_OFFSET, default=0)
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    kind = serializers.CharField(required=False)


class LogListView(ThreadScopedView):
    @extend_schema(
        parameters=[LogListQuery], responses=OpenApiTypes.OBJECT, operation_id="thread_logs_list"
    )
    def get(self, request: Request, thread_id: str) -> Response:
        query = LogListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows, total = log_list(thread=self.thread(), **query.validated_data)
        offset = query.validated_data["offset"]
        return Response(
            {"logs": [log_json(row) for row in rows], "total": total,
             "has_more": offset + len(rows) < total}
        )  # fmt: skip


class LogDetailView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, thread_id: str, log_id: str) -> Response:
        log = log_get(thread=self.thread(), log_id=log_id)
        if log is None:
            raise NotFound(f"no log {log_id} in this thread")
        return Response(log_json(log))


urlpatterns = [
    path("logs", LogListView.as_view(), name="thread-logs"),
    path("logs/<uuid:log_id>", LogDetailView.as_view(), name="thread-log-detail"),
]
