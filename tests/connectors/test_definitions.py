"""What a prompt's ``tools[]`` may say of remote tools (agents.validation through
agents.remote_refs and connectors.tools): a known MCP server's tools, by server or one by one,
and a known A2A agent, with ``approval``; an unknown server, tool or agent, a key that does
not apply, or a name the model would see twice is a 400 naming the entry. Judged from the
servers' cached lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from common.time import now
from connectors.a2a import a2a_agent_save
from connectors.servers import mcp_server_save
from tenancy.models import Role, Tenant

pytestmark = pytest.mark.django_db

LISTED = [
    {"name": "forecast", "description": "The forecast.", "input_schema": {"type": "object"}},
    {"name": "add", "description": "Add.", "input_schema": {"type": "object"}},
]


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    server = mcp_server_save(
        tenant=tenant, data={"name": "weather", "url": "https://mcp.example.com/mcp"}
    )
    server.tools, server.tools_fetched_at = LISTED, now()
    server.save()
    mcp_server_save(tenant=tenant, data={"name": "unlisted", "url": "https://mcp.example.org/"})
    a2a_agent_save(tenant=tenant, data={"name": "translator", "url": "https://a2a.example.com/"})
    api = client_for(tenant, Role.ADMIN)
    model = {"name": "m", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": [{"when": {}, "respond": {"text": "ok"}}]}}  # fmt: skip
    assert api.post("/api/v1/models", model, format="json").status_code == 201
    return api


def _prompt(api: APIClient, tools: list[Any]) -> Any:
    body = {"name": "p", "tool_description": "p", "prompt": "hi", "model": "m", "tools": tools}
    return api.post("/api/v1/prompts", body, format="json")


@pytest.mark.parametrize(
    "tools",
    [
        ["mcp:weather"],
        ["mcp:weather/forecast", "mcp:weather/add"],
        [{"name": "mcp:weather", "approval": "ask"}],
        [{"name": "mcp:weather/add", "approval": {"decision": "ask",
                                                 "when": {">": [{"var": "a"}, 10]}}}],
        ["mcp:unlisted/anything"],  # never listed: judged when it is
        ["a2a:translator", "mcp:weather"],
        [{"name": "a2a:translator", "approval": "ask"}],
    ],
)  # fmt: skip
def test_references_to_a_known_servers_tools_are_accepted(
    admin: APIClient, tools: list[Any]
) -> None:
    response = _prompt(admin, tools)

    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(
    ("tools", "field", "message"),
    [
        (["mcp:rain"], "tools[0]", "no MCP server named 'rain' (this tenant's: unlisted, weather)"),
        (["mcp:weather/nope"], "tools[0]",
         "MCP server 'weather' has no tool 'nope' (its tools: add, forecast; refresh its list "
         "with POST /api/v1/mcp-servers/weather/refresh if it changed)"),
        (["mcp:"], "tools[0]", "'mcp:' names no server: write mcp:<server> or mcp:<server>/<tool>"),
        ([{"name": "mcp:weather", "env": {"KEY": "v"}}], "tools[0].env",
         "env does not apply: 'mcp:weather' is a remote tool"),
        (["mcp:weather", "mcp:weather/add"], "tools[1]",
         "'mcp:weather/add' offers the tool 'weather__add', which 'mcp:weather' offers too: "
         "the model cannot tell them apart"),
        ([{"name": "mcp:weather", "approval": "perhaps"}], "tools[0].approval", None),
        (["a2a:scribe"], "tools[0]", "no A2A agent named 'scribe' (this tenant's: translator)"),
        (["a2a:translator/send"], "tools[0]",
         "'a2a:translator/send': write a2a:<agent>, the name of one of this tenant's A2A agents"),
        (["a2a:translator", "a2a:translator"], "tools[1]", None),
    ],
)  # fmt: skip
def test_bad_references_are_a_400_naming_the_entry(
    admin: APIClient, tools: list[Any], field: str, message: str | None
) -> None:
    response = _prompt(admin, tools)

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["field"] == field
    if message is not None:
        assert error["message"].startswith(f"prompt 'p': {field}: {message}")
