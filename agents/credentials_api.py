"""REST for provider credentials: ``/api/v1/credentials`` (list, create) and
``/api/v1/credentials/{name}`` (read, change or rotate, delete). Keys are write-only: no
answer holds one. Admins write credentials; any role reads their names and endpoints."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.auditing import credential_audit
from agents.credentials import (
    credential_delete,
    credential_get,
    credential_json,
    credential_listing,
    credential_save,
)
from agents.models import CredentialProvider, ProviderCredential
from common.audit import AuditAction
from common.inputs import StrictInput
from common.pagination import paginate
from common.schema import US_SINCE_EPOCH, error_response, error_responses
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet

IN_USE = "A model names it (the message names the models), or the new name is taken"


class CredentialInput(StrictInput):
    """A provider credential. Creating one needs `name`, `provider` and `api_key`; a change
    sends only what changes, and a new `api_key` rotates the key in place."""

    name = serializers.RegexField(r"^[a-z][a-z0-9_]{0,63}$", required=False)
    provider = serializers.ChoiceField(choices=CredentialProvider.choices, required=False)
    base_url = serializers.CharField(
        required=False, allow_blank=True, max_length=500,
        help_text="only for `openai_compatible`: the one endpoint the key goes to",
    )  # fmt: skip
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)
    api_key = serializers.CharField(
        required=False, write_only=True, max_length=4096,
        help_text="write-only: stored encrypted, never shown again",
    )  # fmt: skip


class CredentialSerializer(serializers.Serializer[Any]):
    """A credential as answers show it: never its key. `platform` marks the operator's
    credentials granted to this tenant (`platform:openai`), which have no id."""

    id = serializers.UUIDField(allow_null=True)
    name = serializers.CharField()
    provider = serializers.CharField()
    base_url = serializers.CharField(allow_null=True)
    description = serializers.CharField(allow_blank=True)
    platform = serializers.BooleanField()
    created_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    rotated_at = serializers.IntegerField(
        allow_null=True, help_text=f"the last key change, {US_SINCE_EPOCH}"
    )


class CredentialViewSet(TenantScopedViewSet):
    """The tenant's provider credentials, addressed by name."""

    queryset = ProviderCredential.objects.all()
    write_role = Role.ADMIN
    lookup_field = "name"
    lookup_value_converter = "str"

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.order_by("name")

    def _row(self) -> ProviderCredential:
        return credential_get(tenant=self.principal.tenant, name=self.kwargs["name"])

    @extend_schema(
        operation_id="credentials_list", summary="List the provider credentials",
        description="The tenant's own, by name, then the operator's platform credentials "
        "granted to it. Keys are never shown.",
        responses=CredentialSerializer,
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        listing = credential_listing(tenant=self.principal.tenant)
        return paginate(request, listing, lambda item: item, view=self)

    @extend_schema(
        operation_id="credentials_create", summary="Store a provider credential",
        request=CredentialInput,
        responses={201: CredentialSerializer, **error_responses(409, 413)},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        CredentialInput(data=request.data).is_valid(raise_exception=True)
        with transaction.atomic():
            row = credential_save(tenant=self.principal.tenant, data=request.data)
            credential_audit(self.principal, AuditAction.CREDENTIAL_CREATED, row.name, request.data)
        return Response(credential_json(row), status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="credentials_retrieve", summary="Get a provider credential",
        responses=CredentialSerializer,
    )  # fmt: skip
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(credential_json(self._row()))

    @extend_schema(
        operation_id="credentials_partial_update",
        summary="Change or rotate a provider credential",
        description="The fields sent replace the stored ones. A new `api_key` replaces the "
        "old one in one update: calls use the old key until it is saved, the new one after.",
        request=CredentialInput,
        responses={200: CredentialSerializer, 409: error_response(409, IN_USE)},
    )  # fmt: skip
    def partial_update(self, request: Request, name: str) -> Response:
        CredentialInput(data=request.data, partial=True).is_valid(raise_exception=True)
        current = self._row()
        with transaction.atomic():
            row = credential_save(tenant=self.principal.tenant, data=request.data, current=current)
            credential_audit(self.principal, AuditAction.CREDENTIAL_UPDATED, row.name, request.data)
        return Response(credential_json(row))

    @extend_schema(
        operation_id="credentials_destroy", summary="Delete a provider credential",
        description="Refused (409) while a model names it.",
        responses={204: None, 409: error_response(409, IN_USE)},
    )  # fmt: skip
    def destroy(self, request: Request, name: str) -> Response:
        row = self._row()
        with transaction.atomic():
            credential_delete(tenant=self.principal.tenant, row=row)
            credential_audit(self.principal, AuditAction.CREDENTIAL_DELETED, row.name, {})
        return Response(status=status.HTTP_204_NO_CONTENT)
