"""The demo bundle seeded by `make run`: valid, idempotent, scripted unless a key is set."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.documents import TextPart
from agents.models import Model
from agents.providers.base import LLMMessage, ProviderRequest, ProviderResponse
from agents.providers.registry import provider_for
from agents.selectors import agent_names, model_load, prompt_load, prompt_names
from config import env
from tenancy.models import Role, Tenant
from tests.factories import make_tenant
from threads.models import Message, Thread
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.lifecycle import thread_open
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo() -> Tenant:
    return make_tenant("demo")


@pytest.fixture
def member_of_demo(demo: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(demo, Role.MEMBER)


ENV_NAMES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


def _seed(settings: Settings, variables: dict[str, str]) -> str:
    """seed_demo_agents as `make run` runs it with the provider ``variables`` set."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ENV_NAMES:
            patch.delenv(name, raising=False)
        for name, value in variables.items():
            patch.setenv(name, value)
        settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = env.platform_provider_credentials()
        settings.PROVIDER_BASE_URLS_ALLOWED = env.provider_base_urls_allowed()
    out = StringIO()
    call_command("seed_demo_agents", stdout=out)
    return out.getvalue()


def test_without_provider_keys_the_demo_uses_the_labelled_scripted_model(
    demo: Tenant, settings: Settings
) -> None:
    output = _seed(settings, {})

    assert "model: scripted (no provider key configured)" in output
    assert agent_names(tenant=demo) == ["assistant", "coordinator", "writing_pair"]
    assert prompt_names(tenant=demo) == [
        "assistant", "coordinator", "reviewer", "summarize", "writer",
    ]  # fmt: skip
    assert model_load(tenant=demo, name="demo_model").kind == "scripted"


def test_with_an_openai_key_the_demo_uses_openai(demo: Tenant, settings: Settings) -> None:
    output = _seed(settings, {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://llm:1/v1"})

    spec = model_load(tenant=demo, name="demo_model")
    demo.refresh_from_db()
    assert "model: openai gpt-4o-mini" in output
    assert (spec.kind, spec.base_url, spec.api_key) == ("openai", "http://llm:1/v1", "sk-test")
    assert spec.operator_endpoint  # the operator's own base URL
    assert demo.platform_credentials is True  # the explicit grant


def test_a_demo_model_on_the_platform_env_moves_to_the_platform_credential(
    demo: Tenant, settings: Settings
) -> None:
    """The upgrade path: a demo model seeded before platform credentials named
    ``api_key_env: OPENAI_API_KEY``; seeding again moves it to ``platform:openai``."""
    _seed(settings, {"OPENAI_API_KEY": "sk-test"})
    Model.objects.for_tenant(demo).filter(name="demo_model").update(
        credential="", api_key_env="OPENAI_API_KEY"
    )

    _seed(settings, {"OPENAI_API_KEY": "sk-test"})

    row = Model.objects.for_tenant(demo).get(name="demo_model")
    assert (row.credential, row.api_key_env) == ("platform:openai", "")
    assert model_load(tenant=demo, name="demo_model").api_key == "sk-test"


def test_with_an_anthropic_key_the_demo_uses_anthropic(demo: Tenant, settings: Settings) -> None:
    _seed(settings, {"ANTHROPIC_API_KEY": "sk-ant"})

    assert Model.objects.for_tenant(demo).get(name="demo_model").provider == "anthropic"


def test_seeding_twice_changes_nothing_the_second_time(demo: Tenant, settings: Settings) -> None:
    _seed(settings, {})

    assert _seed(settings, {}).endswith("0 changed\n")


def test_a_key_added_later_switches_the_demo_to_the_real_model(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, {})

    _seed(settings, {"OPENAI_API_KEY": "sk-later"})

    assert Model.objects.for_tenant(demo).get(name="demo_model").provider == "openai"


def test_seeding_again_keeps_what_the_tenant_edited_and_reset_restores_it(
    demo: Tenant, member_of_demo: APIClient, settings: Settings
) -> None:
    _seed(settings, {})
    edited = member_of_demo.patch(
        "/api/v1/prompts/assistant", {"prompt": "You are terse."}, format="json"
    )
    assert edited.status_code == 200, edited.json()

    again = _seed(settings, {})
    kept = prompt_load(tenant=demo, name="assistant").prompt[0]
    out = StringIO()
    call_command("seed_demo_agents", "--reset", stdout=out)
    restored = prompt_load(tenant=demo, name="assistant").prompt[0]

    assert again.endswith(
        "0 changed; 1 kept as the tenant has them (make demo-reset restores them)\n"
    )
    assert isinstance(kept, TextPart)
    assert kept.content == "You are terse."
    assert isinstance(restored, TextPart)
    assert restored.content.startswith("You are a friendly")
    assert out.getvalue().endswith("1 changed\n")


def test_a_local_openai_compatible_server_needs_only_its_base_url(
    demo: Tenant, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_MODEL", "llama3.2")
    settings.DEMO_MODEL_IDS = env.demo_model_ids()  # as the settings read it at start-up

    output = _seed(settings, {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})

    spec = model_load(tenant=demo, name="demo_model")
    assert "model: openai llama3.2" in output
    assert (spec.kind, spec.model_id, spec.base_url) == (
        "openai", "llama3.2", "http://127.0.0.1:11434/v1",
    )  # fmt: skip
    assert spec.api_key == env.LOCAL_SERVER_KEY  # a placeholder: the server accepts any value
    assert spec.operator_endpoint  # the operator chose it: the egress guard lets it through
    assert spec.prices.input_per_million is None  # another model's prices are unknown


def test_seed_demo_agents_refuses_production(demo: Tenant, settings: Settings) -> None:
    settings.PLATFORM_MODE = "production"

    with pytest.raises(CommandError, match="not in production"):
        call_command("seed_demo_agents")


def _ask(demo: Tenant, *messages: LLMMessage) -> ProviderResponse:
    spec = model_load(tenant=demo, name="demo_model")
    system = prompt_load(tenant=demo, name="assistant").prompt[0]
    assert isinstance(system, TextPart)
    request = ProviderRequest(messages=(LLMMessage.system(system.content), *messages))
    return provider_for(spec).generate(request)


def test_the_scripted_assistant_calls_current_time_then_reports_it(
    demo: Tenant, settings: Settings
) -> None:
    _seed(settings, {})
    question = LLMMessage.user("What time is it?")

    first = _ask(demo, question)
    call = first.tool_calls[0]
    second = _ask(
        demo,
        question,
        LLMMessage.assistant(None, [call]),
        LLMMessage.tool(tool_call_id=call.id, name=call.name, content="Sunday 12:00 UTC"),
    )

    assert (call.name, call.arguments) == ("current_time", {"timezone": "UTC"})
    assert first.finish_reason == "tool_calls"
    assert second.content == "It is Sunday 12:00 UTC. (scripted demo model)"
    assert first.provider == "scripted"


def test_the_scripted_assistant_counts_the_users_words(demo: Tenant, settings: Settings) -> None:
    _seed(settings, {})

    response = _ask(demo, LLMMessage.user("count these four words"))

    assert response.tool_calls[0].name == "count_words"
    assert response.tool_calls[0].arguments == {"text": "count these four words"}


def test_the_scripted_assistant_says_it_is_scripted(demo: Tenant, settings: Settings) -> None:
    _seed(settings, {})

    response = _ask(demo, LLMMessage.user("hello there"))

    assert response.content.startswith("This is the scripted demo model")


def test_the_demo_coordinator_delegates_to_the_writing_pair_on_a_child_thread(
    demo: Tenant, settings: Settings
) -> None:
    """The scripted demo runs end to end in process: the coordinator calls the writing pair
    (blocking), which runs its session on a child thread, and reports the outcome."""
    _seed(settings, {})
    parent = thread_open(tenant=demo, agent_name="coordinator")
    message_queue(thread=parent, role="user", content="Write a line about the sea")

    thread_drive(thread_id=parent.pk, runtime=Runtime(retry_base_delay_s=0))

    child = Thread.objects.get(parent=parent)
    assert child.agent_name == "writing_pair"
    assert child.terminated_at is not None  # non-resumable: closed after delivering
    answer = Message.objects.filter(thread=parent, role="assistant").order_by("-seq").first()
    assert answer is not None
    assert (answer.content or "").startswith("The writing pair finished (scripted coordinator):")
    assert "Review: vivid" in (answer.content or "")
