"""A tenant's MCP servers: saving them (the URL through the egress rules, the secret sealed:
:mod:`connectors.remote`), reading them, and their cached tool lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.db import connection, transaction

from common.connections import connection_release
from common.errors import ValidationFailed
from common.time import now, to_us
from connectors.models import McpServer, McpTransport
from connectors.remote import (
    MAX_TTL_S,
    Kind,
    auth_json,
    cache_stale,
    connection_get,
    connection_list,
    connection_save,
    contact_failed,
    contact_recorded,
    endpoint_of,
    health_json,
    int_field,
    us,
)
from connectors.transport import RemoteUnavailable
from tenancy.models import Tenant

if TYPE_CHECKING:
    from connectors.client import ListedTool

MAX_SERVERS: Final = 50
LIST_TIMEOUT_S: Final = 20.0
FIELDS: Final = ("name", "url", "description", "transport", "auth", "tools_ttl_s",
                 "call_timeout_s")  # fmt: skip


USAGE: Final = "it becomes the prefix of the tool names the model sees (<name>__<tool>)"


def server_name(row: McpServer) -> str:
    """How messages name the server."""
    return f"MCP server {row.name!r}"


def _apply(row: McpServer, body: Mapping[str, Any]) -> None:
    if "transport" in body and body["transport"] not in McpTransport.values:
        raise ValidationFailed(
            f"transport must be one of {', '.join(McpTransport.values)}", field="transport"
        )
    if "tools_ttl_s" in body:
        row.tools_ttl_s = int_field(body["tools_ttl_s"], "tools_ttl_s", low=0, high=MAX_TTL_S)


def _forget(row: McpServer) -> None:
    row.tools, row.tools_fetched_at = [], None


SERVERS: Final = Kind(McpServer, FIELDS, USAGE, "MCP server", MAX_SERVERS, _apply, _forget)


# Reading -----------------------------------------------------------------------------------


def mcp_server_get(*, tenant: Tenant, name: str) -> McpServer:
    """The tenant's server ``name``; NotFound otherwise (another tenant's too)."""
    return connection_get(SERVERS, tenant=tenant, name=name)


def mcp_server_list(*, tenant: Tenant) -> list[McpServer]:
    return connection_list(SERVERS, tenant=tenant)


def tools_stale(row: McpServer) -> bool:
    """Whether the cached tool list is missing or older than the server's TTL."""
    return cache_stale(row.tools_fetched_at, row.tools_ttl_s)


def mcp_server_json(row: McpServer) -> dict[str, Any]:
    """A server as answers show it: its auth's type and public parts, whether a secret is
    stored, never the secret."""
    return {
        "id": str(row.id),
        "name": row.name,
        "url": row.url,
        "description": row.description,
        "transport": row.transport,
        "auth": auth_json(row),
        "tools_ttl_s": row.tools_ttl_s,
        "call_timeout_s": row.call_timeout_s,
        "tool_count": len(row.tools),
        "tools_fetched_at": us(row.tools_fetched_at),
        "health": health_json(row),
        "created_at": to_us(row.created_at),
        "updated_at": to_us(row.updated_at),
    }


# Saving ------------------------------------------------------------------------------------


@transaction.atomic
def mcp_server_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: McpServer | None = None
) -> McpServer:
    """Create or change a server (:func:`connectors.remote.connection_save`); a new URL or
    auth drops its cached tool list too."""
    return connection_save(SERVERS, tenant=tenant, data=data, current=current)


def mcp_server_delete(*, tenant: Tenant, row: McpServer) -> None:
    """Delete a server. Prompts that name it keep their entries: a flow offers no tool for
    them, and the next definition write must drop them (validation names the server)."""
    McpServer.objects.for_tenant(tenant).filter(pk=row.pk).delete()


# Contacting ----------------------------------------------------------------------------------


def tools_fetch(row: McpServer) -> list[ListedTool]:
    """Ask the server for its tools now, store them as the cache and record the contact.
    Raises McpUnavailable (recorded as the health's error). Must not run inside a
    transaction: the server may take its time."""
    if connection.in_atomic_block:
        raise RuntimeError("tools_fetch would hold a transaction open across a remote call")
    connection_release()  # no connection held while the other side takes its time
    from connectors import client  # the MCP SDK loads where a server is contacted

    try:
        listed = client.tools_list(
            endpoint_of(row), timeout=float(min(row.call_timeout_s, LIST_TIMEOUT_S))
        )
    except RemoteUnavailable as error:
        contact_failed(row, error, what=server_name(row))
        raise
    moment = now()
    row.tools = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in listed
    ]
    row.tools_fetched_at = moment
    McpServer.objects.filter(pk=row.pk).update(tools=row.tools, tools_fetched_at=moment)
    contact_recorded(row, error=None)
    return listed


@dataclass(frozen=True)
class ToolListing:
    """A server's tools as the cache holds them after :func:`tools_current`: ``error`` says
    why they could not be refreshed (then they are the stale ones, or none)."""

    server: McpServer
    tools: list[dict[str, Any]]
    error: str | None = None

    @property
    def stale(self) -> bool:
        return tools_stale(self.server)


def tools_current(row: McpServer, *, refresh: bool = False) -> ToolListing:
    """The server's tools: the cache while fresh (unless ``refresh``), else fetched again; when
    fetching fails, the stale cache with the reason. Inside a transaction nothing is fetched
    (a remote call may not hold one open): the cache is answered as it is."""
    if not (refresh or tools_stale(row)) or connection.in_atomic_block:
        return ToolListing(row, list(row.tools))
    try:
        tools_fetch(row)
    except RemoteUnavailable:
        return ToolListing(row, list(row.tools), row.last_error)
    return ToolListing(row, list(row.tools))


def tool_listing_json(listing: ToolListing, *, names: Mapping[str, str]) -> dict[str, Any]:
    """``GET /mcp-servers/{name}/tools``: the tools with the names the model sees them by."""
    row = listing.server
    return {
        "server": row.name,
        "fetched_at": us(row.tools_fetched_at),
        "stale": listing.stale,
        "error": listing.error,
        "tools": [
            {
                "name": names.get(tool["name"]),
                "remote_name": tool["name"],
                "description": tool["description"],
                "input_schema": tool["input_schema"],
            }
            for tool in listing.tools
        ],
        "health": health_json(row),
    }
