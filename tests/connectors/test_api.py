"""MCP servers over the REST API (connectors.api): registered with a write-only secret, their
tools listed from a real MCP server (the ``mcp`` SDK's, on loopback, requiring a bearer),
their URL judged by the egress guard, bad input refused naming the field, and invisible to
another tenant.

The tests that contact the server commit their rows (``transaction=True``): a listing is
never fetched inside a transaction, and pytest-django runs every other test inside one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from connectors.models import McpServer
from tenancy.models import Role, Tenant
from tests.connectors.mcp_peer import CLIENT_ID, CLIENT_SECRET, TOKEN, Peer, mcp_peer

BASE = "/api/v1/mcp-servers"
TOOL_NAMES = [
    "weather__forecast", "weather__add", "weather__wire_money", "weather__explode",
    "weather__picture", "weather__essay",
]  # fmt: skip


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with mcp_peer() as running:
        yield running


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


def _register(api: APIClient, peer: Peer, **changes: Any) -> Any:
    body = {"name": "weather", "url": peer.url, "auth": {"type": "bearer", "token": TOKEN},
            **changes}  # fmt: skip
    return api.post(BASE, body, format="json")


def _error(response: Any) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.django_db(transaction=True)
def test_a_registered_server_lists_its_tools_and_never_shows_its_token(
    admin: APIClient, peer: Peer
) -> None:
    created = _register(admin, peer, description="Forecasts")
    listed = admin.get(BASE)
    tools = admin.get(f"{BASE}/weather/tools")
    detail = admin.get(f"{BASE}/weather")

    assert created.status_code == 201, created.json()
    assert created.json()["auth"] == {"type": "bearer", "secret_set": True}
    assert [item["name"] for item in listed.json()["results"]] == ["weather"]
    assert tools.status_code == 200, tools.json()
    body = tools.json()
    assert [tool["name"] for tool in body["tools"]] == TOOL_NAMES
    assert body["tools"][1]["remote_name"] == "add"
    assert body["tools"][1]["input_schema"]["required"] == ["a", "b"]
    assert body["error"] is None
    assert body["stale"] is False
    assert body["health"]["ok"] is True
    assert detail.json()["tool_count"] == 6
    assert detail.json()["health"]["ok"] is True
    for response in (created, listed, tools, detail):
        assert TOKEN not in response.content.decode()
    row = McpServer.objects.get(name="weather")
    assert row.secret_encrypted is not None
    assert TOKEN.encode() not in bytes(row.secret_encrypted)


@pytest.mark.django_db(transaction=True)
def test_a_wrong_token_is_reported_as_refused_credentials(admin: APIClient, peer: Peer) -> None:
    _register(admin, peer, auth={"type": "bearer", "token": "not-the-token"})

    refreshed = admin.post(f"{BASE}/weather/refresh")

    assert refreshed.status_code == 200
    body = refreshed.json()
    assert body["tools"] == []
    assert body["error"] == (
        "MCP server 'weather' could not be reached: the server refused the credentials (HTTP 401)"
    )
    assert body["health"]["ok"] is False
    assert body["health"]["last_error"] == body["error"]


@pytest.mark.django_db(transaction=True)
def test_a_change_that_keeps_the_auth_type_keeps_the_stored_token(
    admin: APIClient, peer: Peer
) -> None:
    _register(admin, peer)
    changed = admin.patch(
        f"{BASE}/weather", {"auth": {"type": "bearer"}, "description": "new"}, format="json"
    )
    refreshed = admin.post(f"{BASE}/weather/refresh")

    assert changed.status_code == 200, changed.json()
    assert changed.json()["auth"]["secret_set"] is True
    assert [tool["remote_name"] for tool in refreshed.json()["tools"]][:2] == ["forecast", "add"]


@pytest.mark.django_db(transaction=True)
def test_the_egress_guard_refuses_a_private_address_when_the_server_is_contacted(
    admin: APIClient, peer: Peer, settings: Settings
) -> None:
    _register(admin, peer)
    settings.EGRESS_ALLOWED_NETWORKS = []

    refreshed = admin.post(f"{BASE}/weather/refresh")

    assert refreshed.json()["error"] == (
        "MCP server 'weather' may not be reached: 127.0.0.1 is a loopback address: outbound "
        "calls to tenant-chosen URLs may not reach loopback addresses (allow it with "
        "EGRESS_ALLOWED_NETWORKS)"
    )
    assert peer.ran("forecast") == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/mcp",
        "http://localhost/mcp",
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
        "http://[::1]/mcp",
    ],
)
@pytest.mark.django_db
def test_a_private_url_is_refused_on_save_without_the_operators_allowance(
    admin: APIClient, settings: Settings, url: str
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = []
    settings.EGRESS_ALLOWED_HOSTS = []

    response = admin.post(BASE, {"name": "inside", "url": url}, format="json")

    assert response.status_code == 400
    assert _error(response)["field"] == "url"
    assert "tenant-chosen URLs may not reach" in _error(response)["message"]
    assert not McpServer.objects.exists()


@pytest.mark.django_db
def test_the_operators_allowance_admits_a_private_url(admin: APIClient, settings: Settings) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["10.0.0.0/8"]

    response = admin.post(BASE, {"name": "inside", "url": "http://10.1.2.3/mcp"}, format="json")

    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"url": "https://mcp.example.com/mcp"}, "name", "name is required"),
        ({"name": "weather"}, "url", "url is required"),
        ({"name": "Weather", "url": "https://mcp.example.com/mcp"}, "name", None),
        ({"name": "a__b", "url": "https://mcp.example.com/mcp"}, "name", None),
        ({"name": "w", "url": "ftp://mcp.example.com/mcp"}, "url",
         "the URL must use http or https, not ftp"),
        ({"name": "w", "url": "https://mcp.example.com/mcp", "auth": {"type": "bearer"}},
         "auth.token", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp",
          "auth": {"type": "header", "header_name": "Host", "header_value": "x"}},
         "auth.header_name", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp",
          "auth": {"type": "bearer", "token": "t", "client_id": "c"}}, "auth.client_id", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp", "auth": {"type": "basic"}},
         "auth.type", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp",
          "auth": {"type": "oauth_client_credentials", "client_id": "c",
                   "client_secret": "s", "token_url": "http://10.0.0.1/token"}},
         "auth.token_url", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp", "transport": "stdio"},
         "transport", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp", "tools_ttl_s": -1},
         "tools_ttl_s", None),
        ({"name": "w", "url": "https://mcp.example.com/mcp", "colour": "red"}, "colour",
         "unknown field 'colour' (known: name, url, description, transport, auth, "
         "tools_ttl_s, call_timeout_s)"),
    ],
)  # fmt: skip
@pytest.mark.django_db
def test_bad_input_is_a_400_naming_the_field(
    admin: APIClient, settings: Settings, body: dict[str, Any], field: str, message: str | None
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = []

    response = admin.post(BASE, body, format="json")

    assert response.status_code == 400, response.json()
    assert _error(response)["field"] == field
    if message is not None:
        assert _error(response)["message"] == message
    assert not McpServer.objects.exists()


@pytest.mark.django_db
def test_a_taken_name_is_a_409(admin: APIClient) -> None:
    body = {"name": "weather", "url": "https://mcp.example.com/mcp"}
    admin.post(BASE, body, format="json")

    again = admin.post(BASE, body, format="json")

    assert again.status_code == 409
    assert _error(again)["field"] == "name"


@pytest.mark.django_db
def test_members_read_servers_but_only_admins_write_them(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    member = client_for(tenant, Role.MEMBER)
    body = {"name": "weather", "url": "https://mcp.example.com/mcp"}

    refused = member.post(BASE, body, format="json")
    client_for(tenant, Role.ADMIN).post(BASE, body, format="json")
    read = member.get(f"{BASE}/weather")

    assert refused.status_code == 403
    assert read.status_code == 200


@pytest.mark.django_db
def test_another_tenant_can_neither_see_nor_use_the_server(
    admin: APIClient, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin.post(BASE, {"name": "weather", "url": "https://mcp.example.com/mcp"}, format="json")
    other = client_for(other_tenant, Role.ADMIN)
    model = {"name": "m", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": [{"when": {}, "respond": {"text": "ok"}}]}}  # fmt: skip
    other.post("/api/v1/models", model, format="json")

    listed = other.get(BASE)
    answers = [
        other.get(f"{BASE}/weather"),
        other.get(f"{BASE}/weather/tools"),
        other.post(f"{BASE}/weather/refresh"),
        other.patch(f"{BASE}/weather", {"description": "mine"}, format="json"),
        other.delete(f"{BASE}/weather"),
    ]
    prompt = other.post(
        "/api/v1/prompts",
        {"name": "p", "tool_description": "p", "prompt": "hi", "model": "m",
         "tools": ["mcp:weather/forecast"]},
        format="json",
    )  # fmt: skip

    assert listed.json()["results"] == []
    assert [answer.status_code for answer in answers] == [404, 404, 404, 404, 404]
    assert prompt.status_code == 400
    assert _error(prompt)["field"] == "tools[0]"
    assert "no MCP server named 'weather'" in _error(prompt)["message"]
    assert McpServer.objects.get(name="weather").description == ""


@pytest.mark.django_db(transaction=True)
def test_a_host_that_does_not_resolve_is_reported_in_the_listing(admin: APIClient) -> None:
    admin.post(BASE, {"name": "nowhere", "url": "https://mcp.invalid/mcp"}, format="json")

    tools = admin.get(f"{BASE}/nowhere/tools")

    assert tools.status_code == 200
    assert tools.json()["tools"] == []
    assert tools.json()["error"].startswith("MCP server 'nowhere' could not be reached: ")
    assert admin.get(f"{BASE}/nowhere").json()["health"]["ok"] is False


@pytest.mark.django_db(transaction=True)
def test_oauth_client_credentials_fetch_a_token_that_calls_carry(
    admin: APIClient, peer: Peer
) -> None:
    auth = {
        "type": "oauth_client_credentials", "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET, "token_url": peer.token_url, "scopes": "tools",
    }  # fmt: skip
    created = _register(admin, peer, auth=auth)

    tools = admin.get(f"{BASE}/weather/tools")

    assert created.status_code == 201, created.json()
    assert created.json()["auth"] == {
        "type": "oauth_client_credentials", "secret_set": True, "client_id": CLIENT_ID,
        "token_url": peer.token_url, "scopes": "tools",
    }  # fmt: skip
    assert CLIENT_SECRET not in created.content.decode()
    assert tools.json()["error"] is None
    assert len(tools.json()["tools"]) == 6
    assert peer.token_requests[-1] == {"grant_type": "client_credentials", "scope": "tools"}
    row = McpServer.objects.get(name="weather")
    assert CLIENT_SECRET.encode() not in bytes(row.secret_encrypted or b"")


@pytest.mark.django_db(transaction=True)
def test_a_refused_client_secret_is_reported(admin: APIClient, peer: Peer) -> None:
    auth = {"type": "oauth_client_credentials", "client_id": CLIENT_ID,
            "client_secret": "wrong", "token_url": peer.token_url}  # fmt: skip
    _register(admin, peer, auth=auth)

    refreshed = admin.post(f"{BASE}/weather/refresh")

    assert refreshed.json()["error"] == (
        "MCP server 'weather' could not be reached: the token URL refused the client "
        "credentials (HTTP 401)"
    )
