"""The client's provider credentials against a live server: created, listed, read, changed,
rotated and deleted by name, sync and async; no answer holds a key; refusals raised as
their types naming the field; only admins write."""

from __future__ import annotations

import pytest
from standard_agents_client import (
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    PermissionDenied,
    ValidationError,
)

from agents.credentials import credential_secret
from agents.models import ProviderCredential
from tenancy.models import Role, Tenant
from tests.client.conftest import LiveApi
from tests.factories import make_api_key

KEY = "sk-client-credential-0123456789"
NEW_KEY = "sk-client-rotated-9876543210"
GATEWAY = "https://llm.example.com/v1"


def _stored(live_api: LiveApi, name: str) -> ProviderCredential:
    tenant = Tenant.objects.get(slug=live_api.tenant_slug)
    return ProviderCredential.objects.for_tenant(tenant).get(name=name)


def test_credentials_are_created_listed_rotated_and_deleted(
    live_api: LiveApi, client: Client
) -> None:
    made = client.credentials.create("main", provider="openai", api_key=KEY)
    gateway = client.credentials.create(
        "gateway", provider="openai_compatible", api_key=KEY, base_url=GATEWAY,
        description="our gateway",
    )  # fmt: skip

    assert (made["name"], made["provider"], made["base_url"], made["platform"]) == (
        "main", "openai", None, False,
    )  # fmt: skip
    assert isinstance(made["created_at"], int)
    assert made["rotated_at"] is None
    assert (gateway["base_url"], gateway["description"]) == (GATEWAY, "our gateway")
    assert [c["name"] for c in client.credentials.list()] == ["gateway", "main"]
    assert client.credentials.get("main")["id"] == made["id"]

    rotated = client.credentials.rotate("main", NEW_KEY)
    described = client.credentials.update("main", description="production")

    assert rotated["rotated_at"] is not None
    assert described["description"] == "production"
    assert credential_secret(_stored(live_api, "main")) == NEW_KEY
    assert credential_secret(_stored(live_api, "gateway")) == KEY
    answers = [made, gateway, rotated, described, *client.credentials.list().results]
    assert all(KEY not in repr(answer) and NEW_KEY not in repr(answer) for answer in answers)
    assert all("api_key" not in answer for answer in answers)

    client.credentials.delete("gateway")
    with pytest.raises(NotFound):
        client.credentials.get("gateway")
    assert [c["name"] for c in client.credentials.list()] == ["main"]


def test_credentials_are_listed_by_name_across_pages(client: Client) -> None:
    for name in ("c_key", "a_key", "b_key"):
        client.credentials.create(name, provider="openai", api_key=KEY)

    first = client.credentials.list(limit=2)
    names = [credential["name"] for credential in client.credentials.iter(limit=2)]

    assert [c["name"] for c in first] == ["a_key", "b_key"]
    assert first.next is not None
    assert names == ["a_key", "b_key", "c_key"]


def test_refusals_are_raised_as_their_types_naming_the_field(client: Client) -> None:
    client.credentials.create("main", provider="openai", api_key=KEY)

    with pytest.raises(Conflict) as taken:
        client.credentials.create("main", provider="anthropic", api_key=KEY)
    with pytest.raises(ValidationError) as metadata:
        client.credentials.create(
            "cloud", provider="openai_compatible", api_key=KEY,
            base_url="http://169.254.169.254/v1",
        )  # fmt: skip
    with pytest.raises(ValidationError) as official:
        client.credentials.create("other", provider="openai", api_key=KEY, base_url=GATEWAY)
    with pytest.raises(ValidationError) as blank:
        client.credentials.rotate("main", "")

    assert (taken.value.status, taken.value.field) == (409, "name")
    assert (metadata.value.status, metadata.value.field) == (400, "base_url")
    assert "metadata" in metadata.value.message
    assert official.value.field == "base_url"
    assert blank.value.field == "api_key"
    assert [c["name"] for c in client.credentials.list()] == ["main"]


def test_a_credential_a_model_names_cannot_be_deleted_or_renamed(client: Client) -> None:
    client.credentials.create("main", provider="openai", api_key=KEY)
    model = client.models.create(
        {"name": "gpt", "provider": "openai", "model_id": "gpt-x", "credential": "main"}
    )

    with pytest.raises(Conflict) as deleting:
        client.credentials.delete("main")
    with pytest.raises(Conflict) as renaming:
        client.credentials.update("main", new_name="renamed")

    assert model["credential"] == "main"
    assert "gpt" in deleting.value.message
    assert renaming.value.field == "name"
    client.models.delete("gpt")
    client.credentials.delete("main")
    assert client.credentials.list().results == []


def test_a_member_reads_credentials_but_may_not_write_them(
    live_api: LiveApi, client: Client
) -> None:
    client.credentials.create("main", provider="openai", api_key=KEY)
    tenant = Tenant.objects.get(slug=live_api.tenant_slug)
    member_key = make_api_key(tenant, role=Role.MEMBER).secret

    with Client(live_api.base_url, member_key) as member:
        listed = member.credentials.list()
        with pytest.raises(PermissionDenied):
            member.credentials.create("mine", provider="openai", api_key=KEY)
        with pytest.raises(PermissionDenied):
            member.credentials.rotate("main", NEW_KEY)
        with pytest.raises(PermissionDenied):
            member.credentials.delete("main")

    assert [c["name"] for c in listed] == ["main"]
    assert credential_secret(_stored(live_api, "main")) == KEY


@pytest.mark.asyncio
async def test_the_async_client_manages_credentials(aclient: AsyncClient) -> None:
    made = await aclient.credentials.create("main", provider="anthropic", api_key=KEY)
    rotated = await aclient.credentials.rotate("main", NEW_KEY)
    renamed = await aclient.credentials.update("main", new_name="claude")
    listed = await aclient.credentials.list()
    await aclient.credentials.delete("claude")

    assert made["provider"] == "anthropic"
    assert rotated["rotated_at"] is not None
    assert renamed["name"] == "claude"
    assert [c["name"] for c in listed] == ["claude"]
    with pytest.raises(NotFound):
        await aclient.credentials.get("claude")
