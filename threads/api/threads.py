"""``/api/v1/threads``: create, list (filters), detail (read model), update, delete."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from django.db import transaction
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction
from common.inputs import StrictInput, StrictMapField
from common.schema import error_responses, microseconds
from tenancy.auditing import audit_by
from tenancy.principals import Principal
from tenancy.viewsets import TenantScopedViewSet
from threads.api.base import IDEMPOTENCY_KEY, idempotent
from threads.api.messages import MessageInput
from threads.api.run_outputs import (
    ActionSerializer,
    TurnSerializer,
    VariableRequestSerializer,
)
from threads.api.turns import SubmittedTurnSerializer, message_submit, submitted_json
from threads.events import session_id_of
from threads.models import EnvType, RunStatus, Thread, Turn
from threads.models.threads import TITLE_MAX
from threads.runtime.lifecycle import thread_open_counted
from threads.services.env import EnvInput
from threads.services.threads import (
    thread_counts,
    thread_delete,
    thread_list,
    thread_titles,
    thread_update,
    threads_started,
)
from threads.services.turns import read_status, thread_read_model


def thread_json(
    thread: Thread, *, counts: dict[str, int] | None = None, title: str | None = None,
    started: bool | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A thread; ``status`` is the read model's (see ``read_status``). ``title`` and
    ``started`` are read for it unless given (a list reads them for its page at once), or
    known: a thread ``counts`` says holds no message has no title but its own."""
    if title is None and counts is not None and not counts.get("messages"):
        title = thread.title
    if title is None:
        title = thread_titles(threads=[thread]).get(thread.pk)
    if started is None:
        started = bool(threads_started(threads=[thread]))
    body: dict[str, Any] = {
        "id": str(thread.id),
        "title": title or None,
        "title_set": bool(thread.title),
        "agent": thread.agent_name,
        "origin_agent": thread.origin_agent_name,
        "user_id": thread.user_id or None,
        "parent_id": str(thread.parent_id) if thread.parent_id else None,
        "session_id": session_id_of(thread),
        "relationship": thread.parent_relationship or None,
        "arguments": thread.arguments,
        "tags": thread.tags,
        "metadata": thread.metadata,
        "status": read_status(thread),
        "started": started,
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "last_activity_at": thread.last_activity_at,
        "terminated_at": thread.terminated_at,
    }
    if counts is not None:
        body["counts"] = counts
    return body


class EnvValueInput(StrictInput):
    value = serializers.CharField(allow_blank=True, trim_whitespace=False, write_only=True)
    type = serializers.ChoiceField(choices=EnvType.choices, required=False)


class EnvField(StrictMapField):
    """``{"NAME": "value"}`` or ``{"NAME": {"value": "...", "type": "text"}}``; write-only."""

    value_input = EnvValueInput()

    def to_internal_value(self, data: Any) -> dict[str, EnvInput]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object of NAME: value")
        parsed = {}
        for name, item in data.items():
            if isinstance(item, str):
                parsed[name] = EnvInput(value=item)
                continue
            nested = EnvValueInput(data=item)
            if not nested.is_valid():
                raise serializers.ValidationError({name: nested.errors})
            parsed[name] = EnvInput(
                nested.validated_data["value"], nested.validated_data.get("type")
            )
        return parsed


class TitleField(serializers.CharField):
    """A thread's title: a string (a number or a list is refused, not converted), at most
    ``TITLE_MAX`` characters; blank leaves it to be derived."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=TITLE_MAX, required=False, allow_blank=True, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        return super().to_internal_value(data)


class ThreadCreateInput(StrictInput):
    agent = serializers.CharField(max_length=64)
    user_id = serializers.CharField(max_length=200, required=False, default="")
    title = TitleField(
        help_text="shown in lists; left out, the first line of its first user message"
    )
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    metadata = serializers.DictField(required=False)
    env = EnvField(required=False, help_text="values are write-only")
    input = MessageInput(
        required=False,
        help_text="the first turn's message, as `POST .../turns` takes it: with it the thread "
        "is created and the turn queued together, or neither",
    )


class ThreadUpdateInput(StrictInput):
    title = TitleField(help_text="blank: the title is derived from the first user message again")
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    metadata = serializers.DictField(required=False)


class ThreadListQuery(serializers.Serializer[Any]):
    agent = serializers.CharField(required=False)
    user_id = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    tag = serializers.CharField(required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)


class ThreadCountsSerializer(serializers.Serializer[Any]):
    """How many of each the thread holds."""

    messages = serializers.IntegerField()
    logs = serializers.IntegerField()
    files = serializers.IntegerField()
    children = serializers.IntegerField(help_text="its subagents' threads")


class ThreadSerializer(serializers.Serializer[Any]):
    """A thread: one durable conversation of an agent."""

    id = serializers.UUIDField()
    title = serializers.CharField(
        allow_null=True,
        help_text="the title it was given, else the first line of its first user message "
        "(null when it has neither)",
    )
    title_set = serializers.BooleanField(
        help_text="whether `title` was given (false: derived from the first user message)"
    )
    agent = serializers.CharField(help_text="the agent it runs now (a handoff changes it)")
    origin_agent = serializers.CharField(help_text="the agent it was created with")
    user_id = serializers.CharField(allow_null=True)
    parent_id = serializers.UUIDField(allow_null=True, help_text="a subagent's parent thread")
    session_id = serializers.UUIDField(
        help_text="the root of its subagent tree (its own id when top-level)"
    )
    relationship = serializers.CharField(
        allow_null=True, help_text="a subagent's relationship to its parent"
    )
    arguments = serializers.JSONField(help_text="a subagent's initial arguments, else null")
    tags = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    started = serializers.BooleanField(
        help_text="whether a turn was ever submitted to it; false for a thread that never ran, "
        "whose `status` is then the initial `completed` (not an outcome)"
    )
    created_at = microseconds("when it was created")
    updated_at = microseconds("when it last changed")
    last_activity_at = microseconds("when it last stored a message")
    terminated_at = microseconds("when it was terminated", allow_null=True)
    counts = ThreadCountsSerializer(
        required=False, help_text="in the answer about one thread, not in lists"
    )


class TurnOutcomeSerializer(serializers.Serializer[Any]):
    """How the thread's last turn to end ended."""

    turn_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    outcome = serializers.CharField(allow_null=True, help_text="why it ended")
    error = serializers.CharField(allow_null=True)
    ended_at = microseconds("when it ended")


class IncidentSerializer(serializers.Serializer[Any]):
    """Something that went wrong around the thread's work and was recovered from."""

    at = microseconds("when it happened")
    incident = serializers.CharField(
        help_text="what happened: `takeover` (a worker died) or `outage` (an outage cut the "
        "turn short)"
    )
    turn_id = serializers.UUIDField(required=False)
    fence = serializers.IntegerField(required=False)
    detail = serializers.CharField(required=False)


PENDING_REQUEST = PolymorphicProxySerializer(
    component_name="PendingRequest",
    serializers={"approval": ActionSerializer, "input": ActionSerializer,
                 "variables": VariableRequestSerializer},
    resource_type_field_name="kind",
    many=True,
    help_text="what waits for a person, oldest first: actions, and variable requests of "
    "deferred subagents",
)  # fmt: skip


class ThreadReadSerializer(ThreadSerializer):
    """A thread and its read model: the status refined where only a read can know, its turns
    at work and in the queue, how the last one ended, and what waits for a person."""

    counts = ThreadCountsSerializer()
    status = serializers.ChoiceField(
        choices=RunStatus.choices,
        help_text="the stored status, refined where only a read can know: `lost`, `stale`, "
        "`streaming`, `waiting_resource`",
    )
    stored_status = serializers.ChoiceField(choices=RunStatus.choices)
    stop_requested = serializers.BooleanField(
        help_text="a stop parks the queued turns until the next user message"
    )
    active_turn = TurnSerializer(
        allow_null=True,
        help_text="the running turn, or the one resting on a person's decision",
    )
    queued_turns = TurnSerializer(many=True, help_text="in the order they will run")
    last_outcome = TurnOutcomeSerializer(allow_null=True)
    pending_requests = PENDING_REQUEST
    incidents = IncidentSerializer(many=True, help_text="the newest few, newest first")
    routing_limit_summary = serializers.DictField(
        help_text="where the budgets of its work stand (`cost_state` within|near|exhausted; "
        "`budgets`: limit, spent, reserved, remaining of each), what its active turn waits "
        "for (`waiting`), and the tenant's quotas (docs/usage.md)"
    )


class ThreadCreateAnswerSerializer(ThreadSerializer):
    """A new thread; created with an `input`, the turn it queued."""

    turn = SubmittedTurnSerializer(
        required=False, help_text="with an `input`: the first turn, as `POST .../turns` answers it"
    )


CREATE_DESCRIPTION = (
    "With `input`, the thread is created and its first turn queued in one transaction (the "
    "answer adds `turn`, as `POST .../turns` answers it); a refused input creates no thread. "
    "A repeat with the same `Idempotency-Key` answers the first thread and creates nothing."
)


class ThreadDeletedSerializer(serializers.Serializer[Any]):
    """What deleting a thread removed."""

    deleted_threads = serializers.IntegerField(help_text="the thread and its subagents' threads")


LIST_DESCRIPTION = (
    "Newest first. `status` filters by the status the read model shows: one only a read can "
    "know (`lost`, `stale`, `streaming`, `waiting_resource`), or `running`, `retrying` or "
    "`queued`, is looked for among the newest 1000 threads stored in a status it can come from."
)


def thread_opener(
    principal: Principal, data: dict[str, Any], created: list[Turn]
) -> Callable[[], tuple[int, dict[str, Any]]]:
    """Creates the thread of ``POST /threads`` (and ``/threads/wait``) and queues the
    ``input``'s turn (appended to ``created``) through the services ``POST .../turns`` calls,
    so every check of both applies, in one transaction: a refused input leaves no thread."""
    given = data.get("input")

    def create() -> tuple[int, dict[str, Any]]:
        with transaction.atomic() if given is not None else contextlib.nullcontext():
            thread, counts = thread_open_counted(
                tenant=principal.tenant,
                agent_name=data["agent"],
                user_id=data.get("user_id", ""),
                title=data.get("title", ""),
                tags=data.get("tags", []),
                metadata=data.get("metadata"),
                env=data.get("env"),
            )
            if given is None:
                return status.HTTP_201_CREATED, thread_json(thread, counts=counts)
            turn = message_submit(principal, thread, given, prefix="input.")
            thread.refresh_from_db()
            body = thread_json(thread, counts=counts, started=True)
        created.append(turn)
        return status.HTTP_201_CREATED, {**body, "turn": submitted_json(turn)}

    return create


class ThreadViewSet(TenantScopedViewSet):
    """Threads of the caller's tenant."""

    queryset = Thread.objects.all()

    @extend_schema(
        summary="List threads", description=LIST_DESCRIPTION, parameters=[ThreadListQuery],
        responses=ThreadSerializer, operation_id="threads_list",
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        query = ThreadListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = thread_list(tenant=self.principal.tenant, **query.validated_data)
        page = self.paginate_queryset(rows)
        assert page is not None
        titles, started = thread_titles(threads=page), threads_started(threads=page)
        return self.get_paginated_response(
            [
                thread_json(row, title=titles.get(row.pk, ""), started=row.pk in started)
                for row in page
            ]
        )

    @extend_schema(
        summary="Create a thread", description=CREATE_DESCRIPTION, request=ThreadCreateInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: ThreadCreateAnswerSerializer, **error_responses(409)},
        operation_id="threads_create",
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        """A thread of ``agent``; its ``after_thread_created`` hooks run and its immediate
        subagents start. With ``input``, its first turn is queued in the same transaction.
        With an ``Idempotency-Key``, a repeat answers the first thread."""
        payload = ThreadCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        return idempotent(
            request, self.principal, thread_opener(self.principal, payload.validated_data, [])
        )

    @extend_schema(
        summary="Get a thread and its read model", responses=ThreadReadSerializer,
        operation_id="threads_retrieve",
    )  # fmt: skip
    def retrieve(self, request: Request, pk: str) -> Response:
        """The thread and its read model (get_thread_read): ``status`` (refined where only
        a read can know: ``lost``, ``stale``, ``streaming``, ``waiting_resource``), the
        active turn, the queued turns in order, the last outcome, pending requests and
        recent incidents."""
        thread = self.get_object()
        body = thread_json(thread, counts=thread_counts(thread=thread))
        body.update(thread_read_model(thread=thread))
        return Response(body)

    @extend_schema(
        summary="Change a thread's title, tags or metadata", request=ThreadUpdateInput,
        responses=ThreadSerializer, operation_id="threads_partial_update",
    )  # fmt: skip
    def partial_update(self, request: Request, pk: str) -> Response:
        thread = self.get_object()
        payload = ThreadUpdateInput(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        thread = thread_update(thread=thread, **payload.validated_data)
        return Response(thread_json(thread, counts=thread_counts(thread=thread)))

    @extend_schema(
        summary="Delete a thread, its subagents' threads and everything they hold",
        responses={200: ThreadDeletedSerializer}, operation_id="threads_destroy",
    )  # fmt: skip
    def destroy(self, request: Request, pk: str) -> Response:
        thread = self.get_object()
        with transaction.atomic():
            deleted = thread_delete(thread=thread)
            audit_by(
                self.principal, AuditAction.THREAD_DELETED, "thread", pk,
                {"agent": thread.agent_name, "deleted_threads": deleted},
            )  # fmt: skip
        return Response({"deleted_threads": deleted})
