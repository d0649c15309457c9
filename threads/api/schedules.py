"""Recurring schedules: ``/api/v1/schedules`` (list, create), ``…/{id}`` (read, change,
delete), ``…/{id}/pause`` and ``…/{id}/resume`` (threads.runtime.schedules)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from tenancy.viewsets import TenantScopedViewSet
from threads.models import Schedule
from threads.runtime.schedules import schedule_json, schedule_pause, schedule_save


class TurnInput(BaseModel):
    content: str
    role: Literal["user", "assistant", "system"] = "user"
    metadata: dict[str, Any] = Field(default_factory=dict)


class EffectCall(BaseModel):
    name: str
    args: Any = None


class ScheduleInput(BaseModel):
    """A recurring schedule: ``cron`` (minute hour day month weekday) in ``timezone``; one
    target (``thread_id``, or ``agent``: each run opens a new thread of it); ``action``
    ``turn`` (submit ``input``) or ``effect`` (fire ``effect`` on the thread)."""

    name: str = ""
    thread_id: str | None = None
    agent: str | None = None
    cron: str = Field(description="e.g. '0 9 * * 1-5': 9:00 on weekdays")
    timezone: str = Field("UTC", description="an IANA time zone, e.g. Europe/Paris")
    action: Literal["turn", "effect"] = "turn"
    input: TurnInput | None = None
    effect: EffectCall | None = None
    paused: bool = False


class ScheduleOutput(ScheduleInput):
    id: str
    next_run_at: int | None = Field(
        description="the next slot, µs since the epoch; null when paused"
    )
    last_run_at: int | None
    last_run: dict[str, Any] | None = Field(
        description="{thread_id, turn_id | effect_id} or {error}"
    )
    runs: int
    created_at: int
    updated_at: int


THREAD_FILTER = OpenApiParameter("thread_id", str, description="only this thread's schedules")


class ScheduleViewSet(TenantScopedViewSet):
    """The tenant's recurring schedules; members write them."""

    queryset = Schedule.objects.all()
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        thread_id = self.request.query_params.get("thread_id")
        if thread_id is not None and self.action == "list":
            queryset = queryset.filter(thread_id=thread_id)
        return queryset.order_by("created_at", "id")

    @extend_schema(
        operation_id="schedules_list", parameters=[THREAD_FILTER],
        responses=OpenApiTypes.OBJECT,
        description="Paginated: `{count, next, previous, results}`, oldest first",
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        thread_id = request.query_params.get("thread_id")
        if thread_id is not None:
            _uuid_check(thread_id)
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([schedule_json(row) for row in page])

    @extend_schema(request=ScheduleInput, responses={201: ScheduleOutput})
    def create(self, request: Request) -> Response:
        row = schedule_save(tenant=self.principal.tenant, data=request.data)
        return Response(schedule_json(row), status=status.HTTP_201_CREATED)

    @extend_schema(responses=ScheduleOutput)
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(schedule_json(self.get_object()))

    @extend_schema(request=ScheduleInput, responses=ScheduleOutput)
    def partial_update(self, request: Request, pk: str) -> Response:
        if not isinstance(request.data, Mapping):
            raise ValidationFailed("the body must be a JSON object")
        row = schedule_save(
            tenant=self.principal.tenant, data=request.data, current=self.get_object()
        )
        return Response(schedule_json(row))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        self.get_object().delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=ScheduleOutput)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        """No run until resumed."""
        return Response(schedule_json(schedule_pause(row=self.get_object(), paused=True)))

    @extend_schema(request=None, responses=ScheduleOutput)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        """Runs again from its next slot after now (missed slots are not made up)."""
        return Response(schedule_json(schedule_pause(row=self.get_object(), paused=False)))


def _uuid_check(value: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise ValidationFailed("thread_id must be a thread's id", field="thread_id") from None
