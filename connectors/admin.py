"""The admin's pages of remote connections (MCP servers, A2A agents): each one's URL, auth type,
what it offered last (tools, card) and health, never its secret. They are registered and
changed through the API or the console (where the secret is typed in once); the admin shows
them and may delete them."""

from __future__ import annotations

import json
from typing import Any, ClassVar, Final, Generic, TypeVar

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from connectors.a2a import a2a_agent_delete, card_summary
from connectors.models import A2aAgent, McpServer, RemoteConnection
from connectors.remote import health_json
from connectors.servers import mcp_server_delete
from tenancy.admin import TenantScopedAdmin
from tenancy.models import Role

# Every field read-only (connections are written through the API), the secret only as
# whether one is stored.
AUTH: Final = ["auth_type", "auth_header_name", "oauth_client_id", "oauth_token_url",
               "oauth_scopes", "secret_stored"]  # fmt: skip
HEALTH: Final = ["checked_at", "last_ok_at", "last_error", "last_error_at", "created_at",
                 "updated_at"]  # fmt: skip


def _pre(value: Any) -> Any:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


T = TypeVar("T", bound=RemoteConnection)


class RemoteConnectionAdmin(TenantScopedAdmin[T], Generic[T]):
    can_add = False
    can_change = False
    write_role = Role.ADMIN  # as the API: admins write remote connections
    shown: ClassVar[list[str]] = []
    list_filter = ["tenant", "auth_type"]
    search_fields = ["name", "url", "description", "tenant__slug"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.shown

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.shown

    @admin.display(description="healthy", boolean=True)
    def healthy(self, obj: T) -> bool | None:
        ok: bool | None = health_json(obj)["ok"]
        return ok

    @admin.display(description="secret")
    def secret_stored(self, obj: T) -> str:
        return "stored (write-only)" if obj.has_secret else "none"

    def delete_row(self, obj: T) -> None:
        raise NotImplementedError

    def delete_model(self, request: HttpRequest, obj: T) -> None:
        self.delete_row(obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for row in queryset.select_related("tenant"):
            self.delete_row(row)


@admin.register(McpServer)
class McpServerAdmin(RemoteConnectionAdmin[McpServer]):
    shown = ["tenant", "name", "url", "description", "transport", *AUTH, "tools_ttl_s",
             "call_timeout_s", "tools_fetched_at", "tool_list", *HEALTH]  # fmt: skip
    list_display = ["name", "url", "auth_type", "tool_count", "healthy", "checked_at", "tenant"]

    @admin.display(description="tools")
    def tool_count(self, obj: McpServer) -> int:
        return len(obj.tools)

    @admin.display(description="cached tools")
    def tool_list(self, obj: McpServer) -> Any:
        return _pre([{"name": t["name"], "description": t["description"]} for t in obj.tools])

    def delete_row(self, obj: McpServer) -> None:
        mcp_server_delete(tenant=obj.tenant, row=obj)


@admin.register(A2aAgent)
class A2aAgentAdmin(RemoteConnectionAdmin[A2aAgent]):
    shown = ["tenant", "name", "url", "description", *AUTH, "card_ttl_s", "call_timeout_s",
             "card_fetched_at", "card_shown", *HEALTH]  # fmt: skip
    list_display = ["name", "url", "auth_type", "card_name", "healthy", "checked_at", "tenant"]

    @admin.display(description="card's name")
    def card_name(self, obj: A2aAgent) -> str:
        return str(obj.card.get("name", "")) if obj.card else "-"

    @admin.display(description="cached card")
    def card_shown(self, obj: A2aAgent) -> Any:
        return _pre(card_summary(obj.card))

    def delete_row(self, obj: A2aAgent) -> None:
        a2a_agent_delete(tenant=obj.tenant, row=obj)
