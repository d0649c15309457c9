"""Webhooks: ``/api/v1/webhooks`` (list, create), ``…/{id}`` (read, change, delete),
``…/{id}/rotate-secret``, ``…/{id}/deliveries`` (the delivery log) and
``…/{id}/deliveries/{delivery_id}/redeliver`` (threads.services.webhooks). Admins only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction, changed_fields
from common.converters import group
from common.errors import ValidationFailed
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS
from common.schema import US_SINCE_EPOCH, page_of
from tenancy.auditing import audit_by
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet
from threads.events.webhooks import WEBHOOK_EVENTS
from threads.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from threads.services.webhooks import (
    delivery_json,
    delivery_redeliver,
    endpoint_delete,
    endpoint_json,
    endpoint_save,
    secret_rotate,
)

EVENT_TYPES = sorted(str(kind) for kind in WEBHOOK_EVENTS)


class WebhookInput(StrictInput):
    """An HTTPS endpoint for the tenant's events of `event_types`."""

    url = serializers.URLField(max_length=2000, help_text="an https URL")
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES), min_length=1
    )
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)
    enabled = serializers.BooleanField(required=False, default=True)


class WebhookSerializer(serializers.Serializer[Any]):
    """An HTTPS endpoint the tenant's events of `event_types` are POSTed to, signed as the
    Standard Webhooks specification says."""

    id = serializers.UUIDField()
    url = serializers.URLField()
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_TYPES))
    description = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    consecutive_failures = serializers.IntegerField(
        help_text="failed attempts in a row; too many disable the endpoint"
    )
    disabled_at = serializers.IntegerField(
        allow_null=True, help_text=f"{US_SINCE_EPOCH}: when failures disabled it"
    )
    disabled_reason = serializers.CharField(allow_null=True)
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(help_text=f"{US_SINCE_EPOCH}; never before `created_at`")


class WebhookCreatedSerializer(WebhookSerializer):
    """A new webhook endpoint, with its signing secret: the only answer that holds it."""

    secret = serializers.CharField(help_text="the signing secret (`whsec_…`), shown only once")


class WebhookSecretSerializer(serializers.Serializer[Any]):
    """A new signing secret, shown only once."""

    secret = serializers.CharField(help_text="`whsec_…`")


class WebhookAttemptSerializer(serializers.Serializer[Any]):
    at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    status_code = serializers.IntegerField(allow_null=True, help_text="null: no HTTP answer")
    error = serializers.CharField(allow_null=True)
    duration_ms = serializers.FloatField()


class WebhookDeliverySerializer(serializers.Serializer[Any]):
    """One event for one endpoint. `id` is the `webhook-id` header receivers deduplicate
    on; a redelivery keeps it."""

    id = serializers.UUIDField()
    endpoint_id = serializers.UUIDField()
    thread_id = serializers.UUIDField(allow_null=True)
    event_type = serializers.CharField(help_text="one of the endpoint's `event_types`")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.IntegerField(
        allow_null=True, help_text=f"{US_SINCE_EPOCH}; only while `pending`"
    )
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    log = WebhookAttemptSerializer(many=True, help_text="every attempt, oldest first")
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    delivered_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    payload = serializers.DictField(help_text="the event, as WebSockets carry it")


STATUS_FILTER = OpenApiParameter(
    "status", str, enum=list(DeliveryStatus.values), description="only deliveries in this status"
)


class WebhookViewSet(TenantScopedViewSet):
    """The tenant's webhook endpoints; admins read and write them."""

    queryset = WebhookEndpoint.objects.all()
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(
        operation_id="webhooks_list", summary="List the tenant's webhook endpoints",
        description="Oldest first.", responses=WebhookSerializer,
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset().order_by("created_at", "id"))
        assert page is not None
        return self.get_paginated_response([endpoint_json(row) for row in page])

    @extend_schema(
        operation_id="webhooks_create", summary="Create a webhook endpoint",
        description="The answer's `secret` signs the deliveries; it is shown this once.",
        request=WebhookInput, responses={201: WebhookCreatedSerializer},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        with transaction.atomic():
            row, secret = endpoint_save(tenant=self.principal.tenant, data=request.data)
            self._audit(AuditAction.WEBHOOK_CREATED, row.pk, {}, endpoint_json(row))
        return Response({**endpoint_json(row), "secret": secret}, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="webhooks_retrieve", summary="Get a webhook endpoint",
        responses=WebhookSerializer,
    )  # fmt: skip
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(endpoint_json(self.get_object()))

    @extend_schema(
        operation_id="webhooks_partial_update", summary="Change a webhook endpoint",
        description="The fields sent replace the stored ones. Enabling a disabled endpoint "
        "starts its failure count over.",
        request=WebhookInput, responses=WebhookSerializer,
    )  # fmt: skip
    def partial_update(self, request: Request, pk: str) -> Response:
        current = self.get_object()
        before = endpoint_json(current)
        with transaction.atomic():
            row, _ = endpoint_save(tenant=self.principal.tenant, data=request.data, current=current)
            self._audit(AuditAction.WEBHOOK_UPDATED, row.pk, before, endpoint_json(row))
        return Response(endpoint_json(row))

    def _audit(
        self, action: AuditAction, pk: object, before: Mapping[str, Any],
        after: Mapping[str, Any],
    ) -> None:  # fmt: skip
        """The changed fields; the URL only as changed (it may carry a token), never a
        signing secret."""
        changes = changed_fields(before, after, hidden=frozenset({"url"}))
        changes.pop("updated_at", None)
        audit_by(self.principal, action, "webhook", pk, {"changes": changes})

    @extend_schema(
        operation_id="webhooks_destroy", summary="Delete a webhook endpoint",
        responses={204: None},
    )  # fmt: skip
    def destroy(self, request: Request, pk: str) -> Response:
        row = self.get_object()
        with transaction.atomic():
            self._audit(AuditAction.WEBHOOK_DELETED, row.pk, endpoint_json(row), {})
            endpoint_delete(row=row)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="webhooks_rotate_secret", summary="Rotate a webhook's signing secret",
        description="Answers the new secret, once. The previous one keeps signing alongside "
        "it for the overlap the operator set (`WEBHOOK_SECRET_OVERLAP_S`), so receivers can "
        "switch without missing a delivery.",
        request=None, responses=WebhookSecretSerializer,
    )  # fmt: skip
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        row = self.get_object()
        with transaction.atomic():
            secret = secret_rotate(row=row)
            audit_by(self.principal, AuditAction.WEBHOOK_SECRET_ROTATED, "webhook", row.pk)
        return Response({"secret": secret})

    @extend_schema(
        operation_id="webhooks_deliveries_list", summary="List a webhook's deliveries",
        description="Newest first, each with its attempts' log.",
        parameters=[STATUS_FILTER, *PAGE_PARAMETERS],
        responses=page_of(WebhookDeliverySerializer),
    )  # fmt: skip
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        endpoint = self.get_object()
        rows = WebhookDelivery.objects.filter(endpoint_id=endpoint.pk).order_by("-created_at", "id")
        status_filter = request.query_params.get("status")
        if status_filter is not None:
            if status_filter not in DeliveryStatus.values:
                raise ValidationFailed(
                    "status must be pending, sending, delivered or failed", field="status"
                )
            rows = rows.filter(status=status_filter)
        page = self.paginate_queryset(rows)
        assert page is not None
        return self.get_paginated_response([delivery_json(row) for row in page])

    @extend_schema(
        operation_id="webhooks_redeliver", summary="Send a webhook delivery again",
        description="Now, whatever its status, with the same `webhook-id` (receivers can "
        "deduplicate); its attempts start over.",
        request=None, responses=WebhookDeliverySerializer,
    )  # fmt: skip
    @action(
        detail=True, methods=["post"],
        url_path=f"deliveries/{group('delivery_id')}/redeliver",
    )  # fmt: skip
    def redeliver(self, request: Request, pk: str, delivery_id: str) -> Response:
        row = delivery_redeliver(endpoint=self.get_object(), delivery_id=delivery_id)
        return Response(delivery_json(row))
