"""The console's MCP servers pages: the tenant's servers with their auth type, tool count and
health; a server's tools as the model sees them (``<server>__<tool>``), with **Refresh
tools**; adding, editing and deleting one.

Everything goes through :mod:`connectors.servers`, as ``/api/v1/mcp-servers`` does: saving
through ``mcp_server_save`` (a refusal shown at the field it names), refreshing through
``tools_fetch`` outside any transaction (a failure shown as a message naming the cause, and
recorded as the server's health). Pages show the cached tool list and never contact the
server on a read. Only the role the API requires for writes (admin) may add, edit, refresh
or delete a server: another role's post is a 403. Secrets are write-only
(:mod:`console.views.connections`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.time import from_us
from connectors.api import McpServerViewSet
from connectors.models import McpServer
from connectors.servers import (
    mcp_server_delete,
    mcp_server_get,
    mcp_server_json,
    mcp_server_list,
    mcp_server_save,
    tools_fetch,
    tools_stale,
)
from connectors.tools import server_tool_names
from console.scope import console_of, console_view
from console.views.common import page
from console.views.connections import (
    ConnectionForm,
    ConnectionKind,
    Health,
    auth_summary,
    description_input,
    health_of,
    name_input,
    seconds_input,
    timeout_input,
    url_input,
)

SERVERS = ConnectionKind[McpServer](
    noun="MCP server", plural="MCP servers", offered="tools", page="console:mcp-server",
    listing="console:mcp-servers", write_role=McpServerViewSet.write_role,
    get=mcp_server_get, save=mcp_server_save, delete=mcp_server_delete,
)  # fmt: skip


class McpServerForm(ConnectionForm):
    """A server as ``POST /api/v1/mcp-servers`` takes it (an edit sends what changed)."""

    name = name_input(
        "Lower-case letters and digits, words joined by _: prompts name it mcp:<name>, the "
        "model sees its tools as <name>__<tool>."
    )
    url = url_input(
        "The streamable HTTP endpoint. Private addresses are refused unless the operator "
        "allows them."
    )
    description = description_input()
    tools_ttl_s = seconds_input(
        "Tool list kept for (seconds)",
        "How long the tool list is used before it is fetched again; 0: every time.",
    )
    call_timeout_s = timeout_input()


@dataclass(frozen=True)
class ServerRow:
    """A server as the pages show it: never its secret."""

    name: str
    url: str
    description: str
    auth: str
    secret_set: bool
    tool_count: int
    tools_fetched_at: dt.datetime | None
    stale: bool
    tools_ttl_s: int
    call_timeout_s: int
    health: Health


def _row(row: McpServer) -> ServerRow:
    body = mcp_server_json(row)
    fetched = body["tools_fetched_at"]
    return ServerRow(
        name=body["name"], url=body["url"], description=body["description"],
        auth=auth_summary(body["auth"]), secret_set=body["auth"]["secret_set"],
        tool_count=body["tool_count"], tools_fetched_at=from_us(fetched) if fetched else None,
        stale=tools_stale(row), tools_ttl_s=body["tools_ttl_s"],
        call_timeout_s=body["call_timeout_s"], health=health_of(body["health"]),
    )  # fmt: skip


@dataclass(frozen=True)
class ToolRow:
    """One cached tool: the name the model calls it by, its name on the server, its
    description and its arguments' JSON Schema, pretty-printed."""

    name: str
    remote_name: str
    description: str
    schema: str


def _tools(row: McpServer) -> list[ToolRow]:
    names = server_tool_names(row.name, row.tools)
    return [
        ToolRow(
            name=names[str(tool["name"])],
            remote_name=str(tool["name"]),
            description=str(tool.get("description") or ""),
            schema=json.dumps(tool.get("input_schema") or {}, indent=2, ensure_ascii=False),
        )
        for tool in row.tools
    ]


def _list_page(
    request: HttpRequest, form: McpServerForm | None = None, status: int = 200
) -> HttpResponse:
    rows = mcp_server_list(tenant=console_of(request).principal.tenant)
    return page(
        request, "console/connections/mcp_servers.html",
        {"servers": [_row(row) for row in rows], "form": form or McpServerForm(),
         "can_admin": SERVERS.may_write(request), "write_role": SERVERS.write_role,
         "nav": "agents"},
        status,
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view()
def mcp_servers_page(request: HttpRequest) -> HttpResponse:
    """The servers by name (``GET /api/v1/mcp-servers``); an admin's post adds one (as
    ``POST /api/v1/mcp-servers``), nothing contacted yet."""
    if request.method == "GET":
        return _list_page(request)
    tenant = SERVERS.writer(request)
    form = McpServerForm(request.POST)
    row, status = SERVERS.saved(request, tenant, form, None)
    if row is None:
        return _list_page(request, form, status)
    return redirect(SERVERS.page, name=row.name)


@require_GET
@console_view()
def mcp_server_page(request: HttpRequest, name: str) -> HttpResponse:
    """A server and its cached tools as the model sees them; nothing is fetched here."""
    row = SERVERS.row(console_of(request).principal.tenant, name)
    return page(
        request, "console/connections/mcp_server.html",
        {"server": _row(row), "tools": _tools(row), "can_admin": SERVERS.may_write(request),
         "write_role": SERVERS.write_role, "nav": "agents"},
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def mcp_server_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Change a server (as ``PATCH /api/v1/mcp-servers/{name}``, sending what changed: a
    blank secret keeps the stored one, a new URL or auth forgets the cached tools)."""
    tenant = SERVERS.writer(request)
    current = SERVERS.row(tenant, name)
    status = 200
    if request.method == "POST":
        form = McpServerForm.editing(current, request.POST)
        row, status = SERVERS.saved(request, tenant, form, current)
        if row is not None:
            return redirect(SERVERS.page, name=row.name)
    else:
        form = McpServerForm.editing(current)
    return page(
        request, "console/connections/mcp_server_edit.html",
        {"server": _row(current), "form": form, "nav": "agents"}, status,
    )  # fmt: skip


@require_POST
@console_view(write=True)
def mcp_server_refresh(request: HttpRequest, name: str) -> HttpResponse:
    """Ask the server for its tools now (``tools_fetch``, as ``POST …/refresh``; no
    transaction is open across the call). A failure is shown as a message naming its cause,
    and the cached list stays."""
    row = SERVERS.row(SERVERS.writer(request), name)

    def fetch() -> str:
        return f"Listed {len(tools_fetch(row))} tools of MCP server {row.name}."

    return SERVERS.refreshed(request, row, fetch)


@require_POST
@console_view(write=True)
def mcp_server_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a server (``mcp_server_delete``): prompts naming it offer none of its tools."""
    tenant = SERVERS.writer(request)
    return SERVERS.deleted(request, tenant, SERVERS.row(tenant, name))


# A server's name may be any word (``new`` too): the list page itself takes the add form's
# post, and a server's own pages are under its name.
MCP_SERVER = "mcp-servers/<str:name>/"

urlpatterns = [
    path("mcp-servers/", mcp_servers_page, name="mcp-servers"),
    path(MCP_SERVER, mcp_server_page, name="mcp-server"),
    path(MCP_SERVER + "edit/", mcp_server_edit, name="mcp-server-edit"),
    path(MCP_SERVER + "refresh/", mcp_server_refresh, name="mcp-server-refresh"),
    path(MCP_SERVER + "delete/", mcp_server_delete_view, name="mcp-server-delete"),
]
