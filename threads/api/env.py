"""Env variables over REST: ``/api/v1/threads/{id}/env`` (thread level) and
``/api/v1/env`` (tenant level, admin to write).

Values are write-only: every answer carries names and types, never a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.errors import NotFound, ValidationFailed
from tenancy.models import Role
from tenancy.viewsets import request_principal
from threads.api.base import ThreadScopedView
from threads.services.env import (
    EnvEntry,
    EnvTypeName,
    env_name_check,
    tenant_env_delete,
    tenant_env_names,
    tenant_env_set,
    thread_env_delete,
    thread_env_names,
    thread_env_set,
)


def env_entry_json(entry: EnvEntry) -> dict[str, Any]:
    return {"name": entry.name, "type": entry.type, "updated_at": entry.updated_at}


class EnvPutInput(serializers.Serializer[Any]):
    """The body of ``PUT env/<name>`` as documented (``_put_body`` reads it)."""

    value = serializers.CharField(allow_blank=True, trim_whitespace=False)
    type = serializers.ChoiceField(
        choices=["text", "secret"], required=False,
        help_text="omitted: the variable keeps its type; a new one is secret",
    )  # fmt: skip


def _put_body(data: object) -> tuple[str, EnvTypeName | None]:
    """``(value, type)`` from ``{"value": "...", "type"?: "text"|"secret"}``."""
    if not isinstance(data, Mapping):
        raise ValidationFailed("the body must be a JSON object")
    if "value" not in data:
        raise ValidationFailed("value is required (it may be blank)", field="value")
    value = data["value"]
    if not isinstance(value, str):
        raise ValidationFailed("value must be a string", field="value")
    kind = data.get("type")
    if kind not in (None, "text", "secret"):
        raise ValidationFailed("type must be 'text' or 'secret'", field="type")
    return value, kind


class ThreadEnvListView(ThreadScopedView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, thread_id: str) -> Response:
        entries = thread_env_names(thread=self.thread())
        return Response({"env": [env_entry_json(entry) for entry in entries]})


class ThreadEnvDetailView(ThreadScopedView):
    @extend_schema(request=EnvPutInput, responses=OpenApiTypes.OBJECT)
    def put(self, request: Request, thread_id: str, name: str) -> Response:
        """Set a variable (``type`` omitted keeps the existing type; new names are secret)."""
        env_name_check(name)
        value, kind = _put_body(request.data)
        entry = thread_env_set(thread=self.thread(), name=name, value=value, type=kind)
        return Response(env_entry_json(entry))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, thread_id: str, name: str) -> Response:
        if not thread_env_delete(thread=self.thread(), name=name):
            raise NotFound(f"no environment variable {name} on this thread")
        return Response(status=status.HTTP_204_NO_CONTENT)


class TenantEnvView(APIView):
    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.ADMIN


class TenantEnvListView(TenantEnvView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        entries = tenant_env_names(tenant=request_principal(request).tenant)
        return Response({"env": [env_entry_json(entry) for entry in entries]})


class TenantEnvDetailView(TenantEnvView):
    @extend_schema(request=EnvPutInput, responses=OpenApiTypes.OBJECT)
    def put(self, request: Request, name: str) -> Response:
        env_name_check(name)
        value, kind = _put_body(request.data)
        tenant = request_principal(request).tenant
        entry = tenant_env_set(tenant=tenant, name=name, value=value, type=kind)
        return Response(env_entry_json(entry))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, name: str) -> Response:
        if not tenant_env_delete(tenant=request_principal(request).tenant, name=name):
            raise NotFound(f"no tenant environment variable {name}")
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("env", ThreadEnvListView.as_view(), name="thread-env"),
    path("env/<str:name>", ThreadEnvDetailView.as_view(), name="thread-env-detail"),
]

tenant_urlpatterns = [
    path("env", TenantEnvListView.as_view(), name="tenant-env"),
    path("env/<str:name>", TenantEnvDetailView.as_view(), name="tenant-env-detail"),
]
