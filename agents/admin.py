"""Definitions in the admin, read-only: changes go through the API or bundles, which
validate the tenant's definitions as a whole."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agents.models import Agent, CodeTool, Definition, Model, PermissionRule, Prompt


class ReadOnly:
    """Admin pages that show rows and change none."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DefinitionAdmin(ReadOnly, admin.ModelAdmin[Definition]):
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__slug"]
    readonly_fields = ["tenant", "created_at", "updated_at"]
    exclude = ["api_key_encrypted"]


@admin.register(Model)
class ModelAdmin(DefinitionAdmin):
    list_display = ["name", "tenant", "provider", "model_id", "has_api_key", "updated_at"]
    list_filter = ["tenant", "provider"]

    @admin.display(boolean=True, description="API key")
    def has_api_key(self, obj: Model) -> bool:
        return obj.has_api_key


@admin.register(Prompt)
class PromptAdmin(DefinitionAdmin):
    list_display = ["name", "tenant", "model", "include_chat", "updated_at"]


@admin.register(Agent)
class AgentAdmin(DefinitionAdmin):
    list_display = ["name", "tenant", "type", "expose_as_tool", "updated_at"]
    list_filter = ["tenant", "type"]


@admin.register(CodeTool)
class CodeToolAdmin(DefinitionAdmin):
    list_display = ["name", "tenant", "language", "updated_at"]


@admin.register(PermissionRule)
class PermissionRuleAdmin(ReadOnly, admin.ModelAdmin[PermissionRule]):
    """Read-only like definitions: changes go through the API, which checks them."""

    list_display = ["decision", "tool", "agent", "tenant", "updated_at"]
    list_filter = ["tenant", "decision"]
    search_fields = ["tool", "agent", "description", "tenant__slug"]
