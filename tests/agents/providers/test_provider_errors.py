"""A failed model call names the URL it tried (never a key) and the setting to check: through
the real SDKs against a loopback port nobody listens on and loopback servers answering 401 and
404 in the provider's wire format."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from pytest_django.fixtures import Settings

from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.base import LLMMessage, ModelSpec, ProviderError, ProviderRequest
from agents.providers.openai_provider import OpenAIProvider
from tests.fakes.llm_servers import ErrorReply, FakeAnthropicServer, FakeOpenAIServer

KEY = "sk-secret-0123456789"
HELLO = ProviderRequest(messages=(LLMMessage.user("hello"),))


@pytest.fixture(autouse=True)
def _loopback_reachable(settings: Settings) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture
def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _fail(provider: Any) -> ProviderError:
    with pytest.raises(ProviderError) as failure:
        provider.generate(HELLO)
    assert KEY not in failure.value.message
    return failure.value


def _openai(base_url: str, *, platform: bool) -> OpenAIProvider:
    return OpenAIProvider(
        ModelSpec(name="demo_model", kind="openai", model_id="local-llm", base_url=base_url,
                  api_key=KEY, operator_endpoint=platform)
    )  # fmt: skip


def test_an_unreachable_platform_endpoint_names_the_url_and_openai_base_url(
    closed_port: int,
) -> None:
    url = f"http://127.0.0.1:{closed_port}/v1"

    error = _fail(_openai(url, platform=True))

    assert error.message == (
        f"openai model 'demo_model' (local-llm) could not be reached at {url} (connection "
        "refused): check OPENAI_BASE_URL or the model's base_url"
    )
    assert error.retryable is True


def test_an_unreachable_tenant_endpoint_names_the_models_base_url(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/v1"

    error = _fail(_openai(url, platform=False))

    assert error.message.endswith(f"at {url} (connection refused): check the model's base_url")


def test_the_url_is_shown_without_a_user_password_or_query(closed_port: int) -> None:
    error = _fail(
        _openai(f"http://user:hunter2@127.0.0.1:{closed_port}/v1?key=abc", platform=False)
    )

    assert f"at http://127.0.0.1:{closed_port}/v1 (connection refused)" in error.message
    assert "hunter2" not in error.message
    assert "abc" not in error.message


def test_a_refused_platform_key_names_openai_api_key(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(
        ErrorReply(401, "Incorrect API key provided", error_type="invalid_request_error",
                   code="invalid_api_key")
    )  # fmt: skip

    error = _fail(_openai(openai_server.base_url, platform=True))

    assert error.message == (
        f"openai model 'demo_model' (local-llm) at {openai_server.base_url} answered HTTP 401: "
        "invalid_request_error: Incorrect API key provided: check OPENAI_API_KEY (the platform "
        "credential's key)"
    )
    assert (error.http_status, error.retryable) == (401, False)


def test_a_refused_tenant_key_names_the_models_credential(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(ErrorReply(401, "bad key", error_type="invalid_request_error"))

    error = _fail(_openai(openai_server.base_url, platform=False))

    assert error.message.endswith(
        "answered HTTP 401: invalid_request_error: bad key: check the model's credential or API key"
    )


def test_an_unknown_model_names_the_model_id_and_openai_model(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.enqueue(
        ErrorReply(404, "The model `local-llm` does not exist", error_type="invalid_request_error",
                   code="model_not_found")
    )  # fmt: skip

    error = _fail(_openai(openai_server.base_url, platform=True))

    assert error.message == (
        f"openai model 'demo_model' (local-llm) at {openai_server.base_url} answered HTTP 404: "
        "invalid_request_error: The model `local-llm` does not exist: check the model's "
        "model_id (the demo model's comes from OPENAI_MODEL) and OPENAI_BASE_URL or the "
        "model's base_url"
    )


def test_a_wrong_path_of_a_tenant_endpoint_names_model_id_and_base_url(
    openai_server: FakeOpenAIServer,
) -> None:
    # The server answers 404 for any path but its own: a base URL without /v1.
    base = openai_server.base_url.removesuffix("/v1")

    error = _fail(_openai(base, platform=False))

    assert error.message.startswith(f"openai model 'demo_model' (local-llm) at {base} ")
    assert error.message.endswith(
        "HTTP 404: api_error: no route /chat/completions: check the model's model_id and base_url"
    )


def test_a_refused_platform_anthropic_key_names_anthropic_api_key(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.enqueue(
        ErrorReply(401, "invalid x-api-key", error_type="authentication_error")
    )
    spec = ModelSpec(name="demo_model", kind="anthropic", model_id="claude-x",
                     base_url=anthropic_server.base_url, api_key=KEY,
                     operator_endpoint=True)  # fmt: skip

    error = _fail(AnthropicProvider(spec))

    assert error.message == (
        f"anthropic model 'demo_model' (claude-x) at {anthropic_server.base_url} answered "
        "HTTP 401: authentication_error: invalid x-api-key: check ANTHROPIC_API_KEY (the "
        "platform credential's key)"
    )
