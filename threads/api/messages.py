"""``/api/v1/threads/{id}/messages``: list (spec query options), get, update, delete, inject.

Posting a message that *runs* the agent (``POST .../messages``, 202) comes with the engine;
``POST .../messages/inject`` stores one without running anything.
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import NotFound
from threads.api.base import ThreadScopedView
from threads.models import MessageRole
from threads.services.messages import (
    UNSET,
    message_delete,
    message_get,
    message_inject,
    message_json,
    message_list,
    message_update,
)


class MessageListQuery(serializers.Serializer[Any]):
    limit = serializers.IntegerField(min_value=0, max_value=1000, default=100)
    offset = serializers.IntegerField(min_value=0, default=0)
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    include_silent = serializers.BooleanField(default=False)
    depth = serializers.IntegerField(min_value=0, required=False)


class MessageInjectInput(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField(allow_null=True, allow_blank=True, trim_whitespace=False)
    silent = serializers.BooleanField(default=False)
    metadata = serializers.DictField(required=False)


class MessageUpdateInput(serializers.Serializer[Any]):
    content = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False
    )
    metadata = serializers.DictField(required=False)


class MessageListView(ThreadScopedView):
    @extend_schema(
        parameters=[MessageListQuery], responses=OpenApiTypes.OBJECT,
        operation_id="thread_messages_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """Newest ``limit`` messages (``order=desc`` truncates from the newest side; ``offset``
        skips from that side); the answer is always oldest first, as in the spec's HTTP API."""
        query = MessageListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = query.validated_data
        page = message_list(
            thread=self.thread(), limit=options["limit"], offset=options["offset"],
            order=options["order"], include_silent=options["include_silent"],
            max_depth=options.get("depth", 0),
        )  # fmt: skip
        rows = page.messages if options["order"] == "asc" else list(reversed(page.messages))
        return Response(
            {"messages": [message_json(m) for m in rows], "total": page.total,
             "has_more": page.has_more}
        )  # fmt: skip


class MessageInjectView(ThreadScopedView):
    @extend_schema(request=MessageInjectInput, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request, thread_id: str) -> Response:
        payload = MessageInjectInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        message = message_inject(
            thread=self.thread(), role=data["role"], content=data["content"],
            silent=data["silent"], metadata=data.get("metadata"),
        )  # fmt: skip
        return Response(message_json(message), status=status.HTTP_201_CREATED)


class MessageDetailView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, thread_id: str, message_id: str) -> Response:
        message = message_get(thread=self.thread(), message_id=message_id)
        if message is None:
            raise NotFound(f"no message {message_id} in this thread")
        return Response(message_json(message))

    @extend_schema(request=MessageUpdateInput, responses=OpenApiTypes.OBJECT)
    def patch(self, request: Request, thread_id: str, message_id: str) -> Response:
        payload = MessageUpdateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        message = message_update(
            thread=self.thread(), message_id=message_id,
            content=data.get("content", UNSET),
            metadata=data.get("metadata", UNSET),
        )  # fmt: skip
        return Response(message_json(message))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, thread_id: str, message_id: str) -> Response:
        if not message_delete(thread=self.thread(), message_id=message_id):
            raise NotFound(f"no message {message_id} in this thread")
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("messages", MessageListView.as_view(), name="thread-messages"),
    path("messages/inject", MessageInjectView.as_view(), name="thread-message-inject"),
    path("messages/<uuid:message_id>", MessageDetailView.as_view(), name="thread-message-detail"),
]
