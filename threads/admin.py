"""Threads in the admin, read-only. Encrypted values (env, KV) never appear: only their
names, types and sizes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from threads.models import (
    Action,
    Log,
    Message,
    TenantEnv,
    Thread,
    ThreadEnv,
    ThreadFile,
    ThreadValue,
)


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    list_filter = ["tenant"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "agent_name", "user_id", "status", "created_at"]
    list_filter = ["tenant", "status"]
    search_fields = ["id", "agent_name", "user_id"]


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "thread", "seq", "role", "silent", "status", "created_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["thread__id"]


@admin.register(Action)
class ActionAdmin(ReadOnlyAdmin):
    """What turns wait for a person to decide; answered through the API (respond_action)."""

    list_display = ["id", "thread", "kind", "tool_name", "status", "created_at", "expires_at"]
    list_filter = ["tenant", "kind", "status"]
    search_fields = ["id", "thread__id", "tool_name"]


@admin.register(Log)
class LogAdmin(ReadOnlyAdmin):
    list_display = ["id", "thread", "kind", "created_at"]
    list_filter = ["tenant", "kind"]


@admin.register(ThreadFile)
class ThreadFileAdmin(ReadOnlyAdmin):
    list_display = ["path", "thread", "is_directory", "mime_type", "size"]
    search_fields = ["path", "thread__id"]


@admin.register(ThreadValue)
class ThreadValueAdmin(ReadOnlyAdmin):
    list_display = ["key", "thread", "size", "updated_at"]
    exclude = ["value_encrypted"]


@admin.register(ThreadEnv)
class ThreadEnvAdmin(ReadOnlyAdmin):
    list_display = ["name", "thread", "type", "updated_at"]
    exclude = ["value_encrypted"]


@admin.register(TenantEnv)
class TenantEnvAdmin(ReadOnlyAdmin):
    list_display = ["name", "tenant", "type", "updated_at"]
    exclude = ["value_encrypted"]
