"""The A2A agents pages without a browser: the tenant's agents listed with the tool the model
calls, their auth type, cached card and health; an agent's cached card; **Refresh card**
against a real A2A agent on loopback (``tests/connectors/a2a_peer.py``) and against a dead
one; adding and editing through ``a2a_agent_save``, each refusal at its field; secrets never
rendered; another tenant's agent a 404 and a non-admin's write a 403, with no side effect.

Tests that contact an agent commit their rows (``transaction=True``): the refresh never runs
inside a transaction, and pytest-django runs every other test inside one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse
from pytest_django.fixtures import Settings

from connectors.a2a import a2a_agent_save, card_fetch
from connectors.models import A2aAgent
from connectors.remote import endpoint_of
from connectors.transport import RemoteUnavailable
from tenancy.models import Tenant
from tests.connectors.a2a_peer import TOKEN, Peer, a2a_peer
from tests.console.conftest import Team, client_of, team_make
from tests.console.connection_pages import (
    AUTH_FIELDS,
    connection_form,
    dead_url,
    field_html,
    flash,
    html_of,
    main_of,
    row_html,
)
from tests.factories import make_tenant

LIST = reverse("console:a2a-agents")
EXAMPLE = "https://agents.example.com/translator/"
HEADER_SECRET = "sentinel-a2a-header-value-5e81aa"
NEW_TOKEN = "sentinel-a2a-new-bearer-93c0d2"
CLIENT_SECRET = "sentinel-a2a-client-secret-1f7b44"
HEADER_AUTH = {"type": "header", "header_name": "X-Api-Key", "header_value": HEADER_SECRET}
OAUTH = {"type": "oauth_client_credentials", "client_id": "platform",
         "client_secret": CLIENT_SECRET, "token_url": "https://auth.example.com/t"}  # fmt: skip


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with a2a_peer() as running:
        yield running


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


def _store(tenant: Tenant, name: str, url: str = EXAMPLE, **fields: Any) -> A2aAgent:
    return a2a_agent_save(tenant=tenant, data={"name": name, "url": url, **fields})


def _translator(tenant: Tenant, peer: Peer, token: str = TOKEN, **fields: Any) -> A2aAgent:
    return _store(tenant, "translator", peer.url, auth={"type": "bearer", "token": token},
                  **fields)  # fmt: skip


def _form(**fields: Any) -> dict[str, Any]:
    return connection_form("card_ttl_s", **fields)


def _agent_url(view: str, name: str) -> str:
    return reverse(f"console:{view}", args=[name])


def _card_section(html: str) -> str:
    return html.split('<section id="card"')[1].split("</section>")[0]


# Listing -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_list_shows_each_agents_tool_auth_card_and_health(peer: Peer) -> None:
    team = team_make()
    card_fetch(_translator(team.tenant, peer))
    dead = _store(team.tenant, "dead", dead_url(), description="gone")
    with pytest.raises(RemoteUnavailable):
        card_fetch(dead)
    _store(team.tenant, "fresh", auth=HEADER_AUTH)

    html = html_of(client_of(team.reader), LIST)

    translator = row_html(html, "translator")
    assert "<td><code>" + peer.url + "</code></td>" in translator
    assert '<code class="tool-name">translator__send_message</code>' in translator
    assert "<td>Bearer token</td>" in translator
    assert '<span class="card-name">translator</span>' in translator
    assert '<span class="skill-count">1 skill</span>' in translator
    assert "fetched <time datetime=" in translator
    assert 'data-health="ok"' in translator
    failing = row_html(html, "dead")
    assert '<code class="tool-name">dead__send_message</code>' in failing
    assert "not fetched" in failing
    assert 'data-health="failing"' in failing
    assert "A2A agent &#x27;dead&#x27; could not be reached: " in failing
    assert "gone" in failing
    fresh = row_html(html, "fresh")
    assert "<td>Header (X-Api-Key)</td>" in fresh
    assert 'data-health="never"' in fresh
    assert "never contacted" in fresh
    assert html.index('data-name="dead"') < html.index('data-name="fresh"')
    assert html.index('data-name="fresh"') < html.index('data-name="translator"')
    assert TOKEN not in html
    assert HEADER_SECRET not in html
    assert "Only a tenant admin adds, edits, refreshes and deletes A2A agents." in html
    assert 'method="post"' not in main_of(html)


def test_the_agents_pages_link_to_the_a2a_agents_beside_the_mcp_servers(team: Team) -> None:
    agents = html_of(client_of(team.reader), reverse("console:agents"))
    listed = html_of(client_of(team.reader), LIST)

    servers = reverse("console:mcp-servers")
    assert f'href="{LIST}"' in agents
    assert agents.index(f'href="{servers}"') < agents.index(f'href="{LIST}"')
    assert f'href="{LIST}" aria-current="page">A2A agents</a>' in listed
    assert "<title>A2A agents · " in listed
    assert "No A2A agents yet." in listed


def test_an_admin_sees_the_add_form_with_every_field(team: Team) -> None:
    html = html_of(client_of(team.admin), LIST)

    form = html.split('id="connection-form"')[1].split("</form>")[0]
    names = re.findall(r'name="([a-z_]+)"', form)
    assert names[1:7] == ["name", "url", "description", "card_ttl_s", "call_timeout_s",
                          "auth_type"]  # fmt: skip
    assert set(AUTH_FIELDS) <= set(names)
    assert "the model calls it as &lt;name&gt;__send_message" in field_html(form, "name")
    assert "Add A2A agent" in form


# An agent's page -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_agent_page_shows_the_cached_card_and_reading_contacts_nothing(peer: Peer) -> None:
    team = team_make()
    row = _translator(team.tenant, peer, card_ttl_s=0)
    card_fetch(row)
    fetched = A2aAgent.objects.get(pk=row.pk).card_fetched_at

    html = html_of(client_of(team.member), _agent_url("a2a-agent", "translator"))

    card = _card_section(html)
    assert '<dd class="card-name">translator</dd>' in card
    assert '<dd class="card-description">Translates text into French.</dd>' in card
    assert "<dd>1.0.0</dd>" in card
    assert f'<code class="interface">{peer.url}rpc</code>' in card
    assert '<dd class="streaming">yes</dd>' in card
    assert "Skills (1)" in card
    skill = card.split('data-skill="french"')[1].split("</article>")[0]
    assert "French" in skill
    assert "<p>Into French.</p>" in skill
    assert '<code class="tool-name">translator__send_message</code>' in html
    assert "(stale: older than 0 s" in html
    assert 'data-health="ok"' in html
    assert "Refresh card" not in html
    assert A2aAgent.objects.get(pk=row.pk).card_fetched_at == fetched  # stale, not fetched
    assert TOKEN not in html


def test_an_agent_never_fetched_says_so_and_is_not_contacted(team: Team) -> None:
    _store(team.tenant, "translator")

    html = html_of(client_of(team.admin), _agent_url("a2a-agent", "translator"))

    assert "Not fetched yet. <strong>Refresh card</strong> asks the agent." in html
    assert 'data-health="never"' in html
    assert A2aAgent.objects.get(name="translator").checked_at is None


# Refreshing ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_refresh_against_the_live_agent_shows_its_card_and_skill(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    added = client.post(LIST, _form(name="translator", url=peer.url, auth_type="bearer",
                                     auth_token=TOKEN))  # fmt: skip
    before = html_of(client, _agent_url("a2a-agent", "translator"))

    refreshed = client.post(_agent_url("a2a-agent-refresh", "translator"), follow=True)

    assert added.status_code == 302
    assert added["Location"] == _agent_url("a2a-agent", "translator")
    assert "Saved A2A agent translator." in before
    assert "Not fetched yet." in before
    assert refreshed.redirect_chain == [(_agent_url("a2a-agent", "translator"), 302)]
    html = refreshed.content.decode()
    assert "Fetched the card of A2A agent translator: translator, 1 skill." in flash(html)
    assert re.findall(r'data-skill="([^"]+)"', html) == ["french"]
    assert "<p>Into French.</p>" in _card_section(html)
    assert 'data-health="ok"' in html
    row = A2aAgent.objects.get(name="translator")
    assert row.card["name"] == "translator"
    assert row.card_fetched_at is not None
    assert TOKEN not in html


@pytest.mark.django_db(transaction=True)
def test_refresh_against_a_dead_agent_shows_the_cause_and_records_it(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    _store(team.tenant, "dead", dead_url())
    _translator(team.tenant, peer, token="not-the-token")

    dead = client.post(_agent_url("a2a-agent-refresh", "dead"), follow=True)
    refused = client.post(_agent_url("a2a-agent-refresh", "translator"), follow=True)

    assert dead.status_code == 200
    message = flash(dead.content.decode())
    assert 'class="error"' in message
    assert "A2A agent &#x27;dead&#x27; could not be reached: " in message
    assert 'data-health="failing"' in dead.content.decode()
    assert "Not fetched yet." in _card_section(dead.content.decode())
    row = A2aAgent.objects.get(name="dead")
    assert row.last_error.startswith("A2A agent 'dead' could not be reached: ")
    assert row.last_error_at is not None
    assert row.card == {}
    assert refused.status_code == 200
    assert (
        "A2A agent &#x27;translator&#x27; could not be reached: the server refused the "
        "credentials (HTTP 401)"
    ) in flash(refused.content.decode())
    assert "not-the-token" not in refused.content.decode()


# Adding and editing --------------------------------------------------------------------------


def test_a_refused_agent_is_shown_at_its_field_and_nothing_is_stored(
    team: Team, settings: Settings
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = []
    settings.EGRESS_ALLOWED_HOSTS = []
    client = client_of(team.admin)
    _store(team.tenant, "taken")

    metadata = client.post(LIST, _form(name="meta", url="http://169.254.169.254/",
                                       auth_type="bearer", auth_token=TOKEN))  # fmt: skip
    not_a_url = client.post(LIST, _form(name="nourl", url="not a url"))
    no_url = client.post(LIST, _form(name="nourl"))
    bad_name = client.post(LIST, _form(name="Not-Snake", url=EXAMPLE))
    taken = client.post(LIST, _form(name="taken", url=EXAMPLE))
    no_token = client.post(LIST, _form(name="tokenless", url=EXAMPLE, auth_type="bearer"))
    bad_ttl = client.post(LIST, _form(name="ttl", url=EXAMPLE, card_ttl_s="-5"))
    not_a_number = client.post(LIST, _form(name="slow", url=EXAMPLE, call_timeout_s="soon"))

    assert metadata.status_code == 400
    html = metadata.content.decode()
    assert "metadata" in field_html(html, "url")
    assert 'value="http://169.254.169.254/"' in field_html(html, "url")
    assert "The A2A agent was not saved; see the fields marked below." in html
    assert TOKEN not in html
    assert not_a_url.status_code == 400
    assert "url must be an http(s) URL" in field_html(not_a_url.content.decode(), "url")
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
    assert bad_ttl.status_code == 400
    assert "card_ttl_s" in field_html(bad_ttl.content.decode(), "card_ttl_s")
    assert not_a_number.status_code == 400
    assert "Enter a whole number." in field_html(not_a_number.content.decode(), "call_timeout_s")
    assert list(A2aAgent.objects.for_tenant(team.tenant).values_list("name", flat=True)) == [
        "taken"
    ]


def test_the_chosen_auth_and_every_field_are_saved(team: Team) -> None:
    client = client_of(team.admin)

    answer = client.post(LIST, _form(
        name="translator", url=EXAMPLE, description="Translates", auth_type="header",
        auth_header_name="X-Api-Key", auth_header_value=HEADER_SECRET, auth_token=TOKEN,
        card_ttl_s="60", call_timeout_s="30",
    ))  # fmt: skip

    assert answer.status_code == 302
    row = A2aAgent.objects.get(name="translator")
    assert (row.url, row.description, row.card_ttl_s, row.call_timeout_s) == (
        EXAMPLE, "Translates", 60, 30,
    )  # fmt: skip
    assert (row.auth_type, row.auth_header_name) == ("header", "X-Api-Key")
    assert endpoint_of(row).headers == {"X-Api-Key": HEADER_SECRET}


@pytest.mark.django_db(transaction=True)
def test_an_edit_leaving_the_secret_blank_keeps_it_and_the_cached_card(peer: Peer) -> None:
    team = team_make()
    client = client_of(team.admin)
    card_fetch(_translator(team.tenant, peer))
    edit = _agent_url("a2a-agent-edit", "translator")
    page = html_of(client, edit)

    kept = client.post(edit, _form(name="translator", url=peer.url, description="French",
                                   auth_type="bearer", card_ttl_s="600",
                                   call_timeout_s="90"))  # fmt: skip
    row = A2aAgent.objects.get(name="translator")
    refreshed = client.post(_agent_url("a2a-agent-refresh", "translator"), follow=True)

    assert "A secret is stored: leave this blank to keep it." in field_html(page, "auth_token")
    assert 'value="' not in field_html(page, "auth_token").split('name="auth_token"')[1][:80]
    assert 'value="translator"' in field_html(page, "name")
    assert 'value="300"' in field_html(page, "card_ttl_s")
    assert kept.status_code == 302
    assert (row.description, row.card_ttl_s, row.call_timeout_s) == ("French", 600, 90)
    assert endpoint_of(row).headers == {"Authorization": f"Bearer {TOKEN}"}
    assert row.card["name"] == "translator"  # url and auth unchanged: the cache stays
    assert "Fetched the card of A2A agent translator" in flash(refreshed.content.decode())
    assert TOKEN not in page


def test_an_edit_with_a_new_url_and_secret_forgets_the_cached_card(team: Team) -> None:
    client = client_of(team.admin)
    row = _store(team.tenant, "translator", auth={"type": "bearer", "token": TOKEN})
    A2aAgent.objects.filter(pk=row.pk).update(card={"name": "old"})

    renamed = client.post(_agent_url("a2a-agent-edit", "translator"), _form(
        name="french", url="https://agents.example.com/french/", auth_type="bearer",
        auth_token=NEW_TOKEN,
    ), follow=True)  # fmt: skip

    row = A2aAgent.objects.get(pk=row.pk)
    assert renamed.redirect_chain == [(_agent_url("a2a-agent", "french"), 302)]
    assert (
        "Saved A2A agent french. Its cached card and health were cleared: refresh its card."
    ) in flash(renamed.content.decode())
    assert (row.name, row.url) == ("french", "https://agents.example.com/french/")
    assert endpoint_of(row).headers == {"Authorization": f"Bearer {NEW_TOKEN}"}
    assert row.card == {}
    assert NEW_TOKEN not in renamed.content.decode()


def test_no_page_renders_a_secret(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant, "bearer", auth={"type": "bearer", "token": TOKEN})
    _store(team.tenant, "header", auth=HEADER_AUTH)
    _store(team.tenant, "oauth", auth=OAUTH)

    pages = [html_of(client, LIST)]
    for name in ("bearer", "header", "oauth"):
        pages.append(html_of(client, _agent_url("a2a-agent", name)))
        pages.append(html_of(client, _agent_url("a2a-agent-edit", name)))
    refused = client.post(_agent_url("a2a-agent-edit", "oauth"), _form(
        name="oauth", url="not a url", auth_type="oauth_client_credentials",
        auth_client_id="platform", auth_token_url="https://auth.example.com/t",
        auth_client_secret=CLIENT_SECRET,
    ))  # fmt: skip
    added = client.post(LIST, _form(name="Bad Name", url=EXAMPLE, auth_type="bearer",
                                    auth_token=NEW_TOKEN))  # fmt: skip
    pages += [refused.content.decode(), added.content.decode()]

    assert (refused.status_code, added.status_code) == (400, 400)
    for html in pages:
        for secret in (TOKEN, HEADER_SECRET, CLIENT_SECRET, NEW_TOKEN):
            assert secret not in html
    assert "Header (X-Api-Key)" in row_html(pages[0], "header")
    assert "OAuth client credentials (platform)" in row_html(pages[0], "oauth")
    assert "(a secret is stored)" in pages[1]


def test_an_admin_deletes_an_agent(team: Team) -> None:
    _store(team.tenant, "translator")

    deleted = client_of(team.admin).post(_agent_url("a2a-agent-delete", "translator"),
                                         follow=True)  # fmt: skip

    assert deleted.redirect_chain == [(LIST, 302)]
    assert "Deleted A2A agent translator." in flash(deleted.content.decode())
    assert not A2aAgent.objects.for_tenant(team.tenant).exists()


# Who may see and write -----------------------------------------------------------------------


def _writes(name: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (LIST, _form(name="forged", url=EXAMPLE)),
        (_agent_url("a2a-agent-edit", name),
         _form(name=name, url="https://evil.example.com/", auth_type="bearer",
               auth_token=NEW_TOKEN)),
        (_agent_url("a2a-agent-refresh", name), {}),
        (_agent_url("a2a-agent-delete", name), {}),
    ]  # fmt: skip


def test_members_and_read_only_members_cannot_write(team: Team) -> None:
    row = _store(team.tenant, "translator", auth={"type": "bearer", "token": TOKEN})

    answers = [
        client_of(user).post(url, data).status_code
        for user in (team.member, team.reader)
        for url, data in _writes("translator")
    ]
    edit_pages = [
        client_of(user).get(_agent_url("a2a-agent-edit", "translator")).status_code
        for user in (team.member, team.reader)
    ]
    member_page = main_of(html_of(client_of(team.member), _agent_url("a2a-agent", "translator")))

    assert answers == [403] * 8
    assert edit_pages == [403, 403]
    assert 'method="post"' not in member_page
    assert "Only a tenant admin refreshes, edits and deletes A2A agents." in member_page
    assert list(A2aAgent.objects.for_tenant(team.tenant).values_list("name", flat=True)) == [
        "translator"
    ]
    stored = A2aAgent.objects.get(pk=row.pk)
    assert stored.url == EXAMPLE
    assert endpoint_of(stored).headers == {"Authorization": f"Bearer {TOKEN}"}
    assert stored.checked_at is None


def test_another_tenants_agent_is_a_404_with_no_side_effect(team: Team) -> None:
    theirs = make_tenant()
    row = _store(theirs, "theirs", auth={"type": "bearer", "token": TOKEN})
    client = client_of(team.admin)

    reads = [client.get(_agent_url(view, "theirs")).status_code
             for view in ("a2a-agent", "a2a-agent-edit")]  # fmt: skip
    writes = [client.post(url, data).status_code for url, data in _writes("theirs")[1:]]
    listed = html_of(client, LIST)

    assert reads == [404, 404]
    assert writes == [404, 404, 404]
    assert 'data-name="theirs"' not in listed
    stored = A2aAgent.objects.get(pk=row.pk)
    assert stored.url == EXAMPLE
    assert stored.checked_at is None
    assert endpoint_of(stored).headers == {"Authorization": f"Bearer {TOKEN}"}
