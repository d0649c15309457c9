"""The console's A2A agents pages: the tenant's remote A2A agents with the tool the model calls
(``<name>__send_message``), their auth type, cached card and health; an agent's cached card
(description, version, interface, streaming, skills), with **Refresh card**; adding, editing
and deleting one.

Everything goes through :mod:`connectors.a2a`, as ``/api/v1/a2a-agents`` does, and the same
pieces as the MCP servers pages (:mod:`console.views.connections`): saving through
``a2a_agent_save`` (a refusal shown at the field it names), refreshing through ``card_fetch``
outside any transaction (a failure shown as a message naming the cause, and recorded as the
agent's health). Pages show the cached card and never contact the agent on a read. Only the
role the API requires for writes (admin) may add, edit, refresh or delete an agent: another
role's post is a 403. Secrets are write-only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from common.time import from_us
from connectors.a2a import (
    a2a_agent_delete,
    a2a_agent_get,
    a2a_agent_json,
    a2a_agent_list,
    a2a_agent_save,
    card_fetch,
    card_stale,
    card_summary,
)
from connectors.api import A2aAgentViewSet
from connectors.models import A2aAgent
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

AGENTS = ConnectionKind[A2aAgent](
    noun="A2A agent", plural="A2A agents", offered="card", page="console:a2a-agent",
    listing="console:a2a-agents", write_role=A2aAgentViewSet.write_role,
    get=a2a_agent_get, save=a2a_agent_save, delete=a2a_agent_delete,
)  # fmt: skip


class A2aAgentForm(ConnectionForm):
    """An agent as ``POST /api/v1/a2a-agents`` takes it (an edit sends what changed)."""

    name = name_input(
        "Lower-case letters and digits, words joined by _: prompts name it a2a:<name>, the "
        "model calls it as <name>__send_message."
    )
    url = url_input(
        "Where the agent's card is (<url>/.well-known/agent-card.json). Private addresses are "
        "refused unless the operator allows them."
    )
    description = description_input()
    card_ttl_s = seconds_input(
        "Card kept for (seconds)",
        "How long the card is used before it is fetched again; 0: every time.",
    )
    call_timeout_s = timeout_input()


@dataclass(frozen=True)
class Skill:
    id: str
    name: str
    description: str


@dataclass(frozen=True)
class Card:
    """The cached card as the pages show it (``connectors.a2a.card_summary``)."""

    name: str
    description: str
    version: str
    interface: str | None
    streaming: bool
    skills: list[Skill]


def _card(summary: Mapping[str, Any] | None) -> Card | None:
    if summary is None:
        return None
    return Card(
        name=summary["name"], description=summary["description"], version=summary["version"],
        interface=summary["interface"], streaming=summary["streaming"],
        skills=[Skill(**skill) for skill in summary["skills"]],
    )  # fmt: skip


@dataclass(frozen=True)
class AgentRow:
    """An agent as the pages show it: never its secret. ``card`` is None until one is
    fetched."""

    name: str
    tool: str
    url: str
    description: str
    auth: str
    secret_set: bool
    card: Card | None
    card_fetched_at: dt.datetime | None
    stale: bool
    card_ttl_s: int
    call_timeout_s: int
    health: Health


def _row(row: A2aAgent) -> AgentRow:
    body = a2a_agent_json(row)
    fetched = body["card_fetched_at"]
    return AgentRow(
        name=body["name"], tool=body["tool"], url=body["url"], description=body["description"],
        auth=auth_summary(body["auth"]), secret_set=body["auth"]["secret_set"],
        card=_card(body["card"]), card_fetched_at=from_us(fetched) if fetched else None,
        stale=card_stale(row), card_ttl_s=body["card_ttl_s"],
        call_timeout_s=body["call_timeout_s"], health=health_of(body["health"]),
    )  # fmt: skip


def _list_page(
    request: HttpRequest, form: A2aAgentForm | None = None, status: int = 200
) -> HttpResponse:
    rows = a2a_agent_list(tenant=console_of(request).principal.tenant)
    return page(
        request, "console/connections/a2a_agents.html",
        {"agents": [_row(row) for row in rows], "form": form or A2aAgentForm(),
         "can_admin": AGENTS.may_write(request), "write_role": AGENTS.write_role,
         "nav": "agents"},
        status,
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view()
def a2a_agents_page(request: HttpRequest) -> HttpResponse:
    """The agents by name (``GET /api/v1/a2a-agents``); an admin's post adds one (as
    ``POST /api/v1/a2a-agents``), nothing contacted yet."""
    if request.method == "GET":
        return _list_page(request)
    tenant = AGENTS.writer(request)
    form = A2aAgentForm(request.POST)
    row, status = AGENTS.saved(request, tenant, form, None)
    if row is None:
        return _list_page(request, form, status)
    return redirect(AGENTS.page, name=row.name)


@require_GET
@console_view()
def a2a_agent_page(request: HttpRequest, name: str) -> HttpResponse:
    """An agent and its cached card; nothing is fetched here."""
    row = AGENTS.row(console_of(request).principal.tenant, name)
    return page(
        request, "console/connections/a2a_agent.html",
        {"agent": _row(row), "can_admin": AGENTS.may_write(request),
         "write_role": AGENTS.write_role, "nav": "agents"},
    )  # fmt: skip


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def a2a_agent_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Change an agent (as ``PATCH /api/v1/a2a-agents/{name}``, sending what changed: a
    blank secret keeps the stored one, a new URL or auth forgets the cached card)."""
    tenant = AGENTS.writer(request)
    current = AGENTS.row(tenant, name)
    status = 200
    if request.method == "POST":
        form = A2aAgentForm.editing(current, request.POST)
        row, status = AGENTS.saved(request, tenant, form, current)
        if row is not None:
            return redirect(AGENTS.page, name=row.name)
    else:
        form = A2aAgentForm.editing(current)
    return page(
        request, "console/connections/a2a_agent_edit.html",
        {"agent": _row(current), "form": form, "nav": "agents"}, status,
    )  # fmt: skip


@require_POST
@console_view(write=True)
def a2a_agent_refresh(request: HttpRequest, name: str) -> HttpResponse:
    """Fetch the agent's card now (``card_fetch``, as ``POST …/refresh``; no transaction is
    open across the call). A failure is shown as a message naming its cause, and the cached
    card stays."""
    row = AGENTS.row(AGENTS.writer(request), name)

    def fetch() -> str:
        summary = card_summary(card_fetch(row)) or {}
        skills = len(summary.get("skills", ()))
        return (
            f"Fetched the card of A2A agent {row.name}: {summary.get('name') or 'unnamed'}, "
            f"{skills} skill{'' if skills == 1 else 's'}."
        )

    return AGENTS.refreshed(request, row, fetch)


@require_POST
@console_view(write=True)
def a2a_agent_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    """Delete an agent (``a2a_agent_delete``): prompts naming it offer its tool no more."""
    tenant = AGENTS.writer(request)
    return AGENTS.deleted(request, tenant, AGENTS.row(tenant, name))


# An agent's name may be any word (``new`` too): the list page itself takes the add form's
# post, and an agent's own pages are under its name.
A2A_AGENT = "a2a-agents/<str:name>/"

urlpatterns = [
    path("a2a-agents/", a2a_agents_page, name="a2a-agents"),
    path(A2A_AGENT, a2a_agent_page, name="a2a-agent"),
    path(A2A_AGENT + "edit/", a2a_agent_edit, name="a2a-agent-edit"),
    path(A2A_AGENT + "refresh/", a2a_agent_refresh, name="a2a-agent-refresh"),
    path(A2A_AGENT + "delete/", a2a_agent_delete_view, name="a2a-agent-delete"),
]
