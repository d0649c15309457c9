"""Admin pages of compaction: the overlays the engine wrote, read-only for everyone (a
revert goes through the API, which writes its event); a tenant's staff see their own
tenant's."""

from __future__ import annotations

from django.contrib import admin

from compaction.models import Compaction
from tenancy.admin import TenantScopedAdmin


@admin.register(Compaction)
class CompactionAdmin(TenantScopedAdmin[Compaction]):
    can_add = False
    can_change = False
    can_delete = False
    list_display = ["thread", "side", "status", "tier", "trigger", "from_seq", "to_seq",
                    "tokens_before", "tokens_after", "cost_micros", "created_at"]  # fmt: skip
    list_filter = ["tenant", "status", "tier", "trigger", "side"]
    list_select_related = ["thread"]
    search_fields = ["=id", "=thread__id", "=turn_id"]
    ordering = ["-created_at"]
