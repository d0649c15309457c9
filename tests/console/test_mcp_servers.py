"""The MCP servers pages without a browser: the tenant's servers listed with their auth type,
tool count and health; a server's tools as the model sees them; **Refresh tools** against a
real MCP server on loopback (``tests/connectors/mcp_peer.py``) and against a dead one;
adding and editing through ``mcp_server_save``, each refusal at its field; secrets never
rendered; another tenant's server a 404 and a non-admin's write a 403, with no side effect.

Tests that contact a server commit their rows (``transaction=True``): the refresh never runs
inside a transaction, and pytest-django runs every other test inside one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse
from pytest_django.fixtures import Settings

from connectors.models import McpServer
from connectors.remote import endpoint_of
from connectors.servers import mcp_server_save, tools_fetch
from connectors.transport import RemoteUnavailable
from tenancy.models import Tenant
from tests.connectors.mcp_peer import CLIENT_SECRET, TOKEN, Peer, mcp_peer
from tests.console.conftest import Team, client_of, team_make
from tests.console.connection_pages import (
    connection_form,
    dead_url,
    field_html,
    flash,
    html_of,
    main_of,
    row_html,
)
from tests.factories import make_tenant

LIST = reverse("console:mcp-servers")
HEADER_SECRET = "sentinel-header-value-77c1d0"
NEW_TOKEN = "sentinel-new-bearer-0f3a9b"
TOOL_NAMES = [
    "weather__forecast", "weather__add", "weather__wire_money", "weather__explode",
    "weather__picture", "weather__essay",
]  # fmt: skip
HEADER_AUTH = {"type": "header", "header_name": "X-Api-Key", "header_value": HEADER_SECRET}
OAUTH = {"type": "oauth_client_credentials", "client_id": "platform",
         "client_secret": CLIENT_SECRET, "token_url": "https://auth.example.com/t"}  # fmt: skip


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with mcp_peer() as running:
        yield running


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


def _store(tenant: Tenant, name: str, url: str, **fields: Any) -> McpServer:
    return mcp_server_save(tenant=tenant, data={"name": name, "url": url, **fields})


def _weather(tenant: Tenant, peer: Peer, token: str = TOKEN) -> McpServer:
    return _store(tenant, "weather", peer.url, auth={"type": "bearer", "token": token})


def _form(**fields: Any) -> dict[str, Any]:
    return connection_form("tools_ttl_s", **fields)


def _server_url(view: str, name: str) -> str:
    return reverse(f"console:{view}", args=[name])


# Listing -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_list_shows_each_servers_auth_tool_count_and_health(peer: Peer) -> None:
    team = team_make()
    tools_fetch(_weather(team.tenant, peer))
    dead = _store(team.tenant, "dead", dead_url("/mcp"), description="gone")
    with pytest.raises(RemoteUnavailable):
        tools_fetch(dead)
    _store(team.tenant, "fresh", "https://mcp.example.com/mcp", auth=HEADER_AUTH)

    html = html_of(client_of(team.reader), LIST)

    weather = row_html(html, "weather")
    assert "<code>" + peer.url + "</code>" in weather
    assert "Bearer token" in weather
    assert '<td class="tool-count">6</td>' in weather
    assert 'data-health="ok"' in weather
    assert "<time datetime=" in weather.split('class="tool-count"')[1]
    failing = row_html(html, "dead")
    assert '<td class="tool-count">0</td>' in failing
    assert 'data-health="failing"' in failing
    assert "MCP server &#x27;dead&#x27; could not be reached: " in failing
    assert "gone" in failing
    fresh = row_html(html, "fresh")
    assert "Header (X-Api-Key)" in fresh
    assert 'data-health="never"' in fresh
    assert "never contacted" in fresh
    assert fresh.endswith('<td><span class="muted">never</span></td>\n      ')
    assert html.index('data-name="dead"') < html.index('data-name="fresh"')
    assert html.index('data-name="fresh"') < html.index('data-name="weather"')
    assert TOKEN not in html
    assert HEADER_SECRET not in html
    assert "Only a tenant admin adds, edits, refreshes and deletes MCP servers." in html
    assert 'method="post"' not in main_of(html)


def test_the_agents_pages_link_to_the_mcp_servers(team: Team) -> None:
    agents = html_of(client_of(team.reader), reverse("console:agents"))
    servers = html_of(client_of(team.reader), LIST)

    assert f'href="{LIST}"' in agents
    assert f'href="{LIST}" aria-current="page">MCP servers</a>' in servers
    assert "<title>MCP servers · " in servers


# A server's page -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_server_page_lists_its_tools_by_the_names_the_model_sees(peer: Peer) -> None:
    team = team_make()
    tools_fetch(_weather(team.tenant, peer))

    html = html_of(client_of(team.member), _server_url("mcp-server", "weather"))

    shown = re.findall(r'<article class="entry" data-tool="([^"]+)"', html)
    assert shown == TOOL_NAMES
    add = html.split('data-tool="weather__add"')[1].split("</article>")[0]
    assert '<code class="remote-name">add</code>' in add
    assert "<p>Add two integers.</p>" in add
    assert '"required": [\n    "a",\n    "b"\n  ]' in add.replace("&quot;", '"')
    assert "Tools (6)" in html
    assert 'data-health="ok"' in html
    assert "Refresh tools" not in html
    assert TOKEN not in html


def test_a_server_never_listed_says_so_and_is_not_contacted(team: Team) -> None:
    _store(team.tenant, "weather", "https://mcp.example.com/mcp")

    html = html_of(client_of(team.admin), _server_url("mcp-server", "weather"))

    assert "Not listed yet. <strong>Refresh tools</strong> asks the server." in html
    assert 'data-health="never"' in html
    assert McpServer.objects.get(name="weather").checked_at is None


# Refreshing ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_refresh_against_the_live_server_lists_its_tools(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    added = client.post(LIST, _form(name="weather", url=peer.url, auth_type="bearer",
                                     auth_token=TOKEN))  # fmt: skip
    before = html_of(client, _server_url("mcp-server", "weather"))

    refreshed = client.post(_server_url("mcp-server-refresh", "weather"), follow=True)

    assert added.status_code == 302
    assert added["Location"] == _server_url("mcp-server", "weather")
    assert "Saved MCP server weather." in before
    assert "Not listed yet." in before
    assert refreshed.redirect_chain == [(_server_url("mcp-server", "weather"), 302)]
    html = refreshed.content.decode()
    assert "Listed 6 tools of MCP server weather." in flash(html)
    assert re.findall(r'data-tool="([^"]+)"', html) == TOOL_NAMES
    assert 'data-health="ok"' in html
    row = McpServer.objects.get(name="weather")
    assert [tool["name"] for tool in row.tools][:2] == ["forecast", "add"]
    assert row.tools_fetched_at is not None
    assert TOKEN not in html


@pytest.mark.django_db(transaction=True)
def test_refresh_against_a_dead_server_shows_the_cause_and_records_it(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    _store(team.tenant, "dead", dead_url("/mcp"))
    _weather(team.tenant, peer, token="not-the-token")

    dead = client.post(_server_url("mcp-server-refresh", "dead"), follow=True)
    refused = client.post(_server_url("mcp-server-refresh", "weather"), follow=True)

    assert dead.status_code == 200
    message = flash(dead.content.decode())
    assert 'class="error"' in message
    assert "MCP server &#x27;dead&#x27; could not be reached: " in message
    assert 'data-health="failing"' in dead.content.decode()
    row = McpServer.objects.get(name="dead")
    assert row.last_error.startswith("MCP server 'dead' could not be reached: ")
    assert row.last_error_at is not None
    assert refused.status_code == 200
    assert (
        "MCP server &#x27;weather&#x27; could not be reached: the server refused the "
        "credentials (HTTP 401)"
    ) in flash(refused.content.decode())
    assert "not-the-token" not in refused.content.decode()


# Adding and editing --------------------------------------------------------------------------


def test_a_refused_server_is_shown_at_its_field_and_nothing_is_stored(
    team: Team, settings: Settings
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = []
    settings.EGRESS_ALLOWED_HOSTS = []
    client = client_of(team.admin)
    _store(team.tenant, "taken", "https://mcp.example.com/mcp")

    metadata = client.post(LIST, _form(name="meta", url="http://169.254.169.254/mcp",
                                       auth_type="bearer", auth_token=TOKEN))  # fmt: skip
    no_url = client.post(LIST, _form(name="nourl"))
    bad_name = client.post(LIST, _form(name="Not-Snake", url="https://mcp.example.com/mcp"))
    taken = client.post(LIST, _form(name="taken", url="https://mcp.example.com/mcp"))
    no_token = client.post(LIST, _form(name="tokenless", url="https://mcp.example.com/mcp",
                                       auth_type="bearer"))  # fmt: skip
    reserved = client.post(LIST, _form(name="hdr", url="https://mcp.example.com/mcp",
                                       auth_type="header", auth_header_name="Host",
                                       auth_header_value=HEADER_SECRET))  # fmt: skip

    assert metadata.status_code == 400
    html = metadata.content.decode()
    assert "metadata" in field_html(html, "url")
    assert 'value="http://169.254.169.254/mcp"' in field_html(html, "url")
    assert "The MCP server was not saved; see the fields marked below." in html
    assert TOKEN not in html
    assert no_url.status_code == 400
    assert "url is required" in field_html(no_url.content.decode(), "url")
    assert bad_name.status_code == 400
    assert "lower-case letters and digits" in field_html(bad_name.content.decode(), "name")
    assert taken.status_code == 409
    assert "already exists" in field_html(taken.content.decode(), "name")
    assert no_token.status_code == 400
    assert "auth.token must be a non-empty string" in field_html(
        no_token.content.decode(), "auth_token"
    )
    assert reserved.status_code == 400
    assert "not a header name calls may set" in field_html(
        reserved.content.decode(), "auth_header_name"
    )
    assert HEADER_SECRET not in reserved.content.decode()
    assert list(McpServer.objects.for_tenant(team.tenant).values_list("name", flat=True)) == [
        "taken"
    ]


def test_only_the_chosen_auth_types_fields_are_saved(team: Team) -> None:
    client = client_of(team.admin)

    answer = client.post(LIST, _form(
        name="weather", url="https://mcp.example.com/mcp", auth_type="oauth_client_credentials",
        auth_client_id="platform", auth_token_url="https://auth.example.com/token",
        auth_scopes="tools", auth_client_secret=CLIENT_SECRET, auth_token=TOKEN,
        auth_header_name="X-Ignored", tools_ttl_s="60", call_timeout_s="30",
    ))  # fmt: skip

    assert answer.status_code == 302
    row = McpServer.objects.get(name="weather")
    assert (row.auth_type, row.oauth_client_id, row.oauth_token_url, row.oauth_scopes) == (
        "oauth_client_credentials", "platform", "https://auth.example.com/token", "tools",
    )  # fmt: skip
    assert row.auth_header_name == ""
    assert (row.tools_ttl_s, row.call_timeout_s) == (60, 30)
    assert row.has_secret


@pytest.mark.django_db(transaction=True)
def test_an_edit_leaving_the_secret_blank_keeps_it_and_the_cached_tools(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    tools_fetch(_weather(team.tenant, peer))
    edit = _server_url("mcp-server-edit", "weather")
    page = html_of(client, edit)

    kept = client.post(edit, _form(name="weather", url=peer.url, description="Forecasts",
                                   auth_type="bearer", tools_ttl_s="300",
                                   call_timeout_s="60"))  # fmt: skip
    row = McpServer.objects.get(name="weather")
    refreshed = client.post(_server_url("mcp-server-refresh", "weather"), follow=True)

    assert "A secret is stored: leave this blank to keep it." in field_html(page, "auth_token")
    assert 'value="' not in field_html(page, "auth_token").split('name="auth_token"')[1][:80]
    assert 'value="weather"' in field_html(page, "name")
    assert kept.status_code == 302
    assert row.description == "Forecasts"
    assert endpoint_of(row).headers == {"Authorization": f"Bearer {TOKEN}"}
    assert len(row.tools) == 6  # auth unchanged: the cache stays
    assert "Listed 6 tools of MCP server weather." in flash(refreshed.content.decode())
    assert TOKEN not in page


def test_an_edit_with_a_new_secret_replaces_it_and_forgets_the_cached_tools(team: Team) -> None:
    client = client_of(team.admin)
    row = _store(team.tenant, "weather", "https://mcp.example.com/mcp",
                 auth={"type": "bearer", "token": TOKEN})  # fmt: skip
    McpServer.objects.filter(pk=row.pk).update(tools=[{"name": "t", "description": "",
                                                        "input_schema": {}}])  # fmt: skip

    renamed = client.post(_server_url("mcp-server-edit", "weather"), _form(
        name="forecasts", url="https://mcp.example.com/mcp", auth_type="bearer",
        auth_token=NEW_TOKEN,
    ), follow=True)  # fmt: skip

    row = McpServer.objects.get(pk=row.pk)
    assert renamed.redirect_chain == [(_server_url("mcp-server", "forecasts"), 302)]
    assert "Its cached tools and health were cleared" in flash(renamed.content.decode())
    assert row.name == "forecasts"
    assert endpoint_of(row).headers == {"Authorization": f"Bearer {NEW_TOKEN}"}
    assert row.tools == []
    assert NEW_TOKEN not in renamed.content.decode()


def test_a_refused_edit_is_shown_at_its_field_and_changes_nothing(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant, "weather", "https://mcp.example.com/mcp",
           auth={"type": "bearer", "token": TOKEN})  # fmt: skip

    switched = client.post(_server_url("mcp-server-edit", "weather"), _form(
        name="weather", url="https://mcp.example.com/mcp", auth_type="header",
        auth_header_name="X-Api-Key",
    ))  # fmt: skip

    assert switched.status_code == 400
    assert "auth.header_value must be a non-empty string" in field_html(
        switched.content.decode(), "auth_header_value"
    )
    row = McpServer.objects.get(name="weather")
    assert row.auth_type == "bearer"
    assert endpoint_of(row).headers == {"Authorization": f"Bearer {TOKEN}"}


def test_no_page_renders_a_secret(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant, "bearer", "https://mcp.example.com/mcp",
           auth={"type": "bearer", "token": TOKEN})  # fmt: skip
    _store(team.tenant, "header", "https://mcp.example.com/mcp", auth=HEADER_AUTH)
    _store(team.tenant, "oauth", "https://mcp.example.com/mcp", auth=OAUTH)

    pages = [html_of(client, LIST)]
    for name in ("bearer", "header", "oauth"):
        pages.append(html_of(client, _server_url("mcp-server", name)))
        pages.append(html_of(client, _server_url("mcp-server-edit", name)))
    refused = client.post(_server_url("mcp-server-edit", "oauth"), _form(
        name="oauth", url="not a url", auth_type="oauth_client_credentials",
        auth_client_id="platform", auth_token_url="https://auth.example.com/t",
        auth_client_secret=CLIENT_SECRET,
    ))  # fmt: skip
    pages.append(refused.content.decode())

    assert refused.status_code == 400
    for html in pages:
        for secret in (TOKEN, HEADER_SECRET, CLIENT_SECRET):
            assert secret not in html
    assert "Header (X-Api-Key)" in pages[0]
    assert "OAuth" in row_html(pages[0], "oauth")


def test_an_admin_deletes_a_server(team: Team) -> None:
    _store(team.tenant, "weather", "https://mcp.example.com/mcp")

    deleted = client_of(team.admin).post(_server_url("mcp-server-delete", "weather"), follow=True)

    assert deleted.redirect_chain == [(LIST, 302)]
    assert "Deleted MCP server weather." in flash(deleted.content.decode())
    assert not McpServer.objects.for_tenant(team.tenant).exists()


# Who may see and write -----------------------------------------------------------------------


def _writes(name: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (LIST, _form(name="forged", url="https://mcp.example.com/mcp")),
        (_server_url("mcp-server-edit", name),
         _form(name=name, url="https://evil.example.com/mcp", auth_type="bearer",
               auth_token=NEW_TOKEN)),
        (_server_url("mcp-server-refresh", name), {}),
        (_server_url("mcp-server-delete", name), {}),
    ]  # fmt: skip


def test_members_and_read_only_members_cannot_write(team: Team) -> None:
    row = _store(team.tenant, "weather", "https://mcp.example.com/mcp",
                 auth={"type": "bearer", "token": TOKEN})  # fmt: skip

    answers = [
        client_of(user).post(url, data).status_code
        for user in (team.member, team.reader)
        for url, data in _writes("weather")
    ]
    edit_pages = [
        client_of(user).get(_server_url("mcp-server-edit", "weather")).status_code
        for user in (team.member, team.reader)
    ]
    member_page = main_of(html_of(client_of(team.member), _server_url("mcp-server", "weather")))

    assert answers == [403] * 8
    assert edit_pages == [403, 403]
    assert 'method="post"' not in member_page
    assert "Only a tenant admin refreshes, edits and deletes MCP servers." in member_page
    assert list(McpServer.objects.for_tenant(team.tenant).values_list("name", flat=True)) == [
        "weather"
    ]
    stored = McpServer.objects.get(pk=row.pk)
    assert stored.url == "https://mcp.example.com/mcp"
    assert endpoint_of(stored).headers == {"Authorization": f"Bearer {TOKEN}"}
    assert stored.checked_at is None


def test_another_tenants_server_is_a_404_with_no_side_effect(team: Team) -> None:
    theirs = make_tenant()
    row = _store(theirs, "theirs", "https://mcp.example.com/mcp",
                 auth={"type": "bearer", "token": TOKEN})  # fmt: skip
    client = client_of(team.admin)

    reads = [client.get(_server_url(view, "theirs")).status_code
             for view in ("mcp-server", "mcp-server-edit")]  # fmt: skip
    writes = [client.post(url, data).status_code for url, data in _writes("theirs")[1:]]
    listed = html_of(client, LIST)

    assert reads == [404, 404]
    assert writes == [404, 404, 404]
    assert 'data-name="theirs"' not in listed
    stored = McpServer.objects.get(pk=row.pk)
    assert stored.url == "https://mcp.example.com/mcp"
    assert stored.checked_at is None
    assert endpoint_of(stored).headers == {"Authorization": f"Bearer {TOKEN}"}
