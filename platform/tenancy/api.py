"""Tenancy API: who am I, and API key management (admins only)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenancy.models import ApiKey, Role
from tenancy.serializers import (
    ApiKeyCreatedOutput,
    ApiKeyCreateInput,
    ApiKeyOutput,
    MeOutput,
    WsTicketOutput,
)
from tenancy.services import api_key_create, api_key_revoke, ws_ticket_issue
from tenancy.viewsets import TenantScopedViewSet, request_principal


class MeView(APIView):
    @extend_schema(responses=MeOutput, summary="The caller's tenant and role")
    def get(self, request: Request) -> Response:
        principal = request_principal(request)
        data = {
            "tenant": principal.tenant,
            "role": principal.role,
            "kind": principal.kind,
            "api_key_id": principal.api_key.id if principal.api_key else None,
            "user": principal.user.get_username() if principal.user else None,
        }
        return Response(MeOutput(data).data)


class WsTicketView(APIView):
    """Any role may open the sockets it may read, so any role gets a ticket."""

    write_role = Role.READ_ONLY

    @extend_schema(
        request=None,
        responses={201: WsTicketOutput},
        summary="A one-time WebSocket ticket for the caller",
        description="Connect with `?ticket=<ticket>` within `expires_in` seconds; one use.",
    )
    def post(self, request: Request) -> Response:
        issued = ws_ticket_issue(principal=request_principal(request))
        return Response(WsTicketOutput(issued).data, status=status.HTTP_201_CREATED)


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """The tenant's API keys. Secrets are shown once, at creation."""

    queryset = ApiKey.objects.all()
    serializer_class = ApiKeyOutput
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(request=ApiKeyCreateInput, responses={201: ApiKeyCreatedOutput})
    def create(self, request: Request) -> Response:
        payload = ApiKeyCreateInput(data=request.data)
        payload.is_valid(raise_exception=True)
        principal = self.principal
        issued = api_key_create(
            tenant=principal.tenant,
            name=payload.validated_data["name"],
            role=Role(payload.validated_data["role"]),
            expires_at=payload.validated_data.get("expires_at"),
            created_by=principal.user,
        )
        body = ApiKeyOutput(issued.api_key).data | {"key": issued.secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiKeyOutput)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: Any = None) -> Response:
        api_key = self.get_object()
        revoked = api_key_revoke(tenant=self.principal.tenant, api_key_id=api_key.id)
        return Response(ApiKeyOutput(revoked).data)
