from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tenancy.encryption import new_wrapped_data_key
from tenancy.models import ApiKey, Membership, Tenant
from tenancy.services import api_key_issue, api_key_revoke


class MembershipInline(admin.TabularInline[Membership, Tenant]):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["slug", "name", "is_active", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["id", "created_at"]
    fields = ["id", "slug", "name", "is_active", "created_at"]
    inlines = [MembershipInline]

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        if not change:
            obj.data_key_wrapped = new_wrapped_data_key(obj.id)
        super().save_model(request, obj, form, change)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin[Membership]):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]
    fields = ["tenant", "user", "role"]

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> Any:
        return ["tenant", "user"] if obj is not None else []


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    """Keys made here get their secret from the service; it is shown once, as a message."""

    list_display = ["name", "tenant", "role", "key_prefix", "revoked", "expires_at", "last_used_at"]
    list_filter = ["role", "revoked", "tenant"]
    search_fields = ["name", "prefix", "tenant__slug"]
    actions = ["revoke_selected"]
    _detail_fields = [
        "key_prefix",
        "revoked",
        "revoked_at",
        "created_by",
        "created_at",
        "last_used_at",
    ]

    @admin.display(description="prefix")
    def key_prefix(self, api_key: ApiKey) -> str:
        return f"sap_{api_key.prefix}_…"

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        base = ["tenant", "name", "role", "expires_at"]
        return base if obj is None else [*base, *self._detail_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        return [] if obj is None else ["tenant", *self._detail_fields]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if not change:
            secret = api_key_issue(api_key=obj)
            obj.created_by = request.user if request.user.is_authenticated else None
            self.message_user(
                request,
                f"API key created. Copy it now, it is not shown again: {secret}",
                level=messages.WARNING,
            )
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected API keys")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset.select_related("tenant"):
            api_key_revoke(tenant=api_key.tenant, api_key_id=api_key.id)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")
