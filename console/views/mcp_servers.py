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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.errors import DomainError, NotFound
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
from connectors.transport import RemoteUnavailable
from console.scope import console_of, console_view
from console.views.common import answer, page
from console.views.connections import (
    Health,
    RemoteAuthForm,
    auth_summary,
    health_of,
    may_write,
    writer_tenant,
)
from tenancy.models import Tenant

WRITE_ROLE = McpServerViewSet.write_role
LIST = "console:mcp-servers"
SERVER = "console:mcp-server"


class McpServerForm(RemoteAuthForm):
    """A server as ``POST /api/v1/mcp-servers`` takes it (an edit sends what changed)."""

    name = forms.CharField(
        label="Name", required=False,
        help_text="Lower-case letters and digits, words joined by _: prompts name it "
        "mcp:<name>, the model sees its tools as <name>__<tool>.",
    )  # fmt: skip
    url = forms.CharField(
        label="URL", required=False,
        help_text="The streamable HTTP endpoint. Private addresses are refused unless the "
        "operator allows them.",
    )  # fmt: skip
    description = forms.CharField(label="Description", required=False)
    tools_ttl_s = forms.IntegerField(
        label="Tool list kept for (seconds)", required=False,
        help_text="How long the tool list is used before it is fetched again; 0: every time.",
    )  # fmt: skip
    call_timeout_s = forms.IntegerField(
        label="Call timeout (seconds)", required=False,
        help_text="How long one call may take.",
    )  # fmt: skip

    def save_data(self, current: Mapping[str, Any] | None) -> dict[str, Any]:
        """What to save, from the cleaned data: for a new server what was filled in (a blank
        name or URL left out, so the service says it is required), for ``current`` (its
        JSON) only what changed."""
        cleaned = self.cleaned_data
        data: dict[str, Any] = {}
        for key in ("name", "url", "description"):
            value = cleaned[key]
            if (current is None and value) or (current is not None and value != current[key]):
                data[key] = value
        for key in ("tools_ttl_s", "call_timeout_s"):
            number = cleaned[key]
            if number is not None and (current is None or number != current[key]):
                data[key] = number
        auth = self.auth_data()
        if auth is not None:
            data["auth"] = auth
        return data


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


def _allowed(request: HttpRequest) -> bool:
    return may_write(request, WRITE_ROLE)


def _admin_tenant(request: HttpRequest) -> Tenant:
    return writer_tenant(request, role=WRITE_ROLE, what="MCP servers")


def _server(tenant: Tenant, name: str) -> McpServer:
    """The tenant's server; another tenant's (or none) is a 404, as in the API."""
    try:
        return mcp_server_get(tenant=tenant, name=name)
    except NotFound as error:
        raise Http404(error.message) from error


def _saved(
    request: HttpRequest, tenant: Tenant, form: McpServerForm, current: McpServer | None
) -> tuple[McpServer | None, int]:
    """Save what ``form`` holds through ``mcp_server_save``: the row, or None and the status
    to answer with the form's errors at their fields."""
    if not form.is_valid():
        return None, 400
    data = form.save_data(mcp_server_json(current) if current is not None else None)
    try:
        row = mcp_server_save(tenant=tenant, data=data, current=current)
    except DomainError as error:
        form.refuse(error)
        return None, error.status
    moved = current is not None and ("url" in data or "auth" in data)
    done = f"Saved MCP server {row.name}."
    if moved:
        done += " Its cached tools and health were cleared: refresh its tools."
    messages.success(request, done)
    return row, 200


def _list_page(
    request: HttpRequest, form: McpServerForm | None = None, status: int = 200
) -> HttpResponse:
    rows = mcp_server_list(tenant=console_of(request).principal.tenant)
    return page(
        request, "console/connections/mcp_servers.html",
        {"servers": [_row(row) for row in rows], "form": form or McpServerForm(),
         "can_admin": _allowed(request), "write_role": WRITE_ROLE, "nav": "agents"},
        status,
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view()
def mcp_servers_page(request: HttpRequest) -> HttpResponse:
    """The servers by name (``GET /api/v1/mcp-servers``); an admin's post adds one (as
    ``POST /api/v1/mcp-servers``), nothing contacted yet."""
    if request.method == "GET":
        return _list_page(request)
    tenant = _admin_tenant(request)
    form = McpServerForm(request.POST)
    row, status = _saved(request, tenant, form, None)
    if row is None:
        return _list_page(request, form, status)
    return redirect(SERVER, name=row.name)


@require_GET
@console_view()
def mcp_server_page(request: HttpRequest, name: str) -> HttpResponse:
    """A server and its cached tools as the model sees them; nothing is fetched here."""
    row = _server(console_of(request).principal.tenant, name)
    return page(
        request, "console/connections/mcp_server.html",
        {"server": _row(row), "tools": _tools(row), "can_admin": _allowed(request),
         "write_role": WRITE_ROLE, "nav": "agents"},
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def mcp_server_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Change a server (as ``PATCH /api/v1/mcp-servers/{name}``, sending what changed: a
    blank secret keeps the stored one, a new URL or auth forgets the cached tools)."""
    tenant = _admin_tenant(request)
    current = _server(tenant, name)
    stored = mcp_server_json(current)["auth"]
    status = 200
    if request.method == "POST":
        form = McpServerForm(request.POST, stored=stored)
        row, status = _saved(request, tenant, form, current)
        if row is not None:
            return redirect(SERVER, name=row.name)
    else:
        initial = {key: getattr(current, key) for key in
                   ("name", "url", "description", "tools_ttl_s", "call_timeout_s")}  # fmt: skip
        form = McpServerForm(stored=stored, initial=initial)
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
    row = _server(_admin_tenant(request), name)
    try:
        listed = tools_fetch(row)
    except RemoteUnavailable:  # recorded as the server's health, with the message shown
        messages.error(request, row.last_error)
    else:
        messages.success(request, f"Listed {len(listed)} tools of MCP server {row.name}.")
    return redirect(SERVER, name=row.name)


@require_POST
@console_view(write=True)
def mcp_server_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a server (``mcp_server_delete``): prompts naming it offer none of its tools."""
    tenant = _admin_tenant(request)
    row = _server(tenant, name)

    def delete() -> dict[str, Any]:
        mcp_server_delete(tenant=tenant, row=row)
        messages.success(request, f"Deleted MCP server {name}.")
        return {"name": name}

    return answer(request, reverse(LIST), delete)


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
