"""The admin's page of MCP servers: each server's URL, auth type, cached tools and health,
never its secret. Servers are registered and changed through the API (where the secret is
typed in once); the admin shows them and may delete them."""

from __future__ import annotations

import json
from typing import Any, Final

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from connectors.models import McpServer
from connectors.servers import health_json, mcp_server_delete
from tenancy.admin import TenantScopedAdmin
from tenancy.models import Role

# Every field read-only (servers are written through the API), the secret only as whether
# one is stored.
SHOWN: Final = [
    "tenant", "name", "url", "description", "transport", "auth_type", "auth_header_name",
    "oauth_client_id", "oauth_token_url", "oauth_scopes", "secret_stored", "tools_ttl_s",
    "call_timeout_s", "tools_fetched_at", "tool_list", "checked_at", "last_ok_at",
    "last_error", "last_error_at", "created_at", "updated_at",
]  # fmt: skip


@admin.register(McpServer)
class McpServerAdmin(TenantScopedAdmin[McpServer]):
    can_add = False
    can_change = False
    write_role = Role.ADMIN  # as the API: admins write MCP servers
    list_display = ["name", "url", "auth_type", "tool_count", "healthy", "checked_at", "tenant"]
    list_filter = ["tenant", "auth_type"]
    search_fields = ["name", "url", "description", "tenant__slug"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return SHOWN

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return SHOWN

    @admin.display(description="tools")
    def tool_count(self, obj: McpServer) -> int:
        return len(obj.tools)

    @admin.display(description="healthy", boolean=True)
    def healthy(self, obj: McpServer) -> bool | None:
        ok: bool | None = health_json(obj)["ok"]
        return ok

    @admin.display(description="secret")
    def secret_stored(self, obj: McpServer) -> str:
        return "stored (write-only)" if obj.has_secret else "none"

    @admin.display(description="cached tools")
    def tool_list(self, obj: McpServer) -> Any:
        listing = [{"name": t["name"], "description": t["description"]} for t in obj.tools]
        return format_html("<pre>{}</pre>", json.dumps(listing, indent=2, ensure_ascii=False))

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        mcp_server_delete(tenant=obj.tenant, row=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for row in queryset.select_related("tenant"):
            mcp_server_delete(tenant=row.tenant, row=row)
