"""Webhooks: ``/api/v1/webhooks`` (list, create), ``…/{id}`` (read, change, delete),
``…/{id}/rotate-secret``, ``…/{id}/deliveries`` (the delivery log) and
``…/{id}/deliveries/{delivery_id}/redeliver`` (threads.services.webhooks). Admins only."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.errors import ValidationFailed
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet
from threads.models import WebhookDelivery, WebhookEndpoint
from threads.services.webhooks import (
    delivery_json,
    delivery_redeliver,
    endpoint_delete,
    endpoint_json,
    endpoint_save,
    secret_rotate,
)


class WebhookInput(BaseModel):
    """An HTTPS endpoint for the tenant's events of ``event_types``."""

    url: str = Field(description="https://…")
    event_types: list[str] = Field(
        description="turn.completed, turn.failed, subagent.completed, action.required, "
        "thread.status, effect.failed, webhook.disabled"
    )
    description: str = ""
    enabled: bool = True


class WebhookOutput(WebhookInput):
    id: str
    consecutive_failures: int
    disabled_at: int | None
    disabled_reason: str | None
    created_at: int
    updated_at: int
    secret: str | None = Field(
        None, description="the signing secret (whsec_…): only in the answer that creates it"
    )


class WebhookViewSet(TenantScopedViewSet):
    """The tenant's webhook endpoints; admins read and write them."""

    queryset = WebhookEndpoint.objects.all()
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    @extend_schema(operation_id="webhooks_list", responses=OpenApiTypes.OBJECT,
                   description="Paginated: `{count, next, previous, results}`")  # fmt: skip
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset().order_by("created_at", "id"))
        assert page is not None
        return self.get_paginated_response([endpoint_json(row) for row in page])

    @extend_schema(request=WebhookInput, responses={201: WebhookOutput})
    def create(self, request: Request) -> Response:
        row, secret = endpoint_save(tenant=self.principal.tenant, data=request.data)
        return Response({**endpoint_json(row), "secret": secret}, status=status.HTTP_201_CREATED)

    @extend_schema(responses=WebhookOutput)
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(endpoint_json(self.get_object()))

    @extend_schema(request=WebhookInput, responses=WebhookOutput)
    def partial_update(self, request: Request, pk: str) -> Response:
        row, _ = endpoint_save(
            tenant=self.principal.tenant, data=request.data, current=self.get_object()
        )
        return Response(endpoint_json(row))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        endpoint_delete(row=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        """A new signing secret (answered once); the previous one keeps signing, alongside,
        for ``WEBHOOK_SECRET_OVERLAP_S``."""
        return Response({"secret": secret_rotate(row=self.get_object())})

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="webhooks_deliveries_list")
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        """The endpoint's deliveries, newest first, each with its attempts' log; paginated."""
        endpoint = self.get_object()
        rows = WebhookDelivery.objects.filter(endpoint_id=endpoint.pk).order_by("-created_at")
        status_filter = request.query_params.get("status")
        if status_filter is not None:
            if status_filter not in ("pending", "sending", "delivered", "failed"):
                raise ValidationFailed(
                    "status must be pending, sending, delivered or failed", field="status"
                )
            rows = rows.filter(status=status_filter)
        page = self.paginate_queryset(rows)
        assert page is not None
        return self.get_paginated_response([delivery_json(row) for row in page])

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    @action(
        detail=True, methods=["post"],
        url_path="deliveries/(?P<delivery_id>[0-9a-fA-F-]{36})/redeliver",
    )  # fmt: skip
    def redeliver(self, request: Request, pk: str, delivery_id: str) -> Response:
        """Send a delivery again now (same ``webhook-id``: receivers can deduplicate)."""
        row = delivery_redeliver(endpoint=self.get_object(), delivery_id=delivery_id)
        return Response(delivery_json(row))
