"""The audit trail in the admin: read-only for everyone (entries are written by the
platform, never by hand); a tenant's staff see their own tenant's."""

from __future__ import annotations

from django.contrib import admin

from audit.models import AuditEntry
from tenancy.admin import TenantScopedAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(TenantScopedAdmin[AuditEntry]):
    can_add = False
    can_change = False
    can_delete = False
    list_display = ["created_at", "action", "actor_kind", "actor_name", "target_type",
                    "target_id", "tenant"]  # fmt: skip
    list_filter = ["tenant", "action", "actor_kind", "target_type"]
    search_fields = ["=id", "actor_name", "=actor_id", "=target_id"]
    ordering = ["-created_at"]
