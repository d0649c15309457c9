"""REST of the audit trail: the tenant's entries, newest first, for its admins."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from audit.models import ActorKind, AuditEntry
from common.audit import AuditAction
from common.schema import US_SINCE_EPOCH
from common.time import to_us
from tenancy.api import MomentInputField
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet

ACTIONS = [action.value for action in AuditAction]
EXACT_FILTERS = ("action", "actor_kind", "actor_id", "target_type", "target_id")

LIST_DESCRIPTION = (
    "Newest first. Every filter narrows: `action`, `actor_kind`, `actor_id`, `target_type`, "
    "`target_id` match exactly; `since` and `until` bound the time (an ISO-8601 datetime, "
    "without a zone UTC, or µs since the Unix epoch; `since` inclusive, `until` exclusive). "
    "Needs the admin role."
)


class MomentQueryField(MomentInputField):
    """A moment in a query string: digits are µs since the Unix epoch, else ISO-8601."""

    def to_internal_value(self, data: Any) -> dt.datetime:
        if isinstance(data, str) and data.isdigit():
            return super().to_internal_value(int(data))
        return super().to_internal_value(data)


class AuditQuery(serializers.Serializer[Any]):
    action = serializers.ChoiceField(choices=ACTIONS, required=False)
    actor_kind = serializers.ChoiceField(choices=ActorKind.choices, required=False)
    actor_id = serializers.CharField(required=False, max_length=64)
    target_type = serializers.CharField(required=False, max_length=40)
    target_id = serializers.CharField(required=False, max_length=200)
    since = MomentQueryField(required=False, help_text="entries at or after this moment")
    until = MomentQueryField(required=False, help_text="entries before this moment")


class AuditActorSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=ActorKind.choices)
    id = serializers.CharField(help_text="the API key's or the user's id; empty for the system")
    name = serializers.CharField(help_text="the key's name or the username, as it was then")


class AuditEntrySerializer(serializers.Serializer[Any]):
    """One audited action: who did what to which object, and the names and fields it
    changed (never a secret's value)."""

    id = serializers.UUIDField()
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    action = serializers.ChoiceField(choices=ACTIONS)
    actor = AuditActorSerializer()
    target_type = serializers.CharField()
    target_id = serializers.CharField()
    details = serializers.DictField(help_text="what changed: names, a definition's diff")


def audit_entry_json(row: AuditEntry) -> dict[str, Any]:
    return {
        "id": str(row.pk), "created_at": row.created_at, "action": row.action,
        "actor": {"kind": row.actor_kind, "id": row.actor_id, "name": row.actor_name},
        "target_type": row.target_type, "target_id": row.target_id, "details": row.details,
    }  # fmt: skip


def audit_filter(rows: QuerySet[AuditEntry], query: dict[str, Any]) -> QuerySet[AuditEntry]:
    exact = {name: query[name] for name in EXACT_FILTERS if name in query}
    rows = rows.filter(**exact)
    if "since" in query:
        rows = rows.filter(created_at__gte=to_us(query["since"]))
    if "until" in query:
        rows = rows.filter(created_at__lt=to_us(query["until"]))
    return rows


class AuditViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """The tenant's audit trail, read by its admins."""

    queryset = AuditEntry.objects.all()
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    ordering = ("-created_at", "-id")

    @extend_schema(
        operation_id="audit_list", summary="List the tenant's audit trail",
        description=LIST_DESCRIPTION, parameters=[AuditQuery], responses=AuditEntrySerializer,
    )  # fmt: skip
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = self.paginate_queryset(audit_filter(self.get_queryset(), query.validated_data))
        assert page is not None
        return self.get_paginated_response([audit_entry_json(row) for row in page])
