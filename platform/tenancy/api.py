"""Tenancy API: who am I, WebSocket tickets, and API key management (admins only)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.audit import AuditAction
from common.inputs import StrictInput
from common.schema import US_SINCE_EPOCH
from common.time import from_us, to_us
from tenancy.auditing import audit_by
from tenancy.models import ApiKey, Role
from tenancy.services import api_key_create, api_key_revoke, ws_ticket_issue
from tenancy.viewsets import TenantScopedViewSet, request_principal


@extend_schema_field(OpenApiTypes.INT64)
class MomentField(serializers.Field):  # type: ignore[type-arg]
    """An aware datetime, answered as µs since the Unix epoch."""

    def to_representation(self, value: dt.datetime) -> int:
        return to_us(value)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "format": "date-time"},
            {"type": "integer", "format": "int64"},
        ]
    }
)
class MomentInputField(serializers.Field):  # type: ignore[type-arg]
    """A moment given as an ISO-8601 datetime (without a zone: UTC) or as µs since the
    Unix epoch."""

    default_error_messages = {
        "invalid": "must be an ISO-8601 datetime or an integer of µs since the Unix epoch",
    }

    def to_internal_value(self, data: Any) -> dt.datetime:
        if isinstance(data, int) and not isinstance(data, bool):
            try:
                return from_us(data)
            except OverflowError:
                self.fail("invalid")
        if isinstance(data, str):
            try:
                moment: dt.datetime = serializers.DateTimeField().to_internal_value(data)
            except serializers.ValidationError:
                self.fail("invalid")
            return moment
        self.fail("invalid")


class TenantSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    slug = serializers.CharField()
    name = serializers.CharField()


class MeSerializer(serializers.Serializer[Any]):
    """The caller: its tenant, its role there, and what identified it."""

    tenant = TenantSerializer()
    role = serializers.ChoiceField(choices=Role.choices)
    kind = serializers.ChoiceField(
        choices=["api_key", "user"], help_text="identified by an API key or a user's session"
    )
    api_key_id = serializers.UUIDField(allow_null=True, help_text="the key's id, for a key")
    user = serializers.CharField(allow_null=True, help_text="the user's name, for a session")


class WsTicketSerializer(serializers.Serializer[Any]):
    """A one-time ticket to open a WebSocket with (`?ticket=`)."""

    ticket = serializers.CharField()
    expires_in = serializers.IntegerField(help_text="seconds the ticket stays valid")


class ApiKeySerializer(serializers.Serializer[Any]):
    """An API key of the tenant. Its secret is shown once, when it is created."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    prefix = serializers.SerializerMethodField(
        help_text="the key's first characters, to recognise it"
    )
    role = serializers.ChoiceField(choices=Role.choices)
    created_at = MomentField(help_text=US_SINCE_EPOCH)
    expires_at = MomentField(allow_null=True, help_text=f"{US_SINCE_EPOCH}; null: never")
    revoked = serializers.BooleanField()
    revoked_at = MomentField(allow_null=True, help_text=US_SINCE_EPOCH)
    last_used_at = MomentField(
        allow_null=True, help_text=f"{US_SINCE_EPOCH}; refreshed at most once a minute"
    )

    def get_prefix(self, api_key: ApiKey) -> str:
        return f"sap_{api_key.prefix}_"


class ApiKeyCreatedSerializer(ApiKeySerializer):
    """A new API key, with its secret: the only answer that holds it."""

    key = serializers.CharField(help_text="the full API key; it is shown only once")


class ApiKeyCreateInput(StrictInput):
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)
    expires_at = MomentInputField(
        required=False, allow_null=True,
        help_text="when the key stops working: an ISO-8601 datetime (without a zone: UTC) "
        "or µs since the Unix epoch; in the future; null or left out: never",
    )  # fmt: skip


class MeView(APIView):
    @extend_schema(
        operation_id="me_retrieve", summary="Get the caller's tenant and role",
        responses=MeSerializer,
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        principal = request_principal(request)
        data = {
            "tenant": principal.tenant,
            "role": principal.role,
            "kind": principal.kind,
            "api_key_id": principal.api_key.id if principal.api_key else None,
            "user": principal.user.get_username() if principal.user else None,
        }
        return Response(MeSerializer(data).data)


class WsTicketView(APIView):
    """Any role may open the sockets it may read, so any role gets a ticket."""

    write_role = Role.READ_ONLY

    @extend_schema(
        operation_id="ws_tickets_create",
        request=None,
        responses={201: WsTicketSerializer},
        summary="Get a one-time WebSocket ticket",
        description="Connect with `?ticket=<ticket>` within `expires_in` seconds; one use.",
    )
    def post(self, request: Request) -> Response:
        issued = ws_ticket_issue(principal=request_principal(request))
        return Response(WsTicketSerializer(issued).data, status=status.HTTP_201_CREATED)


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """The tenant's API keys. Secrets are shown once, at creation."""

    queryset = ApiKey.objects.all()
    serializer_class = ApiKeySerializer
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    ordering = ("-created_at", "id")

    @extend_schema(
        operation_id="api_keys_list", summary="List the tenant's API keys",
        description="Newest first.", responses=ApiKeySerializer,
    )  # fmt: skip
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        operation_id="api_keys_retrieve", summary="Get an API key", responses=ApiKeySerializer
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        operation_id="api_keys_create", summary="Create an API key",
        description="The answer's `key` is the secret: it is shown this once, never again.",
        request=ApiKeyCreateInput, responses={201: ApiKeyCreatedSerializer},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        payload = ApiKeyCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        principal = self.principal
        with transaction.atomic():
            issued = api_key_create(
                tenant=principal.tenant,
                name=payload.validated_data["name"],
                role=Role(payload.validated_data["role"]),
                expires_at=payload.validated_data.get("expires_at"),
                created_by=principal.user,
            )
            audit_by(
                principal, AuditAction.API_KEY_CREATED, "api_key", issued.api_key.id,
                {"name": issued.api_key.name, "role": issued.api_key.role},
            )  # fmt: skip
        body = ApiKeySerializer(issued.api_key).data | {"key": issued.secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="api_keys_revoke", summary="Revoke an API key",
        description="The key stops working at once; revoking twice is harmless.",
        request=None, responses=ApiKeySerializer,
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: Any = None) -> Response:
        api_key = self.get_object()
        with transaction.atomic():
            revoked = api_key_revoke(tenant=self.principal.tenant, api_key_id=api_key.id)
            audit_by(
                self.principal, AuditAction.API_KEY_REVOKED, "api_key", revoked.id,
                {"name": revoked.name},
            )  # fmt: skip
        return Response(ApiKeySerializer(revoked).data)
