"""The registry as each tenant sees it: listings over REST and in definition validation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.registry import Registry, effect, hook, thread_endpoint, tool, use_registry
from tenancy.models import Role, Tenant
from tests.answers import assert_answers, pages

pytestmark = pytest.mark.django_db


class InvoiceArgs(BaseModel):
    amount: int


@pytest.fixture
def operator_registry(settings: Settings) -> Iterator[Registry]:
    settings.AGENT_REGISTRY_RESTRICTED = {"tools": {"send_invoice": ["acme"]}}
    with use_registry() as scoped:

        @tool(description="Send an invoice", args=InvoiceArgs)
        def send_invoice(state: Any, args: InvoiceArgs) -> str:
            return "sent"

        @tool(description="Say hello")
        def say_hello(state: Any) -> str:
            return "hello"

        @hook("filter_messages", id="drop_drafts")
        def drop_drafts(state: Any, messages: Any, context: Any) -> Any:
            return messages

        @effect(description="Remind later")
        def remind(state: Any) -> None:
            return None

        @thread_endpoint("reports/[id]", methods=["GET"])
        def report(request: Any, state: Any, params: dict[str, str]) -> dict[str, str]:
            return params

        yield scoped


def _get(client: APIClient, kind: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/registry/{kind}")
    assert response.status_code == 200
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_listings_show_restricted_items_only_to_listed_tenants(
    operator_registry: Registry,
    tenant: Tenant,
    other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    acme = client_for(tenant, Role.READ_ONLY)
    globex = client_for(other_tenant, Role.READ_ONLY)

    assert {t["name"] for t in _get(acme, "tools")} == {"send_invoice", "say_hello"}
    assert {t["name"] for t in _get(globex, "tools")} == {"say_hello"}


def test_listings_describe_each_item(
    operator_registry: Registry, tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.READ_ONLY)

    invoice = next(t for t in _get(client, "tools") if t["name"] == "send_invoice")

    assert invoice["description"] == "Send an invoice"
    assert invoice["args_schema"]["properties"]["amount"]["type"] == "integer"
    # Registered here, outside discovery: the module is its own source.
    source = {"kind": "module", "name": __name__, "version": None}
    assert invoice["source"] == source
    assert _get(client, "hooks") == [
        {"id": "drop_drafts", "hook": "filter_messages", "source": source}
    ]
    assert _get(client, "effects") == [
        {"name": "remind", "description": "Remind later", "args_schema": None, "source": source}
    ]
    assert _get(client, "endpoints") == [
        {"route": "reports/[id]", "methods": ["GET"], "public": False, "source": source}
    ]


def test_listings_page_in_the_registrys_order_and_answer_their_components(
    operator_registry: Registry, tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.READ_ONLY)

    walked = pages(client, "/api/v1/registry/tools?limit=1")
    back = client.get(walked[-1]["previous"]).json()

    assert [[t["name"] for t in page["results"]] for page in walked] == [
        ["send_invoice"], ["say_hello"],
    ]  # fmt: skip
    assert [t["name"] for t in back["results"]] == ["send_invoice"]
    assert back["previous"] is None
    for kind, component in [
        ("tools", "RegistryTool"),
        ("hooks", "RegistryHook"),
        ("effects", "RegistryEffect"),
        ("endpoints", "RegistryEndpoint"),
    ]:
        listed = client.get(f"/api/v1/registry/{kind}").json()
        assert listed["results"], kind
        assert_answers(f"Paginated{component}List", listed)
    assert client.get("/api/v1/registry/tools?limit=0").json()["error"]["field"] == "limit"
    assert client.get("/api/v1/registry/hooks?cursor=x").json()["error"]["field"] == "cursor"


def test_unknown_listing_is_404(tenant: Tenant, client_for: Callable[..., APIClient]) -> None:
    response = client_for(tenant).get("/api/v1/registry/widgets")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_restricted_tool_is_unknown_to_other_tenants_definitions(
    operator_registry: Registry,
    tenant: Tenant,
    other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    model = {"name": "m", "provider": "scripted", "model_id": "s",
             "config": {"rules": [{"when": {}, "respond": {"text": "ok"}}]}}  # fmt: skip
    prompt = {"name": "p", "tool_description": "d", "prompt": "x", "model": "m",
              "tools": ["send_invoice"], "hooks": ["drop_drafts"]}  # fmt: skip
    answers = {}
    for owner in (tenant, other_tenant):
        client = client_for(owner, Role.MEMBER)
        client.post("/api/v1/models", model, format="json")
        answers[owner.slug] = client.post("/api/v1/prompts", prompt, format="json")

    assert answers["acme"].status_code == 201
    assert answers["globex"].status_code == 400
    assert answers["globex"].json()["error"]["field"] == "tools[0]"
    assert "unknown tool 'send_invoice'" in answers["globex"].json()["error"]["message"]
