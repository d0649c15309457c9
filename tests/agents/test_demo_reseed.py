"""Seeding the demo again (every `make run`) with a provider configured: it starts every time,
the demo model follows OPENAI_BASE_URL / OPENAI_MODEL unless the tenant changed it, and the
line the banner prints says what is stored."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.management.commands.seed_demo_agents import _comparable
from agents.models import Model
from agents.selectors import model_load
from agents.services import model_api_key_set
from config import env
from tenancy.models import Role, Tenant
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

LOCAL = "http://127.0.0.1:9/v1"
NAMES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY")


@pytest.fixture
def demo() -> Tenant:
    return make_tenant("demo")


def _seed(settings: Settings, *args: str, **variables: str) -> str:
    """seed_demo_agents as `make run` runs it with these variables set (and no others)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in NAMES:
            patch.delenv(name, raising=False)
        for name, value in variables.items():
            patch.setenv(name, value)
        settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = env.platform_provider_credentials()
        settings.DEMO_MODEL_IDS = env.demo_model_ids()
    out = StringIO()
    call_command("seed_demo_agents", *args, stdout=out)
    return out.getvalue()


def _stored(demo: Tenant) -> Model:
    return Model.objects.for_tenant(demo).get(name="demo_model")


def test_two_runs_with_only_openai_base_url_both_start(demo: Tenant, settings: Settings) -> None:
    line = (
        f"Demo agents: assistant, coordinator, writing_pair; model: openai gpt-4o-mini at {LOCAL}; "
    )

    first = _seed(settings, OPENAI_BASE_URL=LOCAL)
    second = _seed(settings, OPENAI_BASE_URL=LOCAL)

    spec = model_load(tenant=demo, name="demo_model")
    assert first == f"{line}9 created\n"
    assert second == f"{line}0 changed\n"
    assert (spec.model_id, spec.base_url, spec.operator_endpoint) == ("gpt-4o-mini", LOCAL, True)


def test_a_changed_openai_model_updates_the_demo_model_and_says_so(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, OPENAI_BASE_URL=LOCAL)

    changed = _seed(settings, OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")
    again = _seed(settings, OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")

    assert changed == (
        f"Demo agents: assistant, coordinator, writing_pair; model: openai local-llm at {LOCAL} "
        f"(was openai gpt-4o-mini at {LOCAL}); 1 changed\n"
    )
    assert again.endswith(f"model: openai local-llm at {LOCAL}; 0 changed\n")
    assert model_load(tenant=demo, name="demo_model").model_id == "local-llm"


def test_a_changed_openai_base_url_is_where_the_demo_model_calls(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, OPENAI_BASE_URL=LOCAL)

    output = _seed(settings, OPENAI_BASE_URL="http://127.0.0.1:11434/v1")

    assert "model: openai gpt-4o-mini at http://127.0.0.1:11434/v1; 0 changed" in output
    assert model_load(tenant=demo, name="demo_model").base_url == "http://127.0.0.1:11434/v1"


def test_the_official_endpoint_and_back_to_a_local_server_reprices_the_demo_model(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, OPENAI_API_KEY="sk-test")
    priced = _stored(demo).input_price

    _seed(settings, OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")

    assert priced is not None  # gpt-4o-mini's known price on the official endpoint
    assert (_stored(demo).model_id, _stored(demo).input_price) == ("local-llm", None)


def test_without_a_provider_any_more_the_seeded_demo_model_is_scripted_again(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, OPENAI_BASE_URL=LOCAL)

    output = _seed(settings)

    assert "model: scripted (no provider key configured) (was openai gpt-4o-mini)" in output
    assert _stored(demo).provider == "scripted"


def test_a_demo_model_the_tenant_changed_is_kept_and_the_line_says_how_to_apply_the_setting(
    demo: Tenant, settings: Settings, client_for: Callable[..., APIClient]
) -> None:
    _seed(settings, OPENAI_BASE_URL=LOCAL)
    edited = client_for(demo, Role.ADMIN).patch(
        "/api/v1/models/demo_model", {"input_price": "0.1"}, format="json"
    )
    assert edited.status_code == 200, edited.json()

    kept = _seed(settings, OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")
    model_id_kept = _stored(demo).model_id
    _seed(settings, "--reset", OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")

    assert kept == (
        "Demo agents: assistant, coordinator, writing_pair; "
        f"model: openai gpt-4o-mini at {LOCAL} (kept as the tenant changed it; the configuration "
        f"asks for openai local-llm at {LOCAL}: make demo-reset applies it); 0 changed; 1 kept "
        "as the tenant has them (make demo-reset "
        "restores them)\n"
    )
    assert model_id_kept == "gpt-4o-mini"
    assert (_stored(demo).model_id, _stored(demo).input_price) == ("local-llm", None)


def test_an_earlier_seeds_local_server_model_moves_to_the_platform_credential(
    demo: Tenant, settings: Settings
) -> None:
    """Earlier seeds stored the local server's URL and a placeholder key on the model; a
    re-run moves it to ``platform:openai`` and removes that key."""
    _seed(settings)
    row = _stored(demo)
    Model.objects.for_tenant(demo).filter(pk=row.pk).update(
        provider="openai", model_id="gpt-4o-mini", base_url=LOCAL, config={}
    )
    row.refresh_from_db()
    model_api_key_set(row=row, api_key="local-server")

    output = _seed(settings, OPENAI_BASE_URL=LOCAL, OPENAI_MODEL="local-llm")

    row.refresh_from_db()
    assert (row.credential, row.base_url, row.model_id) == ("platform:openai", "", "local-llm")
    assert row.api_key_encrypted is None
    assert output.endswith(
        f"model: openai local-llm at {LOCAL} (was openai gpt-4o-mini at {LOCAL}); 1 changed\n"
    )


def test_a_model_entry_is_compared_without_its_write_only_api_key() -> None:
    entry = {"name": "demo_model", "provider": "openai", "model_id": "m", "api_key": "local-server"}

    compared = _comparable("models", entry)

    assert compared.model_dump(exclude_defaults=True) == {
        "name": "demo_model", "provider": "openai", "model_id": "m",
    }  # fmt: skip
