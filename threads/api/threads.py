"""``/api/v1/threads``: create, list (filters), detail (read model), update, delete."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from tenancy.viewsets import TenantScopedViewSet
from threads.events import session_id_of
from threads.models import EnvType, RunStatus, Thread
from threads.runtime.lifecycle import thread_open
from threads.services.env import EnvInput
from threads.services.threads import (
    thread_counts,
    thread_delete,
    thread_list,
    thread_update,
)
from threads.services.turns import read_status, thread_read_model


def thread_json(thread: Thread, *, counts: dict[str, int] | None = None) -> dict[str, Any]:
    """A thread; ``status`` is the read model's (see ``read_status``)."""
    body: dict[str, Any] = {
        "id": str(thread.id),
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
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "last_activity_at": thread.last_activity_at,
        "terminated_at": thread.terminated_at,
    }
    if counts is not None:
        body["counts"] = counts
    return body


class EnvValueInput(serializers.Serializer[Any]):
    value = serializers.CharField(allow_blank=True, trim_whitespace=False, write_only=True)
    type = serializers.ChoiceField(choices=EnvType.choices, required=False)


class EnvField(serializers.DictField):
    """``{"NAME": "value"}`` or ``{"NAME": {"value": "...", "type": "text"}}``; write-only."""

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


class ThreadCreateInput(serializers.Serializer[Any]):
    agent = serializers.CharField(max_length=64)
    user_id = serializers.CharField(max_length=200, required=False, default="")
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    metadata = serializers.DictField(required=False)
    env = EnvField(required=False, help_text="values are write-only")


class ThreadUpdateInput(serializers.Serializer[Any]):
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    metadata = serializers.DictField(required=False)


class ThreadListQuery(serializers.Serializer[Any]):
    agent = serializers.CharField(required=False)
    user_id = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    tag = serializers.CharField(required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)


class ThreadViewSet(TenantScopedViewSet):
    """Threads of the caller's tenant."""

    queryset = Thread.objects.all()
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    @extend_schema(
        parameters=[ThreadListQuery], responses=OpenApiTypes.OBJECT, operation_id="threads_list"
    )
    def list(self, request: Request) -> Response:
        query = ThreadListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = thread_list(tenant=self.principal.tenant, **query.validated_data)
        page = self.paginate_queryset(rows)
        assert page is not None
        return self.get_paginated_response([thread_json(row) for row in page])

    @extend_schema(request=ThreadCreateInput, responses={201: OpenApiTypes.OBJECT})
    def create(self, request: Request) -> Response:
        payload = ThreadCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        thread = thread_open(
            tenant=self.principal.tenant,
            agent_name=data["agent"],
            user_id=data.get("user_id", ""),
            tags=data.get("tags", []),
            metadata=data.get("metadata"),
            env=data.get("env"),
        )
        return Response(
            thread_json(thread, counts=thread_counts(thread=thread)), status=status.HTTP_201_CREATED
        )

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request: Request, pk: str) -> Response:
        """The thread and its read model (get_thread_read): ``status`` (refined where only
        a read can know: ``lost``, ``stale``, ``streaming``, ``waiting_resource``), the
        active turn, the queued turns in order, the last outcome, pending requests and
        recent incidents."""
        thread = self.get_object()
        body = thread_json(thread, counts=thread_counts(thread=thread))
        body.update(thread_read_model(thread=thread))
        return Response(body)

    @extend_schema(request=ThreadUpdateInput, responses=OpenApiTypes.OBJECT)
    def partial_update(self, request: Request, pk: str) -> Response:
        thread = self.get_object()
        payload = ThreadUpdateInput(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        thread = thread_update(thread=thread, **payload.validated_data)
        return Response(thread_json(thread, counts=thread_counts(thread=thread)))

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def destroy(self, request: Request, pk: str) -> Response:
        deleted = thread_delete(thread=self.get_object())
        return Response({"deleted_threads": deleted})
