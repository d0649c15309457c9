"""The egress guard (common.egress): one table of refused destinations, each proved refused
for a model call through the real openai and anthropic SDKs and for a webhook delivery, with
the loopback server behind it receiving nothing; the resolver is asked once and the checked
address is the one connected to; a redirect is never followed; what the operator allow-lists
works; and a URL is judged when it is saved, without resolving it.

The test run allows loopback (tests/environment.py); every test here starts from nothing
allowed (``_nothing_allowed``) and allows what it needs."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.base import (
    LLMMessage,
    ModelSpec,
    Provider,
    ProviderError,
    ProviderRequest,
    accumulate,
)
from agents.providers.chain import ProviderChainFailed, generate_with_fallbacks
from agents.providers.openai_provider import OpenAIProvider
from common.egress import destination_problem, egress_client
from tenancy.models import Tenant
from tests.factories import make_api_key, make_thread
from tests.fakes.egress import Listener, Resolver, redirect_to
from tests.fakes.llm_servers import (
    FakeAnthropicServer,
    FakeLLMServer,
    FakeOpenAIServer,
    Reply,
    serve_openai,
)
from threads.events import publish
from threads.events import webhooks as enqueue_module
from threads.models import WebhookDelivery
from threads.services import webhooks as webhooks_module
from threads.services.webhooks import endpoint_save, webhook_deliver

NAME = "dest.tenant.test"
HELLO = ProviderRequest(messages=(LLMMessage.user("hello"),))
SETTING = "EGRESS_ALLOWED_NETWORKS"
LOOPBACK = "a loopback address"
PRIVATE = "a private address"
# (what the name resolves to, the rule the refusal names)
REFUSED = [
    pytest.param(("127.0.0.1",), LOOPBACK, id="loopback"),
    pytest.param(("10.1.2.3",), PRIVATE, id="10/8"),
    pytest.param(("172.16.0.5",), PRIVATE, id="172.16/12"),
    pytest.param(("192.168.1.5",), PRIVATE, id="192.168/16"),
    pytest.param(("169.254.169.254",), "the cloud metadata address", id="metadata"),
    pytest.param(("100.64.0.5",), "a shared (carrier-grade NAT) address", id="cgnat"),
    pytest.param(("::1",), LOOPBACK, id="ipv6-loopback"),
    pytest.param(("fc00::5",), "a unique-local address", id="fc00::/7"),
    pytest.param(("::ffff:127.0.0.1",), "which embeds 127.0.0.1, " + LOOPBACK, id="v4-mapped"),
    pytest.param(("93.184.215.14", "127.0.0.1"), LOOPBACK, id="public-then-private"),
]
PROVIDERS: dict[str, tuple[type[FakeLLMServer], Callable[[ModelSpec], Provider]]] = {
    "openai": (FakeOpenAIServer, OpenAIProvider),
    "anthropic": (FakeAnthropicServer, AnthropicProvider),
}


@pytest.fixture(autouse=True)
def _nothing_allowed(settings: Any) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = []
    settings.EGRESS_ALLOWED_HOSTS = []


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    fake = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    yield from serve_openai()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as server:
        yield server


def _spec(kind: str, host: str, port: int, **fields: Any) -> ModelSpec:
    server_class, _ = PROVIDERS[kind]
    base_url = f"http://{host}:{port}{server_class.prefix}"
    return ModelSpec(
        name="m", kind=kind, model_id="test", base_url=base_url, api_key="k",  # type: ignore[arg-type]
        config={"timeout_s": 5}, **fields,
    )  # fmt: skip


def _refusal(provider: Provider, *, stream: bool = False) -> ProviderError:
    def call() -> object:
        return accumulate(provider.stream(HELLO)) if stream else provider.generate(HELLO)

    with pytest.raises(ProviderError) as caught:
        call()
    return caught.value


# Model calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
@pytest.mark.parametrize(("addresses", "rule"), REFUSED)
def test_a_model_call_to_a_refused_address_never_connects(
    kind: str, addresses: tuple[str, ...], rule: str, resolver: Resolver, listener: Listener
) -> None:
    resolver.answer(NAME, addresses)
    error = _refusal(PROVIDERS[kind][1](_spec(kind, NAME, listener.port)))

    assert (error.code, error.retryable) == ("egress_refused", False)
    assert f"{NAME} resolves to " in error.message
    assert f"{rule}: outbound calls to tenant-chosen URLs may not reach" in error.message
    assert f"(allow it with {SETTING})" in error.message
    assert listener.connections == 0


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
@pytest.mark.parametrize(
    ("host", "rule"),
    [("127.0.0.1", LOOPBACK), ("[::ffff:127.0.0.1]", "embeds 127.0.0.1"), ("10.1.2.3", PRIVATE)],
)
def test_a_model_base_url_with_a_refused_literal_address_never_connects(
    kind: str, host: str, rule: str, listener: Listener
) -> None:
    error = _refusal(PROVIDERS[kind][1](_spec(kind, host, listener.port)), stream=True)

    assert (error.code, error.retryable) == ("egress_refused", False)
    assert rule in error.message
    assert listener.connections == 0


def test_a_refused_model_is_not_retried_by_the_chain(listener: Listener) -> None:
    spec = _spec("openai", "127.0.0.1", listener.port)

    with pytest.raises(ProviderChainFailed) as caught:
        generate_with_fallbacks(spec, HELLO, stream=False, sleep=lambda _: None)

    [attempt] = caught.value.attempts
    assert (attempt.code, attempt.retryable) == ("egress_refused", False)


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_a_model_connects_to_the_address_it_checked_not_a_second_lookup(
    kind: str, resolver: Resolver, settings: Any
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server_class, provider = PROVIDERS[kind]
    with server_class() as checked, Listener("127.0.0.2", checked.port) as rebound:
        checked.enqueue(Reply(text="from the checked address"))
        resolver.answer(NAME, ["127.0.0.1"], ["127.0.0.2"])

        response = provider(_spec(kind, NAME, checked.port)).generate(HELLO)

        assert response.content == "from the checked address"
        assert checked.requests[0].headers["host"] == f"{NAME}:{checked.port}"
        assert resolver.lookups == [NAME]
        assert rebound.connections == 0


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_a_model_redirect_is_not_followed(kind: str, settings: Any) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with Listener("127.0.0.2") as private:
        target = f"http://127.0.0.2:{private.port}/v1/chat/completions"
        with Listener(answer=redirect_to(target)) as allowed:
            error = _refusal(PROVIDERS[kind][1](_spec(kind, "127.0.0.1", allowed.port)))

        assert (error.http_status, error.retryable) == (302, False)
        assert f"redirects are not followed (to {target})" in error.message
        assert len(allowed.requests) == 1
        assert private.connections == 0


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_an_allow_listed_local_model_server_answers(kind: str, settings: Any) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    server_class, provider = PROVIDERS[kind]
    with server_class() as server:
        server.enqueue(Reply(text="local"), Reply(text="streamed"))

        answer = provider(_spec(kind, "127.0.0.1", server.port)).generate(HELLO)
        streamed = accumulate(provider(_spec(kind, "127.0.0.1", server.port)).stream(HELLO))

    assert (answer.content, streamed.content) == ("local", "streamed")


def test_an_allow_listed_host_suffix_may_resolve_anywhere(
    resolver: Resolver, openai_server: FakeOpenAIServer, settings: Any
) -> None:
    settings.EGRESS_ALLOWED_HOSTS = ["*.tenant.test"]
    resolver.answer(NAME, ["127.0.0.1"])
    openai_server.enqueue(Reply(text="by name"))

    response = OpenAIProvider(_spec("openai", NAME, openai_server.port)).generate(HELLO)

    assert response.content == "by name"


def test_an_operator_endpoint_skips_the_address_rules(openai_server: FakeOpenAIServer) -> None:
    openai_server.enqueue(Reply(text="operator's server"))
    spec = _spec("openai", "127.0.0.1", openai_server.port, operator_endpoint=True)

    assert OpenAIProvider(spec).generate(HELLO).content == "operator's server"


def test_the_client_ignores_proxy_variables(
    monkeypatch: pytest.MonkeyPatch, listener: Listener, settings: Any
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with Listener() as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
        with egress_client(timeout=5) as client:
            status = client.post(f"http://127.0.0.1:{listener.port}/", content=b"{}").status_code

        assert (status, len(listener.requests), proxy.connections) == (200, 1, 0)


# Webhooks ------------------------------------------------------------------------------------


@pytest.fixture
def deliveries(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Webhook attempts run here: http allowed, deliveries not sent to a broker."""
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_CACHE_S = 0.0
    monkeypatch.setattr(enqueue_module, "delivery_send", lambda *_: True)
    monkeypatch.setattr(webhooks_module, "delivery_send", lambda *_: True)


def _delivered(tenant: Tenant, url: str, settings: Any) -> WebhookDelivery:
    """Save an endpoint for ``url`` (its address allowed while saving), then attempt one
    delivery with the settings as they were."""
    networks = settings.EGRESS_ALLOWED_NETWORKS
    settings.EGRESS_ALLOWED_NETWORKS = ["0.0.0.0/0", "::/0"]
    endpoint_save(tenant=tenant, data={"url": url, "event_types": ["thread.status"]})
    settings.EGRESS_ALLOWED_NETWORKS = networks
    thread = make_thread(tenant)
    publish(thread, "thread.status", {"status": "completed"})
    delivery = WebhookDelivery.objects.get(thread_id=thread.pk)
    webhook_deliver(delivery.pk)
    delivery.refresh_from_db()
    return delivery


@pytest.mark.django_db
@pytest.mark.usefixtures("deliveries")
@pytest.mark.parametrize(("addresses", "rule"), REFUSED)
def test_a_webhook_to_a_refused_address_never_connects(
    tenant: Tenant, addresses: tuple[str, ...], rule: str, resolver: Resolver,
    listener: Listener, settings: Any,
) -> None:  # fmt: skip
    resolver.answer(NAME, addresses)

    delivery = _delivered(tenant, f"http://{NAME}:{listener.port}/hooks", settings)

    assert (delivery.status, delivery.last_status_code) == ("pending", None)
    assert delivery.last_error.startswith(f"{NAME} resolves to ")
    assert f"{rule}: outbound calls to tenant-chosen URLs" in delivery.last_error
    assert f"(allow it with {SETTING})" in delivery.last_error
    assert delivery.log[-1]["error"] == delivery.last_error
    assert listener.connections == 0


@pytest.mark.django_db
@pytest.mark.usefixtures("deliveries")
def test_a_webhook_connects_to_the_address_it_checked(
    tenant: Tenant, resolver: Resolver, listener: Listener, settings: Any
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with Listener("127.0.0.2", listener.port) as rebound:
        resolver.answer(NAME, ["127.0.0.1"], ["127.0.0.2"])

        delivery = _delivered(tenant, f"http://{NAME}:{listener.port}/hooks", settings)

        assert (delivery.status, delivery.last_status_code) == ("delivered", 200)
        [(headers, _)] = listener.requests
        assert headers["host"] == f"{NAME}:{listener.port}"
        assert headers["webhook-id"] == str(delivery.pk)
        assert resolver.lookups == [NAME]
        assert rebound.connections == 0


@pytest.mark.django_db
@pytest.mark.usefixtures("deliveries")
def test_a_webhook_redirect_is_not_followed(tenant: Tenant, settings: Any) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with (
        Listener("127.0.0.2") as private,
        Listener(answer=redirect_to(f"http://127.0.0.2:{private.port}/hooks")) as allowed,
    ):
        delivery = _delivered(tenant, f"http://127.0.0.1:{allowed.port}/hooks", settings)

        assert (delivery.last_status_code, delivery.last_error) == (
            302, "the receiver answered 302",
        )  # fmt: skip
        assert len(allowed.requests) == 1
        assert private.connections == 0


@pytest.mark.django_db
@pytest.mark.usefixtures("deliveries")
def test_an_allow_listed_local_receiver_gets_the_webhook(
    tenant: Tenant, listener: Listener, settings: Any
) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["127.0.0.1/32"]

    delivery = _delivered(tenant, f"http://127.0.0.1:{listener.port}/hooks", settings)

    assert (delivery.status, delivery.last_status_code, delivery.last_error) == (
        "delivered", 200, "",
    )  # fmt: skip
    assert len(listener.requests) == 1


# Definition time -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://api.example.com/v1", None),
        ("http://203.0.114.9:8080/v1", None),
        ("ftp://files.example.com/", "the URL must use http or https, not ftp"),
        ("https:///v1", "the URL has no host"),
        ("https://example.com:port/", "the URL is malformed"),
        ("http://10.0.0.5/v1", "10.0.0.5 is a private address: outbound calls to tenant-chosen "
         "URLs may not reach private networks (allow it with EGRESS_ALLOWED_NETWORKS)"),
        ("http://169.254.169.254/latest", "169.254.169.254 is the cloud metadata address"),
        ("http://[::ffff:10.0.0.5]/", "::ffff:10.0.0.5 embeds 10.0.0.5, a private address"),
        ("http://[64:ff9b::a9fe:a9fe]/",
         "64:ff9b::a9fe:a9fe embeds 169.254.169.254, the cloud metadata address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("http://0.0.0.0:8000/", "0.0.0.0 is an unspecified address"),
        ("http://localhost:11434/v1", "localhost is a loopback name: outbound calls to "
         "tenant-chosen URLs may not reach loopback addresses (allow it with "
         "EGRESS_ALLOWED_HOSTS or EGRESS_ALLOWED_NETWORKS)"),
        ("http://api.LocalHost./v1", "api.localhost. is a loopback name"),
    ],
)  # fmt: skip
def test_destination_problem_judges_a_url_without_resolving_it(
    url: str, problem: str | None, resolver: Resolver
) -> None:
    found = destination_problem(url)

    assert (found if problem is None else (found or "")[: len(problem)]) == problem
    assert resolver.lookups == []


def test_destination_problem_follows_the_allow_lists(settings: Any) -> None:
    settings.EGRESS_ALLOWED_NETWORKS = ["10.0.0.0/8", "127.0.0.1/32"]
    settings.EGRESS_ALLOWED_HOSTS = ["metadata.internal"]

    assert destination_problem("http://10.9.8.7/v1") is None
    assert destination_problem("http://[::ffff:10.9.8.7]/v1") is None
    assert destination_problem("http://localhost:11434/v1") is None
    assert destination_problem("http://metadata.internal/") is None
    assert "172.16.0.1 is a private address" in (destination_problem("http://172.16.0.1") or "")


@pytest.mark.django_db
def test_a_webhook_url_the_guard_refuses_is_a_400_naming_url(
    tenant: Tenant, api_client: Any
) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(tenant).secret}")

    response = api_client.post(
        "/api/v1/webhooks",
        {"url": "https://169.254.169.254/hooks", "event_types": ["thread.status"]},
        format="json",
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", "url")
    assert error["message"].startswith(
        "url may not be used: 169.254.169.254 is the cloud metadata address"
    )
