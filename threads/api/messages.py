"""``/api/v1/threads/{id}/messages``: list (spec query options), send, get, update, delete,
inject; and the run controls ``continue``, ``stop`` and ``terminate``.

``POST .../messages`` queues a message that runs the agent and answers 202 at once with the
queued item; ``POST .../messages/inject`` stores one without running anything.
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
from common.pagination import MAX_OFFSET
from common.schema import error_response
from threads.api.base import IDEMPOTENCY_KEY, WORK_REFUSED, ThreadScopedView, idempotent
from threads.models import MessageRole, Turn
from threads.services.attachments import MAX_ATTACHMENTS, attachments_store
from threads.services.control import STOPPED_BY_USER, thread_stop, thread_terminate
from threads.services.inbox import (
    QUEUEABLE_ROLES,
    continue_queue,
    message_queue,
    queued_message_fields,
    terminated_error,
)
from threads.services.messages import (
    UNSET,
    message_delete,
    message_get,
    message_inject,
    message_json,
    message_list,
    message_update,
)
from threads.services.status import turn_json


class MessageListQuery(serializers.Serializer[Any]):
    limit = serializers.IntegerField(min_value=0, max_value=1000, default=100)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_OFFSET, default=0)
    order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    include_silent = serializers.BooleanField(default=False)
    depth = serializers.IntegerField(min_value=0, required=False)


class MessageSendInput(serializers.Serializer[Any]):
    content = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False
    )
    role = serializers.ChoiceField(choices=QUEUEABLE_ROLES, default="user")
    attachments = serializers.ListField(
        child=serializers.DictField(), required=False, max_length=MAX_ATTACHMENTS,
        help_text="[{name, mimeType, data (base64), width?, height?}]",
    )  # fmt: skip
    silent = serializers.BooleanField(default=False)
    metadata = serializers.DictField(required=False, help_text="the message's metadata")


class ContinueInput(serializers.Serializer[Any]):
    side = serializers.ChoiceField(choices=["a", "b"], default="a")


def queued_json(turn: Turn) -> dict[str, Any]:
    """The 202 answer: ``status`` queued, ``queue_id`` and ``turn_id`` (the turn it created),
    the ``turn`` itself and, for a message, the message as it will be stored."""
    body = {"status": "queued", "queue_id": str(turn.pk), "kind": turn.kind,
            "turn_id": str(turn.pk), "turn": turn_json(turn)}  # fmt: skip
    return {**body, **queued_message_fields(turn)}


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

    @extend_schema(
        request=MessageSendInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: OpenApiTypes.OBJECT, 409: WORK_REFUSED},
        operation_id="thread_messages_send",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """Queue a message and run the agent; answers 202 with the queued item at once.

        ``user`` (default) and ``system`` messages call on side A, ``assistant`` on side B.
        A user message lifts a stop. 409 ``terminated`` on a terminated thread."""
        payload = MessageSendInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        thread = self.thread()
        if thread.terminated_at is not None:
            raise terminated_error()

        def send() -> tuple[int, dict[str, Any]]:
            refs = attachments_store(thread=thread, items=data.get("attachments", []))
            turn = message_queue(
                thread=thread, role=data["role"], content=data.get("content"),
                attachments=refs, silent=data["silent"], metadata=data.get("metadata"),
            )  # fmt: skip
            return status.HTTP_202_ACCEPTED, queued_json(turn)

        return idempotent(request, self.principal, send)


class MessageInjectView(ThreadScopedView):
    @extend_schema(
        request=MessageInjectInput,
        responses={201: OpenApiTypes.OBJECT, 409: error_response(409, "The thread is terminated")},
    )
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


class ContinueView(ThreadScopedView):
    @extend_schema(
        request=ContinueInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: OpenApiTypes.OBJECT, 409: WORK_REFUSED},
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """Let ``side`` (default a) take a turn without a new message; 202 at once."""
        payload = ContinueInput(data=request.data)
        payload.is_valid(raise_exception=True)
        side = payload.validated_data["side"]

        def queue() -> tuple[int, dict[str, Any]]:
            turn = continue_queue(thread=self.thread(), side=side)
            return status.HTTP_202_ACCEPTED, queued_json(turn)

        return idempotent(request, self.principal, queue)


class StopView(ThreadScopedView):
    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, thread_id: str) -> Response:
        """Abort the running turn (its model call at once): it ends cancelled, its
        unanswered tool calls get ``Execution stopped by user`` results and a system message
        says so. Queued turns wait until the next user message. With nothing running or
        queued, nothing changes (``stopped: false``)."""
        thread = self.thread()
        result = thread_stop(thread=thread)
        stopped = result.stopped_turn
        return Response(
            {"stopped": stopped is not None or result.parked > 0,
             "stopped_turn_id": str(stopped.pk) if stopped is not None else None,
             "parked_turns": result.parked,
             "message": STOPPED_BY_USER if stopped is not None else None}
        )  # fmt: skip


class TerminateView(ThreadScopedView):
    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request, thread_id: str) -> Response:
        """Soft-terminate: in-flight work is aborted, queued work dropped, later sends are
        refused with 409. Idempotent."""
        changed = thread_terminate(thread=self.thread())
        thread = self.thread()
        thread.refresh_from_db(fields=["terminated_at"])
        return Response(
            {"status": "terminated", "terminated_at": thread.terminated_at, "changed": changed}
        )


urlpatterns = [
    path("continue", ContinueView.as_view(), name="thread-continue"),
    path("stop", StopView.as_view(), name="thread-stop"),
    path("terminate", TerminateView.as_view(), name="thread-terminate"),
    path("messages", MessageListView.as_view(), name="thread-messages"),
    path("messages/inject", MessageInjectView.as_view(), name="thread-message-inject"),
    path("messages/<uuid:message_id>", MessageDetailView.as_view(), name="thread-message-detail"),
]
