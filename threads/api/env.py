"""Env variables over REST: ``/api/v1/threads/{id}/env`` (thread level) and
``/api/v1/env`` (tenant level, admin to write).

Values are write-only: every answer carries names and types, never a value. Both lists
are in the list shape, by name (keyset on the name).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import transaction
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.audit import AuditAction
from common.errors import NotFound, ValidationFailed
from common.inputs import StrictInput
from common.pagination import PAGE_PARAMETERS, paginate
from common.payloads import object_body
from common.schema import page_of
from tenancy.auditing import audit_by
from tenancy.models import Role
from tenancy.viewsets import request_principal
from threads.api.base import ThreadScopedView
from threads.models import TenantEnv, ThreadEnv
from threads.services.env import (
    EnvEntry,
    EnvTypeName,
    env_entry_of,
    env_name_check,
    tenant_env_delete,
    tenant_env_rows,
    tenant_env_set,
    thread_env_delete,
    thread_env_rows,
    thread_env_set,
)

ENV_TYPES = ["text", "secret"]


class EnvVarSerializer(serializers.Serializer[EnvEntry]):
    """An environment variable: its name and type, never its value (values are
    write-only). `updated_at` is microseconds since the Unix epoch."""

    name = serializers.CharField(help_text="letters, digits and `_`, not starting with a digit")
    type = serializers.ChoiceField(
        choices=ENV_TYPES,
        help_text="`text` may appear in prompts and tool output; `secret` only inside tools",
    )
    updated_at = serializers.IntegerField()


def env_entry_json(entry: EnvEntry) -> dict[str, Any]:
    return dict(EnvVarSerializer(entry).data)


def env_row_json(row: ThreadEnv | TenantEnv) -> dict[str, Any]:
    return env_entry_json(env_entry_of(row))


_PUT_DESCRIPTION = (
    "`type` omitted keeps the variable's type; a new variable is `secret`. The answer"
    " carries the name and type, never the value."
)


# Documents the body for the schema; _put_body reads it.
class EnvPutInput(StrictInput):
    """The variable's value, and optionally its type."""

    value = serializers.CharField(allow_blank=True, trim_whitespace=False)
    type = serializers.ChoiceField(
        choices=ENV_TYPES, required=False,
        help_text="omitted: the variable keeps its type; a new one is secret",
    )  # fmt: skip


def _put_body(data: object) -> tuple[str, EnvTypeName | None]:
    """``(value, type)`` from ``{"value": "...", "type"?: "text"|"secret"}``."""
    body = object_body(data, list(EnvPutInput().fields))
    if "value" not in body:
        raise ValidationFailed("value is required (it may be blank)", field="value")
    value = body["value"]
    if not isinstance(value, str):
        raise ValidationFailed("value must be a string", field="value")
    kind = body.get("type")
    if kind not in (None, "text", "secret"):
        raise ValidationFailed("type must be 'text' or 'secret'", field="type")
    return value, kind


class ThreadEnvListView(ThreadScopedView):
    @extend_schema(
        summary="List a thread's environment variables",
        operation_id="thread_env_list",
        parameters=PAGE_PARAMETERS,
        responses=page_of(EnvVarSerializer),
    )
    def get(self, request: Request, thread_id: str) -> Response:
        rows = thread_env_rows(thread=self.thread())
        return paginate(request, rows, env_row_json, view=self)


class ThreadEnvDetailView(ThreadScopedView):
    @extend_schema(
        summary="Set a thread's environment variable",
        operation_id="thread_env_set",
        description=_PUT_DESCRIPTION,
        request=EnvPutInput,
        responses=EnvVarSerializer,
    )
    def put(self, request: Request, thread_id: str, name: str) -> Response:
        env_name_check(name)
        value, kind = _put_body(request.data)
        thread = self.thread()
        with transaction.atomic():  # the entry names the variable, never its value
            entry = thread_env_set(thread=thread, name=name, value=value, type=kind)
            audit_by(
                self.principal, AuditAction.ENV_SET, "thread_env", name,
                {"thread_id": str(thread.pk), "type": entry.type},
            )  # fmt: skip
        return Response(env_entry_json(entry))

    @extend_schema(
        summary="Delete a thread's environment variable",
        responses={204: None},
        operation_id="thread_env_delete",
    )
    def delete(self, request: Request, thread_id: str, name: str) -> Response:
        thread = self.thread()
        with transaction.atomic():
            if not thread_env_delete(thread=thread, name=name):
                raise NotFound(f"no environment variable {name} on this thread")
            audit_by(
                self.principal, AuditAction.ENV_DELETED, "thread_env", name,
                {"thread_id": str(thread.pk)},
            )  # fmt: skip
        return Response(status=status.HTTP_204_NO_CONTENT)


class TenantEnvView(APIView):
    read_role: ClassVar[Role] = Role.READ_ONLY
    write_role: ClassVar[Role] = Role.ADMIN


class TenantEnvListView(TenantEnvView):
    @extend_schema(
        summary="List the tenant's environment variables",
        operation_id="tenant_env_list",
        description="The tenant level of every thread's variable lookups.",
        parameters=PAGE_PARAMETERS,
        responses=page_of(EnvVarSerializer),
    )
    def get(self, request: Request) -> Response:
        rows = tenant_env_rows(tenant=request_principal(request).tenant)
        return paginate(request, rows, env_row_json, view=self)


class TenantEnvDetailView(TenantEnvView):
    @extend_schema(
        summary="Set a tenant environment variable",
        operation_id="tenant_env_set",
        description=_PUT_DESCRIPTION + " Needs the admin role.",
        request=EnvPutInput,
        responses=EnvVarSerializer,
    )
    def put(self, request: Request, name: str) -> Response:
        env_name_check(name)
        value, kind = _put_body(request.data)
        principal = request_principal(request)
        with transaction.atomic():  # the entry names the variable, never its value
            entry = tenant_env_set(tenant=principal.tenant, name=name, value=value, type=kind)
            audit_by(principal, AuditAction.ENV_SET, "tenant_env", name, {"type": entry.type})
        return Response(env_entry_json(entry))

    @extend_schema(
        summary="Delete a tenant environment variable",
        operation_id="tenant_env_delete",
        description="Needs the admin role.",
        responses={204: None},
    )
    def delete(self, request: Request, name: str) -> Response:
        principal = request_principal(request)
        with transaction.atomic():
            if not tenant_env_delete(tenant=principal.tenant, name=name):
                raise NotFound(f"no tenant environment variable {name}")
            audit_by(principal, AuditAction.ENV_DELETED, "tenant_env", name)
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("env", ThreadEnvListView.as_view(), name="thread-env"),
    path("env/<str:name>", ThreadEnvDetailView.as_view(), name="thread-env-detail"),
]

tenant_urlpatterns = [
    path("env", TenantEnvListView.as_view(), name="tenant-env"),
    path("env/<str:name>", TenantEnvDetailView.as_view(), name="tenant-env-detail"),
]
