"""Provider credentials (agents.credentials): the operator's key reaches only the endpoints
the operator allows, for tenants it granted; a tenant's own keys are write-only and go only
to their credential's endpoint; models never read the platform's env.

The loopback fake LLM server stands for a server the tenant controls. The tests allow the
loopback network explicitly, so that nothing but the credential rules stands between the
operator's key and that server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.models import Model, ProviderCredential
from agents.selectors import model_load
from tenancy.models import Role, Tenant
from tests.fakes.llm_servers import FakeOpenAIServer, Reply
from threads.models import Log, Message, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db

OPERATOR_KEY = "sk-operator-secret-0123456789"
OFFICIAL = "https://api.openai.com/v1"


@pytest.fixture
def operator_key(settings: Settings) -> None:
    """The operator runs with OPENAI_API_KEY set; loopback is reachable (allow-listed)."""
    settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = {
        "openai": {"api_key": OPERATOR_KEY, "base_url": None}
    }
    settings.PROVIDER_BASE_URLS_ALLOWED = []
    settings.PLATFORM_CREDENTIALS_GRANTED = False
    settings.AGENT_PLATFORM_ENV_SECRETS = {"OPENAI_API_KEY": OPERATOR_KEY}
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


def _grant(tenant: Tenant, granted: bool | None = True) -> None:
    tenant.platform_credentials = granted
    tenant.save(update_fields=["platform_credentials"])


def _define(client: APIClient, **model: Any) -> Any:
    body = {"name": "mine", "provider": "openai", "model_id": "gpt-x", **model}
    return client.post("/api/v1/models", body, format="json")


def _agent_on(tenant: Tenant, model_name: str) -> None:
    from agents.bundles import bundle_import

    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "prompts": [
                {"name": "p", "tool_description": "p", "prompt": "Be brief.", "model": model_name}
            ],
            "agents": [{"name": "a", "side_a": {"prompt": "p"}}],
        },
    )


def _run_turn(tenant: Tenant) -> Thread:
    """One turn of the agent, driven in this process with the real provider adapters (and
    their SDKs)."""
    thread = thread_open(tenant=tenant, agent_name="a")
    message_queue(thread=thread, role="user", content="hello")
    thread_drive(thread_id=thread.pk, runtime=Runtime(retry_base_delay_s=0))
    return thread


def _failure(thread: Thread) -> str:
    log = Log.objects.filter(thread=thread, kind="llm").order_by("created_at").last()
    assert log is not None, "the model call should have been logged"
    assert log.data["error"], "the model call should have failed"
    return str(log.data["error"])


def _insert_model(tenant: Tenant, name: str, **fields: Any) -> None:
    """A model row as it could have been written before these rules: an agent is defined
    on a plain model row, then the row is changed underneath without any validation."""
    Model.objects.create(tenant=tenant, name=name, provider="openai", model_id="gpt-x")
    _agent_on(tenant, name)
    Model.objects.for_tenant(tenant).filter(name=name).update(**fields)


# The leak, reproduced ------------------------------------------------------------------------


def test_a_member_model_naming_the_operator_key_env_never_sends_it(
    operator_key: None, tenant: Tenant, member: APIClient, server: FakeOpenAIServer
) -> None:
    """As reported: a member's model with its own base_url and ``api_key_env:
    OPENAI_API_KEY``. The definition may name an env variable of the tenant, but the
    platform level never answers it: the call fails before any traffic."""
    server.enqueue(Reply(text="got it"))
    created = _define(member, base_url=server.base_url, api_key_env="OPENAI_API_KEY")
    _agent_on(tenant, "mine")

    thread = _run_turn(tenant)

    assert created.status_code == 201, created.json()
    assert server.requests == []
    assert "OPENAI_API_KEY" in _failure(thread)
    assert "neither the thread nor the tenant defines" in _failure(thread)
    assert Turn.objects.get(thread=thread).status == "blocked"  # until a key is set


def test_a_member_model_with_the_platform_credential_and_its_own_base_url_is_refused(
    operator_key: None, tenant: Tenant, member: APIClient, server: FakeOpenAIServer
) -> None:
    _grant(tenant)

    refused = _define(member, base_url=server.base_url, credential="platform:openai")

    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["field"] == "base_url"
    assert "PROVIDER_BASE_URLS_ALLOWED" in error["message"]
    assert not Model.objects.for_tenant(tenant).exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"credential": "platform:openai"},  # written with a base_url nobody allowed
        {"api_key_env": "OPENAI_API_KEY"},  # relied on the platform env
    ],
    ids=["platform-credential", "platform-env"],
)
def test_a_row_written_before_the_rules_is_refused_at_call_time(
    operator_key: None, tenant: Tenant, server: FakeOpenAIServer, fields: dict[str, str]
) -> None:
    _grant(tenant)
    server.enqueue(Reply(text="got it"))
    _insert_model(tenant, "old", base_url=server.base_url, **fields)

    thread = _run_turn(tenant)

    assert server.requests == []
    assert OPERATOR_KEY not in _failure(thread)
    spec = model_load(tenant=tenant, name="old")
    assert spec.api_key is None
    assert spec.key_refused is not None


def test_the_platform_credential_is_refused_to_a_tenant_not_granted_it(
    operator_key: None, tenant: Tenant, member: APIClient
) -> None:
    refused = _define(member, credential="platform:openai")

    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "credential"
    assert "not granted" in refused.json()["error"]["message"]


def test_a_revoked_grant_stops_the_key_at_call_time(
    operator_key: None, tenant: Tenant, member: APIClient
) -> None:
    _grant(tenant)
    assert _define(member, credential="platform:openai").status_code == 201

    granted = model_load(tenant=tenant, name="mine")
    _grant(tenant, False)
    revoked = model_load(tenant=tenant, name="mine")

    assert (granted.api_key, granted.base_url, granted.operator_endpoint) == (
        OPERATOR_KEY, OFFICIAL, True,
    )  # fmt: skip
    assert revoked.api_key is None
    assert "not granted" in (revoked.key_refused.message if revoked.key_refused else "")


def test_the_grant_follows_the_setting_unless_the_tenant_says_otherwise(
    operator_key: None, tenant: Tenant, settings: Settings, member: APIClient
) -> None:
    settings.PLATFORM_CREDENTIALS_GRANTED = True
    assert _define(member, credential="platform:openai").status_code == 201
    _grant(tenant, False)

    refused = model_load(tenant=tenant, name="mine").key_refused
    assert refused is not None
    assert "not granted" in refused.message


def test_an_operator_listed_base_url_may_carry_the_platform_credential(
    operator_key: None, tenant: Tenant, member: APIClient, settings: Settings
) -> None:
    _grant(tenant)
    settings.PROVIDER_BASE_URLS_ALLOWED = ["https://gateway.example.com/v1/"]

    created = _define(
        member, credential="platform:openai", base_url="https://gateway.example.com/v1"
    )
    spec = model_load(tenant=tenant, name="mine")

    assert created.status_code == 201, created.json()
    assert (spec.api_key, spec.base_url, spec.operator_endpoint) == (
        OPERATOR_KEY, "https://gateway.example.com/v1", True,
    )  # fmt: skip


def test_an_operator_base_url_is_allowed_only_to_its_own_platform_credential(
    operator_key: None, tenant: Tenant, member: APIClient, settings: Settings
) -> None:
    _grant(tenant)
    settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = {
        "openai": {"api_key": OPERATOR_KEY, "base_url": "https://openai-gw.example.com/v1"},
        "anthropic": {"api_key": "sk-ant-operator", "base_url": "https://claude-gw.example.com"},
    }

    own = _define(member, credential="platform:openai", base_url="https://openai-gw.example.com/v1")
    other = _define(
        member, name="claude", provider="anthropic", model_id="claude-x",
        credential="platform:anthropic", base_url="https://openai-gw.example.com/v1",
    )  # fmt: skip

    assert own.status_code == 201, own.json()
    assert other.status_code == 400
    assert other.json()["error"]["field"] == "base_url"


def test_the_platform_credential_reaches_an_allowed_server_with_the_key(
    operator_key: None, tenant: Tenant, settings: Settings, server: FakeOpenAIServer
) -> None:
    """The positive case end to end: an operator-listed endpoint gets the call and the key."""
    _grant(tenant)
    settings.PROVIDER_BASE_URLS_ALLOWED = [server.base_url]
    server.enqueue(Reply(text="hello back"))
    _insert_model(tenant, "ok", credential="platform:openai", base_url=server.base_url)

    thread = _run_turn(tenant)

    assert [r.headers.get("authorization") for r in server.requests] == [f"Bearer {OPERATOR_KEY}"]
    assert Message.objects.filter(thread=thread, content="hello back").exists()


# A tenant's own credentials ---------------------------------------------------------------------


def _store(client: APIClient, **fields: Any) -> Any:
    body = {"name": "team_openai", "provider": "openai", "api_key": "sk-team-1", **fields}
    return client.post("/api/v1/credentials", body, format="json")


def test_a_credential_is_write_only_and_encrypted_at_rest(tenant: Tenant, admin: APIClient) -> None:
    created = _store(admin)
    listed = admin.get("/api/v1/credentials")
    fetched = admin.get("/api/v1/credentials/team_openai")
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key_encrypted FROM agents_providercredential")
        (stored,) = cursor.fetchone()

    assert created.status_code == 201, created.json()
    for answer in (created, listed, fetched):
        assert "sk-team-1" not in answer.content.decode()
    assert [row["name"] for row in listed.json()["results"]] == ["team_openai"]
    assert fetched.json()["provider"] == "openai"
    assert b"sk-team-1" not in bytes(stored)


def test_a_model_uses_its_credential_and_rotation_swaps_the_key_in_place(
    tenant: Tenant, admin: APIClient
) -> None:
    _store(admin)
    assert _define(admin, credential="team_openai").status_code == 201
    before = model_load(tenant=tenant, name="mine")
    row_id = ProviderCredential.objects.get().pk

    rotated = admin.patch(
        "/api/v1/credentials/team_openai", {"api_key": "sk-team-2"}, format="json"
    )
    after = model_load(tenant=tenant, name="mine")

    assert (before.api_key, before.base_url, before.operator_endpoint) == (
        "sk-team-1",
        OFFICIAL,
        False,
    )
    assert rotated.status_code == 200, rotated.json()
    assert rotated.json()["rotated_at"] is not None
    assert after.api_key == "sk-team-2"
    assert ProviderCredential.objects.get().pk == row_id  # one row, updated: no gap


def test_a_credential_key_goes_only_to_its_endpoint(tenant: Tenant, admin: APIClient) -> None:
    _store(admin)
    _store(
        admin, name="gateway", provider="openai_compatible", base_url="https://llm.example.com/v1"
    )

    official_only = _define(admin, credential="team_openai", base_url="https://evil.example.com/v1")
    own_endpoint = _define(admin, name="gw", credential="gateway")
    wrong_kind = _define(admin, name="claude", provider="anthropic", credential="team_openai")

    assert official_only.status_code == 400
    assert official_only.json()["error"]["field"] == "base_url"
    assert own_endpoint.status_code == 201, own_endpoint.json()
    assert model_load(tenant=tenant, name="gw").base_url == "https://llm.example.com/v1"
    assert wrong_kind.status_code == 400
    assert wrong_kind.json()["error"]["field"] == "credential"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"provider": "openai_compatible"}, "base_url"),
        ({"provider": "openai_compatible", "base_url": "http://169.254.169.254/v1"}, "base_url"),
        ({"base_url": "https://api.example.com"}, "base_url"),
        ({"provider": "gemini"}, "provider"),
        ({"name": "Not Snake"}, "name"),
        ({"api_key": "  "}, "api_key"),
        ({"api_kye": "sk"}, "api_kye"),
    ],
)
def test_a_bad_credential_is_a_400_naming_the_field(
    admin: APIClient, fields: dict[str, Any], field: str
) -> None:
    answer = _store(admin, **fields)

    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == field
    assert not ProviderCredential.objects.exists()


def test_only_admins_write_credentials_and_a_named_one_cannot_be_deleted(
    tenant: Tenant, admin: APIClient, member: APIClient
) -> None:
    assert _store(member).status_code == 403
    _store(admin)
    _define(admin, credential="team_openai")

    refused = admin.delete("/api/v1/credentials/team_openai")
    renamed = admin.patch("/api/v1/credentials/team_openai", {"name": "other"}, format="json")
    admin.delete("/api/v1/models/mine")
    deleted = admin.delete("/api/v1/credentials/team_openai")

    assert member.get("/api/v1/credentials").status_code == 200
    assert refused.status_code == 409
    assert "mine" in refused.json()["error"]["message"]
    assert renamed.status_code == 409
    assert deleted.status_code == 204


def test_the_listing_shows_granted_platform_credentials_without_their_key(
    operator_key: None, tenant: Tenant, admin: APIClient
) -> None:
    hidden = admin.get("/api/v1/credentials").json()["results"]
    _grant(tenant)
    shown = admin.get("/api/v1/credentials")

    assert hidden == []
    assert [(row["name"], row["platform"]) for row in shown.json()["results"]] == [
        ("platform:openai", True)
    ]
    assert OPERATOR_KEY not in shown.content.decode()


def test_another_tenants_credential_is_not_found(
    tenant: Tenant, other_tenant: Tenant, admin: APIClient, client_for: Callable[..., APIClient]
) -> None:
    _store(admin)
    other = client_for(other_tenant, Role.ADMIN)

    assert other.get("/api/v1/credentials/team_openai").status_code == 404
    assert _define(other, credential="team_openai").status_code == 400


@pytest.mark.parametrize(
    "base_url", ["http://169.254.169.254/v1", "http://10.0.0.5/v1", "http://[fd00::1]/v1"]
)
def test_a_model_base_url_the_egress_guard_refuses_is_a_400_naming_it(
    member: APIClient, base_url: str
) -> None:
    """Judged when the model is saved, where it can be without DNS (common.egress)."""
    refused = _define(member, base_url=base_url, api_key_env="TEAM_KEY")

    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"]["field"] == "base_url"
    assert "EGRESS_ALLOWED" in refused.json()["error"]["message"]


def test_a_credential_moved_to_an_official_provider_drops_its_base_url(admin: APIClient) -> None:
    _store(admin, name="gateway", provider="openai_compatible", base_url="https://llm.example.com")

    moved = admin.patch("/api/v1/credentials/gateway", {"provider": "openai"}, format="json")

    assert moved.status_code == 200, moved.json()
    assert moved.json()["base_url"] is None
