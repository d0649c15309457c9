"""Remote A2A agents (connectors.a2a): registered over the REST API with a write-only secret,
their card fetched from a real A2A agent (the ``a2a-sdk``'s, on loopback, requiring a bearer)
through the egress guard, referenced in prompts as ``a2a:<name>``, and called as a tool: the
answer of a completed task, a task asking for input and a follow-up in its context, a task
that outlives the call cancelled, an agent that does not stream, refused credentials, and a
card naming another origin — each a tool result, never an exception.

Rows are committed (``transaction=True``): nothing is fetched inside a transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.registry import ToolResult
from connectors.a2a import a2a_agent_save
from connectors.models import A2aAgent
from connectors.tools import remote_call, remote_tools
from tenancy.models import Role, Tenant
from tests.connectors.a2a_peer import TOKEN, Peer, a2a_peer

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1/a2a-agents"


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with a2a_peer() as running:
        yield running


@pytest.fixture(scope="module")
def plain_peer() -> Iterator[Peer]:
    """An agent whose card says it does not stream."""
    with a2a_peer(streaming=False) as running:
        yield running


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


def _agent(tenant: Tenant, peer: Peer, name: str = "translator", **changes: Any) -> A2aAgent:
    data = {"name": name, "url": peer.url, "auth": {"type": "bearer", "token": TOKEN}, **changes}
    return a2a_agent_save(tenant=tenant, data=data)


def _send(tenant: Tenant, name: str = "translator", **arguments: Any) -> ToolResult:
    (tool,) = remote_tools(tenant=tenant, ref=f"a2a:{name}").tools
    return remote_call(tenant=tenant, tool=tool, arguments=arguments)


def test_a_registered_agent_shows_its_card_and_never_its_token(
    admin: APIClient, peer: Peer
) -> None:
    body = {"name": "translator", "url": peer.url, "auth": {"type": "bearer", "token": TOKEN}}

    created = admin.post(BASE, body, format="json")
    card = admin.get(f"{BASE}/translator/card")
    detail = admin.get(f"{BASE}/translator")
    listed = admin.get(BASE)

    assert created.status_code == 201, created.json()
    assert created.json()["tool"] == "translator__send_message"
    assert created.json()["card"] is None
    assert card.status_code == 200, card.json()
    assert card.json()["error"] is None
    assert card.json()["card"]["name"] == "translator"
    summary = detail.json()["card"]
    assert summary["interface"] == f"{peer.url}rpc"
    assert summary["skills"] == [{"id": "french", "name": "French", "description": "Into French."}]
    assert detail.json()["health"]["ok"] is True
    assert [item["name"] for item in listed.json()["results"]] == ["translator"]
    for response in (created, card, detail, listed):
        assert TOKEN not in response.content.decode()
    row = A2aAgent.objects.get(name="translator")
    assert row.secret_encrypted is not None
    assert TOKEN.encode() not in bytes(row.secret_encrypted)


def test_bad_input_is_a_400_naming_the_field_and_another_tenant_sees_nothing(
    admin: APIClient, tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient],
    peer: Peer, settings: Settings,
) -> None:  # fmt: skip
    _agent(tenant, peer)
    settings.EGRESS_ALLOWED_NETWORKS = []
    intruder = client_for(other_tenant, Role.ADMIN)

    private = admin.post(BASE, {"name": "inside", "url": "http://10.1.2.3/"}, format="json")
    unknown = admin.post(BASE, {"name": "x", "url": "https://a.example", "tools": 1},
                         format="json")  # fmt: skip
    bad_name = admin.post(BASE, {"name": "Bad Name", "url": "https://a.example"}, format="json")
    taken = admin.post(BASE, {"name": "translator", "url": "https://a.example"}, format="json")

    assert private.status_code == 400
    assert private.json()["error"]["field"] == "url"
    assert unknown.status_code == 400
    assert "tools" in str(unknown.json()["error"])
    assert bad_name.status_code == 400
    assert bad_name.json()["error"]["field"] == "name"
    assert taken.status_code == 409
    assert intruder.get(f"{BASE}/translator").status_code == 404
    assert intruder.post(f"{BASE}/translator/refresh").status_code == 404
    assert intruder.get(BASE).json()["results"] == []
    assert remote_tools(tenant=other_tenant, ref="a2a:translator").tools == ()


def test_the_agents_answer_is_the_tool_result_with_the_ids_to_go_on_with(
    tenant: Tenant, peer: Peer
) -> None:
    _agent(tenant, peer)

    (tool,) = remote_tools(tenant=tenant, ref="a2a:translator").tools
    result = remote_call(tenant=tenant, tool=tool, arguments={"message": "good morning"})

    assert tool.name == "translator__send_message"
    assert tool.parameters["required"] == ["message"]
    assert result.status == "success", result.error
    text = str(result.result)
    assert text.startswith("Bonjour! (good morning)\n[task completed; context_id: ")
    assert "good morning" in peer.calls
    row = A2aAgent.objects.get(tenant=tenant, name="translator")
    assert row.card["name"] == "translator"  # fetched by the call, cached
    assert "Into French." in remote_tools(tenant=tenant, ref="a2a:translator").tools[0].description


def test_a_task_asking_for_input_is_answered_in_its_context(tenant: Tenant, peer: Peer) -> None:
    _agent(tenant, peer)

    asked = _send(tenant, message="translate this, which way?")
    trailer = str(asked.result).rsplit("[", 1)[1]
    context_id = trailer.split("context_id: ")[1].split(";")[0]
    task_id = trailer.split("task_id: ")[1].rstrip("]")
    answered = _send(tenant, message="French", context_id=context_id, task_id=task_id)

    assert asked.status == "success", asked.error
    assert str(asked.result).startswith("The agent needs more input: Into which language?")
    assert "[task input_required;" in str(asked.result)
    assert answered.status == "success", answered.error
    assert str(answered.result).startswith("Bonjour! (French)")
    assert f"task_id: {task_id}]" in str(answered.result)


def test_a_task_outliving_the_call_is_cancelled_and_reported(tenant: Tenant, peer: Peer) -> None:
    _agent(tenant, peer, call_timeout_s=2)

    result = _send(tenant, message="slow please")

    assert result.status == "error"
    assert result.error_code == "a2a_timeout"
    assert "was still working when the call's 2 s ran out; it was cancelled" in str(result.error)
    task_id = str(result.error).split("the task ")[1].split(" ")[0]
    assert task_id in peer.cancelled
    health = A2aAgent.objects.get(tenant=tenant).last_error
    assert health.startswith("A2A agent 'translator' could not be reached: the task")


def test_an_agent_that_does_not_stream_is_polled(tenant: Tenant, plain_peer: Peer) -> None:
    _agent(tenant, plain_peer, name="plain")

    result = _send(tenant, "plain", message="hello")

    assert result.status == "success", result.error
    assert str(result.result).startswith("Bonjour! (hello)\n[task completed;")


def test_refused_credentials_and_a_foreign_endpoint_are_failures_naming_the_agent(
    tenant: Tenant, peer: Peer
) -> None:
    _agent(tenant, peer, name="wrong", auth={"type": "bearer", "token": "not-the-token"})
    foreign = _agent(tenant, peer, name="moved")
    foreign.card = {"name": "moved", "supportedInterfaces": [
        {"url": "https://elsewhere.example/rpc", "protocolBinding": "JSONRPC"}]}  # fmt: skip
    foreign.card_fetched_at = foreign.updated_at
    foreign.save()

    refused = _send(tenant, "wrong", message="hi")
    moved = _send(tenant, "moved", message="hi")

    assert refused.status == "error"
    assert refused.error_code == "a2a_unauthorized"
    assert str(refused.error) == (
        "A2A agent 'wrong' could not be reached: the server refused the credentials (HTTP 401)"
    )
    assert moved.status == "error"
    assert moved.error_code == "a2a_foreign_endpoint"
    assert "credentials are sent only to the registered URL's origin" in str(moved.error)
    assert "hi" not in peer.calls


def test_an_egress_refusal_is_a_failure_naming_the_agent(
    tenant: Tenant, peer: Peer, settings: Settings
) -> None:
    _agent(tenant, peer)
    settings.EGRESS_ALLOWED_NETWORKS = []
    settings.EGRESS_ALLOWED_HOSTS = []

    result = _send(tenant, message="hi")

    assert result.status == "error"
    assert result.error_code == "egress_refused"
    assert str(result.error).startswith("A2A agent 'translator' may not be reached:")
