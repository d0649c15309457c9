"""The actions routes (respond_action over HTTP) and what the API shows of a paused turn: its
read model, its wait and its events. In process: real PostgreSQL and Redis, the scripted
model, the engine driven by the test. Through a real worker: test_actions_e2e.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.registry import tool
from tenancy.models import Role
from tests.threads.runtime.conftest import Engine, prompt
from threads.events import envelope_of
from threads.models import Action, Event, Thread

Json = dict[str, Any]


@pytest.fixture
def refunds(engine: Engine) -> list[float]:
    refunded: list[float] = []

    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}},
              "required": ["amount"]},
        approval="ask",
    )  # fmt: skip
    def refund(state: Any, args: dict[str, Any]) -> str:
        refunded.append(args["amount"])
        return f"refunded {args['amount']}"

    return refunded


@pytest.fixture
def api(engine: Engine, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(engine.tenant, Role.MEMBER)


@pytest.fixture
def paused(engine: Engine, refunds: list[float]) -> tuple[Thread, Action]:
    """A thread whose turn waits for the approval of a refund (a registry default)."""
    engine.define(
        prompts=[prompt("helper", tools=["refund"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 500}, "id": "r"}])
    engine.script.text("Refunded.")
    engine.send(thread, "refund 500")
    engine.drive(thread)
    return thread, Action.objects.get(thread=thread)


def _url(thread: Thread, action: Action | None = None) -> str:
    base = f"/api/v1/threads/{thread.id}/actions"
    return base if action is None else f"{base}/{action.pk}"


def test_pending_actions_are_listed_read_and_shown_in_the_read_model(
    api: APIClient, paused: tuple[Thread, Action]
) -> None:
    thread, action = paused

    listed = api.get(_url(thread), {"status": "pending"}).json()
    read = api.get(_url(thread, action)).json()
    model = api.get(f"/api/v1/threads/{thread.id}").json()

    assert [item["id"] for item in listed["results"]] == [str(action.pk)]
    assert (listed["next"], listed["previous"]) == (None, None)
    assert read == listed["results"][0]
    assert (read["kind"], read["status"], read["name"], read["arguments"]) == (
        "approval", "pending", "refund", {"amount": 500},
    )  # fmt: skip
    assert read["decisions"] == ["approve", "deny", "edit"]
    assert read["rule"] == {"decision": "ask", "source": "registry", "on_expiry": "deny"}
    assert read["endpoint"] == _url(thread, action)
    assert model["status"] == "waiting_permission"
    assert model["active_turn"]["status"] == "waiting_permission"
    assert [item["id"] for item in model["pending_requests"]] == [str(action.pk)]


def test_respond_approves_and_the_turn_runs_on(
    engine: Engine, api: APIClient, paused: tuple[Thread, Action], refunds: list[float],
    wakes: list[str],
) -> None:  # fmt: skip
    thread, action = paused

    answered = api.post(_url(thread, action), {"decision": "approve"}, format="json")
    engine.drive(thread)
    twice = api.post(_url(thread, action), {"decision": "deny"}, format="json")

    assert answered.status_code == 200, answered.json()
    assert answered.json()["status"] == "approved"
    assert answered.json()["responder"].startswith("api_key:")
    assert refunds == [500]
    assert twice.status_code == 409
    assert twice.json()["error"]["code"] == "action_resolved"
    assert api.get(f"/api/v1/threads/{thread.id}").json()["pending_requests"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "edit", "arguments": {"amount": "all"}}, "arguments"),
        ({"decision": "answer", "data": {}}, "decision"),
        ({"decision": "approve", "extra": 1}, "extra"),
        ({}, "decision"),
        ({"decision": {}, "reason": "0", "arguments": {}, "data": {}}, "decision"),
        ({"decision": ["approve"]}, "decision"),
        ([1, 2], None),
    ],
)
def test_a_bad_answer_is_a_400_naming_the_field(
    api: APIClient, paused: tuple[Thread, Action], body: Any, field: str | None
) -> None:
    thread, action = paused

    response = api.post(_url(thread, action), body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"].get("field") == field


def test_a_read_only_key_sees_actions_but_cannot_answer_them(
    engine: Engine, client_for: Callable[..., APIClient], paused: tuple[Thread, Action]
) -> None:
    thread, action = paused
    reader = client_for(engine.tenant, Role.READ_ONLY)

    assert reader.get(_url(thread, action)).status_code == 200
    assert (
        reader.post(_url(thread, action), {"decision": "approve"}, format="json").status_code == 403
    )
    action.refresh_from_db()
    assert action.status == "pending"


def test_an_unknown_action_is_a_404(api: APIClient, paused: tuple[Thread, Action]) -> None:
    thread, _ = paused
    missing = "01a20000-0000-7000-8000-000000000000"

    assert api.get(f"{_url(thread)}/{missing}").status_code == 404
    assert (
        api.post(f"{_url(thread)}/{missing}", {"decision": "approve"}, format="json").status_code
        == 404
    )
    assert api.get(f"{_url(thread)}/not-an-id").status_code == 404
    assert api.get(_url(thread), {"status": "sleeping"}).status_code == 400


def test_a_wait_answers_when_the_turn_pauses_with_what_the_person_is_asked(
    api: APIClient, paused: tuple[Thread, Action]
) -> None:
    _thread, action = paused
    turn_id = str(action.turn_id)

    waited = api.get(f"/api/v1/turns/{turn_id}/wait", {"timeout": 5}).json()

    assert waited["done"] is False
    assert waited["turn"]["status"] == "waiting_permission"
    assert [item["id"] for item in waited["actions"]] == [str(action.pk)]


def test_action_events_reach_the_tenant_stream_and_carry_the_action(
    paused: tuple[Thread, Action],
) -> None:
    thread, action = paused

    required = Event.objects.get(thread=thread, type="action.required")

    assert required.payload["action_id"] == str(action.pk)
    assert required.payload["action"]["status"] == "pending"
    assert required.turn_id == str(action.turn_id)
    # The envelope carries the action too, replayed as broadcast.
    assert envelope_of(required)["action_id"] == str(action.pk)
    asked = Event.objects.get(thread=thread, type="permission.requested")
    assert envelope_of(asked)["action_id"] == str(action.pk)
    started = Event.objects.filter(thread=thread, type="turn.started").first()
    assert started is not None
    assert envelope_of(started)["action_id"] is None


def test_an_action_is_found_only_under_its_own_thread(
    engine: Engine, api: APIClient, paused: tuple[Thread, Action]
) -> None:
    _, action = paused
    other = engine.thread("helper")

    assert api.get(_url(other, action)).status_code == 404
    assert api.post(_url(other, action), {"decision": "approve"}, format="json").status_code == 404
    action.refresh_from_db()
    assert action.status == "pending"


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "deny", "reason": "no\x00pe"},
        {"decision": "edit", "arguments": {"amount": 1, "note\x00": "x"}},
    ],
)
def test_an_answer_postgresql_cannot_store_is_a_400(
    api: APIClient, paused: tuple[Thread, Action], body: Any
) -> None:
    thread, action = paused

    response = api.post(_url(thread, action), body, format="json")

    assert response.status_code == 400, response.json()
    action.refresh_from_db()
    assert action.status == "pending"


def test_an_answer_with_a_number_json_cannot_hold_is_a_400(
    api: APIClient, paused: tuple[Thread, Action]
) -> None:
    thread, action = paused
    body = '{"decision": "edit", "arguments": {"amount": 1e400}}'  # parses as infinity

    response = api.post(_url(thread, action), data=body, content_type="application/json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == "arguments.amount"
