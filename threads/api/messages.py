"""``/api/v1/threads/{id}/messages``: list (by keyset on ``seq``, in either order), send, get,
update, delete, inject; and the run controls ``continue``, ``stop`` and ``terminate``.

``POST .../messages`` queues a message that runs the agent and answers 202 at once with the
queued item; ``POST .../messages/inject`` stores one without running anything.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction
from common.errors import NotFound
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate
from common.schema import error_response, microseconds, page_of
from tenancy.auditing import audit_by
from threads.api.base import (
    IDEMPOTENCY_KEY,
    WORK_REFUSED,
    ThreadScopedView,
    idempotent,
    turn_submitted_audit,
)
from threads.api.run_outputs import (
    MessageSerializer,
    QueuedMessageSerializer,
    TurnSerializer,
)
from threads.models import MessageRole, Turn, TurnKind, TurnStrategy
from threads.services.attachments import MAX_ATTACHMENTS, attachments_store
from threads.services.control import STOPPED_BY_USER, thread_stop, thread_terminate
from threads.services.inbox import (
    QUEUEABLE_ROLES,
    continue_queue,
    message_queue,
    queued_message_fields,
    terminated_error,
)
from threads.services.message_shapes import message_answer
from threads.services.messages import (
    UNSET,
    message_delete,
    message_get,
    message_inject,
    message_update,
    messages_of,
)
from threads.services.spending import work_admit
from threads.services.status import turn_json


class MessageListQuery(serializers.Serializer[Any]):
    order = serializers.ChoiceField(
        choices=["asc", "desc"], default="asc",
        help_text="`asc` (default): oldest first; `desc`: newest first",
    )  # fmt: skip
    include_silent = serializers.BooleanField(default=False, help_text="also the silent messages")
    depth = serializers.IntegerField(
        min_value=0, default=0,
        help_text="the deepest nesting listed: 0 (default) is the top level only",
    )  # fmt: skip


class EndUserField(serializers.CharField):
    """The end user a turn is for: a string of at most 200 characters (a number is not
    one). Left out, null or empty: the thread's ``user_id``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "the end user the turn is for (usage and budgets count "
                          "it); left out: the thread's `user_id`")  # fmt: skip
        super().__init__(required=False, allow_null=True, allow_blank=True, max_length=200,
                         trim_whitespace=False, **kwargs)  # fmt: skip

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class MessageInput(StrictInput):
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


class MessageSendInput(MessageInput):
    user = EndUserField()


class ContinueInput(StrictInput):
    side = serializers.ChoiceField(choices=["a", "b"], default="a")


def queued_json(turn: Turn) -> dict[str, Any]:
    """The 202 answer: ``status`` queued, ``queue_id`` and ``turn_id`` (the turn it created),
    the ``turn`` itself and, for a message, the message as it will be stored."""
    body = {"status": "queued", "queue_id": str(turn.pk), "kind": turn.kind,
            "turn_id": str(turn.pk), "turn": turn_json(turn)}  # fmt: skip
    return {**body, **queued_message_fields(turn)}


class QueuedTurnSerializer(serializers.Serializer[Any]):
    """Work accepted: the turn that will do it, queued behind the thread's other turns."""

    status = serializers.CharField(help_text="`queued`")
    queue_id = serializers.UUIDField(help_text="the turn's id")
    kind = serializers.ChoiceField(choices=TurnKind.choices)
    turn_id = serializers.UUIDField()
    turn = TurnSerializer()
    message_id = serializers.UUIDField(
        required=False, help_text="for a message: the id it will have"
    )
    message = QueuedMessageSerializer(
        required=False, help_text="for a message: the message as it will be stored"
    )


class StopResultSerializer(serializers.Serializer[Any]):
    """What a stop did."""

    stopped = serializers.BooleanField(help_text="false when nothing ran or waited")
    stopped_turn_id = serializers.UUIDField(allow_null=True, help_text="the turn it aborted")
    parked_turns = serializers.IntegerField(
        help_text="queued turns that now wait for the next user message"
    )
    message = serializers.CharField(
        allow_null=True, help_text="the system message it stored, when it aborted a turn"
    )


class TerminateResultSerializer(serializers.Serializer[Any]):
    """A terminated thread: it accepts no more work or writes; reads still answer."""

    status = serializers.CharField(help_text="`terminated`")
    terminated_at = microseconds("when it was terminated")
    changed = serializers.BooleanField(help_text="false when it was terminated already")


class MessageInjectInput(StrictInput):
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField(allow_null=True, allow_blank=True, trim_whitespace=False)
    silent = serializers.BooleanField(default=False)
    metadata = serializers.DictField(required=False)


class MessageUpdateInput(StrictInput):
    content = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False
    )
    metadata = serializers.DictField(required=False)


SEND_DESCRIPTION = (
    "Answers 202 at once with the queued turn that will run the agent. While a turn runs on "
    "the thread the message joins it (`joined_turn_id`): it is stored before that turn's next "
    "model call (runtime §2, §9), or, when the turn ends first, runs as a turn of its own. "
    "`user` (default) and "
    "`system` messages call on side A, `assistant` on side B. A user message lifts a stop. "
    "The body's `user` names the end user the turn is for (default: the thread's `user_id`). "
    "A repeat with the same `Idempotency-Key` answers the first answer and queues nothing."
)
STOP_DESCRIPTION = (
    "The running turn is aborted (its model call at once) and ends cancelled; its unanswered "
    "tool calls get `Execution stopped by user` results and a system message says so. Queued "
    "turns wait until the next user message. With nothing running or queued, nothing changes "
    "(`stopped: false`)."
)
TERMINATE_DESCRIPTION = (
    "Work in flight is aborted and queued work dropped; later sends and writes are refused "
    "with 409 `terminated`, reads still answer. Terminating again changes nothing."
)


class MessageListView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's messages",
        parameters=[MessageListQuery, *PAGE_PARAMETERS], responses=page_of(MessageSerializer),
        operation_id="thread_messages_list",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str) -> Response:
        """The thread's messages in ``order`` (oldest first by default), by keyset on
        ``seq``: paging forward meets each message once."""
        query = MessageListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = query.validated_data
        rows = messages_of(
            thread=self.thread(), include_silent=options["include_silent"],
            max_depth=options["depth"],
        ).order_by("seq" if options["order"] == "asc" else "-seq")  # fmt: skip
        return paginate(request, rows, message_answer, view=self)

    @extend_schema(
        summary="Send a message to a thread and run its agent",
        description=SEND_DESCRIPTION, request=MessageSendInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: QueuedTurnSerializer, 409: WORK_REFUSED},
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
            work_admit(thread=thread, user=data.get("user"))
            refs = attachments_store(thread=thread, items=data.get("attachments", []))
            with transaction.atomic():
                turn = message_queue(
                    thread=thread, role=data["role"], content=data.get("content"),
                    attachments=refs, silent=data["silent"], metadata=data.get("metadata"),
                    user=data.get("user"), strategy=TurnStrategy.JOIN,
                )  # fmt: skip
                turn_submitted_audit(self.principal, turn, data.get("user"))
            return status.HTTP_202_ACCEPTED, queued_json(turn)

        return idempotent(request, self.principal, send)


class MessageInjectView(ThreadScopedView):
    @extend_schema(
        summary="Store a message without running the agent", request=MessageInjectInput,
        responses={201: MessageSerializer, 409: error_response(409, "The thread is terminated")},
        operation_id="thread_messages_inject",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        payload = MessageInjectInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        message = message_inject(
            thread=self.thread(), role=data["role"], content=data["content"],
            silent=data["silent"], metadata=data.get("metadata"),
        )  # fmt: skip
        return Response(message_answer(message), status=status.HTTP_201_CREATED)


class MessageDetailView(ThreadScopedView):
    @extend_schema(
        summary="Get a message", responses=MessageSerializer,
        operation_id="thread_messages_retrieve",
    )  # fmt: skip
    def get(self, request: Request, thread_id: str, message_id: str) -> Response:
        message = message_get(thread=self.thread(), message_id=message_id)
        if message is None:
            raise NotFound(f"no message {message_id} in this thread")
        return Response(message_answer(message))

    @extend_schema(
        summary="Change a message's content or metadata", request=MessageUpdateInput,
        responses=MessageSerializer, operation_id="thread_messages_update",
    )  # fmt: skip
    def patch(self, request: Request, thread_id: str, message_id: str) -> Response:
        payload = MessageUpdateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        message = message_update(
            thread=self.thread(), message_id=message_id,
            content=data.get("content", UNSET),
            metadata=data.get("metadata", UNSET),
        )  # fmt: skip
        return Response(message_answer(message))

    @extend_schema(
        summary="Delete a message", responses={204: None}, operation_id="thread_messages_delete"
    )
    def delete(self, request: Request, thread_id: str, message_id: str) -> Response:
        if not message_delete(thread=self.thread(), message_id=message_id):
            raise NotFound(f"no message {message_id} in this thread")
        return Response(status=status.HTTP_204_NO_CONTENT)


class ContinueView(ThreadScopedView):
    @extend_schema(
        summary="Let a side of the agent take a turn without a new message",
        request=ContinueInput, parameters=[IDEMPOTENCY_KEY],
        responses={202: QueuedTurnSerializer, 409: WORK_REFUSED}, operation_id="thread_continue",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """Let ``side`` (default a) take a turn without a new message; 202 at once."""
        payload = ContinueInput(data=request.data)
        payload.is_valid(raise_exception=True)
        side = payload.validated_data["side"]

        def queue() -> tuple[int, dict[str, Any]]:
            work_admit(thread=self.thread())
            turn = continue_queue(thread=self.thread(), side=side)
            return status.HTTP_202_ACCEPTED, queued_json(turn)

        return idempotent(request, self.principal, queue)


class StopView(ThreadScopedView):
    @extend_schema(
        summary="Stop a thread's running turn", description=STOP_DESCRIPTION, request=None,
        responses=StopResultSerializer, operation_id="thread_stop",
    )  # fmt: skip
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
    @extend_schema(
        summary="Terminate a thread", description=TERMINATE_DESCRIPTION, request=None,
        responses=TerminateResultSerializer, operation_id="thread_terminate",
    )  # fmt: skip
    def post(self, request: Request, thread_id: str) -> Response:
        """Soft-terminate: in-flight work is aborted, queued work dropped, later sends are
        refused with 409. Idempotent."""
        thread = self.thread()
        with transaction.atomic():
            changed = thread_terminate(thread=thread)
            if changed:
                audit_by(self.principal, AuditAction.THREAD_TERMINATED, "thread", thread.pk)
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
