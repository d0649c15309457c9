"""The Credentials page without a browser: the tenant's provider credentials and the
operator's granted to it listed by name, never a key; an admin adds one, rotates its key and
deletes it through the services the API uses, each refusal at its field; a member's or a
read-only member's write is a 403 and another tenant's credential a 404, with no side
effect."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from agents.credentials import credential_save, credential_secret
from agents.models import ProviderCredential
from tenancy.models import Tenant
from tests.console.conftest import Team, client_of, team_make
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

KEY = "sk-console-credential-0123456789"
NEW_KEY = "sk-console-rotated-9876543210"
OPERATOR_KEY = "sk-operator-secret-0123456789"
PAGE = "console:agents-credentials"


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


@pytest.fixture
def operator_key(settings: Settings) -> None:
    """The operator offers its OpenAI key, to tenants it grants it to."""
    settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = {
        "openai": {"api_key": OPERATOR_KEY, "base_url": None}
    }
    settings.PROVIDER_BASE_URLS_ALLOWED = []
    settings.PLATFORM_CREDENTIALS_GRANTED = False


def _store(tenant: Tenant, name: str = "main", key: str = KEY, **fields: str) -> ProviderCredential:
    data = {"name": name, "provider": "openai", "api_key": key, **fields}
    return credential_save(tenant=tenant, data=data)


def _stored(tenant: Tenant, name: str = "main") -> ProviderCredential:
    return ProviderCredential.objects.for_tenant(tenant).get(name=name)


def _names(tenant: Tenant) -> list[str]:
    return list(ProviderCredential.objects.for_tenant(tenant).values_list("name", flat=True))


def _model_naming(tenant: Tenant, credential: str) -> None:
    model = {"name": "gpt", "provider": "openai", "model_id": "gpt-x", "credential": credential}
    assert bundle_import(tenant=tenant, document={"version": 1, "models": [model]}).errors == []


def _main(html: str) -> str:
    """The page's main content (the header holds the logout form)."""
    return html.split('<main id="main">')[1]


def _row_html(html: str, name: str) -> str:
    found = re.search(rf'<tr data-name="{re.escape(name)}"[^>]*>(.*?)</tr>', html, re.DOTALL)
    assert found is not None, f"no row {name}"
    return found.group(1)


def _field_html(html: str, field: str) -> str:
    found = re.search(rf'data-field="{field}">(.*?)</div>', html, re.DOTALL)
    assert found is not None, f"no field {field}"
    return found.group(1)


def _page(client: Client) -> str:
    answer = client.get(reverse(PAGE))
    assert answer.status_code == 200
    return answer.content.decode()


def _add(client: Client, **fields: str) -> tuple[int, str]:
    """Post the add form; the answer's status and page."""
    body = {"name": "added", "provider": "openai", "base_url": "", "description": "",
            "api_key": KEY, **fields}  # fmt: skip
    answer = client.post(reverse("console:agents-credential-add"), body)
    return answer.status_code, answer.content.decode()


# Listing -------------------------------------------------------------------------------------


def test_page_lists_credentials_with_their_endpoints_and_never_a_key(
    team: Team, operator_key: None
) -> None:
    _store(team.tenant, description="production")
    _store(
        team.tenant, "local", provider="openai_compatible",
        base_url="https://llm.example.com/v1",
    )  # fmt: skip
    team.tenant.platform_credentials = True
    team.tenant.save(update_fields=["platform_credentials"])

    users = (team.admin, team.member, team.reader)
    pages = {user.username: _page(client_of(user)) for user in users}

    for html in pages.values():
        assert KEY not in html
        assert OPERATOR_KEY not in html
        assert "<code>https://api.openai.com/v1</code>" in _row_html(html, "main")
        assert "production" in _row_html(html, "main")
        assert "<code>openai_compatible</code>" in _row_html(html, "local")
        assert "<code>https://llm.example.com/v1</code>" in _row_html(html, "local")
        assert "operator&#x27;s key" in _row_html(html, "platform:openai")
        assert "never" in _row_html(html, "main")
    admin = pages[team.admin.username]
    assert "<title>Credentials · " in admin
    assert 'aria-current="page">Credentials</a>' in admin
    assert admin.index('data-name="local"') < admin.index('data-name="main"')
    assert admin.index('data-name="main"') < admin.index('data-name="platform:openai"')
    rotate = _row_html(admin, "main")
    assert '<input type="password" name="api_key" autocomplete="new-password"' in rotate
    assert 'value="' not in rotate.split('name="api_key"')[1].split(">")[0]
    assert 'aria-describedby="rotate-main-api_key_helptext"' in rotate
    assert 'id="rotate-main-api_key_helptext"' in rotate
    assert "Rotate" not in _row_html(admin, "platform:openai")
    assert "Delete" not in _row_html(admin, "platform:openai")
    assert 'id="credential-form"' in admin


def test_member_and_read_only_member_see_no_forms(team: Team) -> None:
    _store(team.tenant)

    for user in (team.member, team.reader):
        html = _main(_page(client_of(user)))
        assert 'method="post"' not in html
        assert 'data-name="main"' in html
        assert "Only a tenant admin adds, rotates and deletes credentials." in html


def test_the_agents_pages_link_to_credentials(team: Team) -> None:
    html = client_of(team.reader).get(reverse("console:agents")).content.decode()

    assert f'href="{reverse(PAGE)}"' in html


# Adding --------------------------------------------------------------------------------------


def test_admin_adds_a_credential_through_the_service(team: Team) -> None:
    client = client_of(team.admin)

    status, _ = _add(
        client, name="local", provider="openai_compatible",
        base_url="https://llm.example.com/v1", description="our gateway",
    )  # fmt: skip
    html = _page(client)

    assert status == 302
    row = _stored(team.tenant, "local")
    assert (row.provider, row.base_url, row.description) == (
        "openai_compatible", "https://llm.example.com/v1", "our gateway",
    )  # fmt: skip
    assert credential_secret(row) == KEY
    assert row.rotated_at is None
    assert "Stored credential local." in html
    assert KEY not in html


def test_a_refused_credential_is_shown_at_its_field_and_the_key_is_not_kept(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant)

    metadata = _add(
        client, name="local", provider="openai_compatible", base_url="http://169.254.169.254/v1"
    )
    no_url = _add(client, name="local", provider="openai_compatible")
    taken = _add(client, name="main")
    bad_name = _add(client, name="Not-Snake")
    no_key = _add(client, name="keyless", api_key="")

    assert metadata[0] == 400
    assert "metadata" in _field_html(metadata[1], "base_url")
    assert 'value="http://169.254.169.254/v1"' in _field_html(metadata[1], "base_url")
    assert KEY not in metadata[1]
    assert "The credential was not stored; see the fields marked below." in metadata[1]
    assert no_url[0] == 400
    assert "needs its base_url" in _field_html(no_url[1], "base_url")
    assert taken[0] == 409
    assert "already exists" in _field_html(taken[1], "name")
    assert bad_name[0] == 400
    assert "snake_case" in _field_html(bad_name[1], "name")
    assert no_key[0] == 400
    assert "required" in _field_html(no_key[1], "api_key")
    assert _names(team.tenant) == ["main"]


# Rotating ------------------------------------------------------------------------------------


def test_rotating_replaces_the_stored_key_and_no_page_holds_either(team: Team) -> None:
    client = client_of(team.admin)
    before = _store(team.tenant)
    url = reverse("console:agents-credential-rotate", args=["main"])

    answer = client.post(url, {"api_key": NEW_KEY})
    html = _page(client)

    row = _stored(team.tenant)
    assert answer.status_code == 302
    assert row.pk == before.pk
    assert credential_secret(row) == NEW_KEY
    assert row.rotated_at is not None
    assert "Rotated the key of credential main." in html
    assert KEY not in html
    assert NEW_KEY not in html
    assert row.rotated_at.strftime("%Y-%m-%d %H:%M:%S") in _row_html(html, "main")


def test_a_refused_rotation_is_shown_in_its_row_and_keeps_the_key(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant)
    _store(team.tenant, "other")
    url = reverse("console:agents-credential-rotate", args=["main"])

    blank = client.post(url, {"api_key": "   "})
    long = client.post(url, {"api_key": "k" * 5000})

    assert blank.status_code == 400
    row = _row_html(blank.content.decode(), "main")
    assert "<details open>" in row
    assert 'id="rotate-main-api_key_error"' in row
    assert "required" in row
    assert "<details open>" not in _row_html(blank.content.decode(), "other")
    assert long.status_code == 400
    assert "k" * 5000 not in long.content.decode()
    assert "at most 4096 characters" in _row_html(long.content.decode(), "main")
    assert credential_secret(_stored(team.tenant)) == KEY
    assert _stored(team.tenant).rotated_at is None


# Deleting ------------------------------------------------------------------------------------


def test_deleting_is_refused_while_a_model_names_the_credential(team: Team) -> None:
    client = client_of(team.admin)
    _store(team.tenant)
    _store(team.tenant, "spare")
    _model_naming(team.tenant, "main")

    refused = client.post(reverse("console:agents-credential-delete", args=["main"]), follow=True)
    deleted = client.post(reverse("console:agents-credential-delete", args=["spare"]), follow=True)

    assert refused.redirect_chain == [(reverse(PAGE), 302)]
    assert "credential &#x27;main&#x27; is still named by model(s) gpt" in refused.content.decode()
    assert ProviderCredential.objects.for_tenant(team.tenant).filter(name="main").exists()
    assert "Deleted credential spare." in deleted.content.decode()
    assert not ProviderCredential.objects.for_tenant(team.tenant).filter(name="spare").exists()


def test_a_refused_delete_answers_the_apis_error_to_a_script(team: Team) -> None:
    _store(team.tenant)
    _model_naming(team.tenant, "main")

    answer = client_of(team.admin).post(
        reverse("console:agents-credential-delete", args=["main"]),
        headers={"Accept": "application/json"},
    )

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "conflict"


# Who may write -------------------------------------------------------------------------------


def _writes(name: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (reverse("console:agents-credential-add"),
         {"name": "forged", "provider": "openai", "api_key": NEW_KEY}),
        (reverse("console:agents-credential-rotate", args=[name]), {"api_key": NEW_KEY}),
        (reverse("console:agents-credential-delete", args=[name]), {}),
    ]  # fmt: skip


def test_members_and_read_only_members_writes_are_403_with_no_side_effect(team: Team) -> None:
    _store(team.tenant)

    answers = [
        client_of(user).post(url, data).status_code
        for user in (team.member, team.reader)
        for url, data in _writes("main")
    ]

    assert answers == [403] * 6
    assert _names(team.tenant) == ["main"]
    assert credential_secret(_stored(team.tenant)) == KEY


def test_another_tenants_credential_is_404_with_no_side_effect(team: Team) -> None:
    theirs = make_tenant()
    _store(theirs, "theirs")
    client = client_of(team.admin)

    answers = [client.post(url, data).status_code for url, data in _writes("theirs")[1:]]
    html = _page(client)

    assert answers == [404, 404]
    assert credential_secret(_stored(theirs, "theirs")) == KEY
    assert _stored(theirs, "theirs").rotated_at is None
    assert 'data-name="theirs"' not in html


def test_the_operators_credential_cannot_be_rotated_or_deleted_here(
    team: Team, operator_key: None
) -> None:
    team.tenant.platform_credentials = True
    team.tenant.save(update_fields=["platform_credentials"])
    client = client_of(team.admin)

    answers = [client.post(url, data).status_code for url, data in _writes("platform:openai")[1:]]

    assert answers == [404, 404]
