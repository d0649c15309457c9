"""Recurring schedules: ``/api/v1/schedules`` (list, create), ``…/{id}`` (read, change,
delete), ``…/{id}/pause`` and ``…/{id}/resume`` (threads.runtime.schedules)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction, changed_fields
from common.errors import ValidationFailed
from common.inputs import StrictInput
from common.schema import US_SINCE_EPOCH, error_response
from tenancy.auditing import audit_by
from tenancy.principals import Principal
from tenancy.viewsets import TenantScopedViewSet
from threads.api.base import IDEMPOTENCY_KEY, idempotent
from threads.models import Schedule, ScheduleAction
from threads.runtime.schedules import (
    schedule_delete,
    schedule_json,
    schedule_pause,
    schedule_save,
)

TURN_ROLES = ["user", "assistant", "system"]


class ScheduleTurnSerializer(StrictInput):
    """The turn each run submits."""

    content = serializers.CharField(allow_blank=True)
    role = serializers.ChoiceField(choices=TURN_ROLES, default="user")
    metadata = serializers.DictField(required=False, help_text="the turn's message metadata")


class ScheduleEffectSerializer(StrictInput):
    """The registry effect each run fires on the thread."""

    name = serializers.CharField()
    args = serializers.JSONField(required=False, help_text="its arguments (any JSON, null too)")


class ScheduleInput(StrictInput):
    """A recurring schedule: `cron` (minute hour day month weekday) in `timezone`; one
    target (`thread_id`, or `agent`: each run opens a new thread of it); `action` `turn`
    (submit `input`) or `effect` (fire `effect` on the thread)."""

    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    thread_id = serializers.UUIDField(required=False, allow_null=True)
    agent = serializers.CharField(required=False, allow_null=True)
    cron = serializers.CharField(max_length=120, help_text="e.g. `0 9 * * 1-5`: 9:00 on weekdays")
    timezone = serializers.CharField(
        required=False, default="UTC", help_text="an IANA time zone, e.g. `Europe/Paris`"
    )
    action = serializers.ChoiceField(choices=ScheduleAction.choices, default=ScheduleAction.TURN)
    input = ScheduleTurnSerializer(required=False, allow_null=True, help_text="for `turn`")
    effect = ScheduleEffectSerializer(required=False, allow_null=True, help_text="for `effect`")
    paused = serializers.BooleanField(required=False, default=False)


class ScheduleRunSerializer(serializers.Serializer[Any]):
    """What a run started (`thread_id` with `turn_id` or `effect_id`), or the `error` that
    stopped it."""

    thread_id = serializers.UUIDField(required=False)
    turn_id = serializers.UUIDField(required=False)
    effect_id = serializers.UUIDField(required=False)
    error = serializers.CharField(required=False)


class ScheduleSerializer(serializers.Serializer[Any]):
    """A recurring schedule: `cron` in `timezone` submits a turn (to a thread, or to a new
    thread of an agent) or fires an effect on a thread."""

    id = serializers.UUIDField()
    name = serializers.CharField(allow_blank=True)
    thread_id = serializers.UUIDField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    cron = serializers.CharField()
    timezone = serializers.CharField()
    action = serializers.ChoiceField(choices=ScheduleAction.choices)
    input = ScheduleTurnSerializer(allow_null=True, help_text="null unless `action` is `turn`")
    effect = ScheduleEffectSerializer(allow_null=True, help_text="null unless `action` is `effect`")
    paused = serializers.BooleanField()
    next_run_at = serializers.IntegerField(
        allow_null=True, help_text=f"the next slot, {US_SINCE_EPOCH}; null while paused"
    )
    last_run_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    last_run = ScheduleRunSerializer(allow_null=True, help_text="null before the first run")
    runs = serializers.IntegerField()
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(help_text=f"{US_SINCE_EPOCH}; never before `created_at`")


KEY_REUSED = error_response(
    409, "The Idempotency-Key was used for another request (`idempotency_key_reused`)"
)
THREAD_FILTER = OpenApiParameter("thread_id", str, description="only this thread's schedules")


class ScheduleViewSet(TenantScopedViewSet):
    """The tenant's recurring schedules; members write them."""

    queryset = Schedule.objects.all()

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        thread_id = self.request.query_params.get("thread_id")
        if thread_id is not None and self.action == "list":
            queryset = queryset.filter(thread_id=thread_id)
        return queryset.order_by("created_at", "id")

    @extend_schema(
        operation_id="schedules_list", summary="List the tenant's schedules",
        description="Oldest first.", parameters=[THREAD_FILTER], responses=ScheduleSerializer,
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        thread_id = request.query_params.get("thread_id")
        if thread_id is not None:
            _uuid_check(thread_id)
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([schedule_json(row) for row in page])

    @extend_schema(
        operation_id="schedules_create", summary="Create a schedule", request=ScheduleInput,
        parameters=[IDEMPOTENCY_KEY], responses={201: ScheduleSerializer, 409: KEY_REUSED},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        """A schedule; with an ``Idempotency-Key``, a repeat answers the first schedule."""

        def create() -> tuple[int, dict[str, Any]]:
            with transaction.atomic():
                row = schedule_save(tenant=self.principal.tenant, data=request.data)
                body = schedule_json(row)
                self._audit(AuditAction.SCHEDULE_CREATED, row.pk, {}, body)
            return status.HTTP_201_CREATED, body

        return idempotent(request, self.principal, create)

    @extend_schema(
        operation_id="schedules_retrieve", summary="Get a schedule", responses=ScheduleSerializer
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(schedule_json(self.get_object()))

    @extend_schema(
        operation_id="schedules_partial_update", summary="Change a schedule",
        description="The fields sent replace the stored ones. A new `cron`, `timezone` or "
        "`paused` moves the next run.",
        request=ScheduleInput, responses=ScheduleSerializer,
    )  # fmt: skip
    def partial_update(self, request: Request, pk: str) -> Response:
        if not isinstance(request.data, Mapping):
            raise ValidationFailed("the body must be a JSON object")
        current = self.get_object()
        before = schedule_json(current)
        with transaction.atomic():
            row = schedule_save(tenant=self.principal.tenant, data=request.data, current=current)
            body = schedule_json(row)
            self._audit(AuditAction.SCHEDULE_UPDATED, row.pk, before, body)
        return Response(body)

    def _audit(
        self, action: AuditAction, pk: object, before: Mapping[str, Any],
        after: Mapping[str, Any],
    ) -> None:  # fmt: skip
        schedule_audit(self.principal, action, pk, before, after)

    @extend_schema(
        operation_id="schedules_destroy", summary="Delete a schedule", responses={204: None}
    )
    def destroy(self, request: Request, pk: str) -> Response:
        row = self.get_object()
        with transaction.atomic():
            self._audit(AuditAction.SCHEDULE_DELETED, row.pk, schedule_json(row), {})
            schedule_delete(row=row)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="schedules_pause", summary="Pause a schedule",
        description="No run until it is resumed.", request=None, responses=ScheduleSerializer,
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        with transaction.atomic():
            row = schedule_pause(row=self.get_object(), paused=True)
            audit_by(self.principal, AuditAction.SCHEDULE_PAUSED, "schedule", row.pk)
        return Response(schedule_json(row))

    @extend_schema(
        operation_id="schedules_resume", summary="Resume a schedule",
        description="It runs again from its next slot after now; the slots it missed are "
        "not made up.",
        request=None, responses=ScheduleSerializer,
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        with transaction.atomic():
            row = schedule_pause(row=self.get_object(), paused=False)
            audit_by(self.principal, AuditAction.SCHEDULE_RESUMED, "schedule", row.pk)
        return Response(schedule_json(row))


def schedule_audit(
    principal: Principal, action: AuditAction, pk: object, before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> None:  # fmt: skip
    """A schedule write (the API's and the console's), with the changes of its fields from
    ``before`` to ``after`` (its ``schedule_json``; empty for none), its timestamps left out;
    call it in the change's transaction."""
    changes = changed_fields(before, after)
    for moving in ("updated_at", "next_run_at"):
        changes.pop(moving, None)
    audit_by(principal, action, "schedule", pk, {"changes": changes})


def _uuid_check(value: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise ValidationFailed("thread_id must be a thread's id", field="thread_id") from None
