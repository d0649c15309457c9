"""``POST /api/v1/threads`` with an ``input`` (the thread and its first turn in one request)
and ``POST /api/v1/threads/wait`` (that, then wait for the turn): the in-process engine with
the scripted model runs the turns, PostgreSQL and Redis are real."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import IdempotencyKey, Message, Thread, Turn

pytestmark = pytest.mark.django_db

Json = dict[str, Any]


@pytest.fixture
def api(engine: Engine, client_for: Callable[..., APIClient]) -> APIClient:
    """A member of the engine's tenant, whose agent ``helper`` the scripted model runs."""
    engine.define(
        prompts=[prompt("helper"), prompt("guarded", variables=[{"name": "API_KEY",
                                                                 "required": True}])],
        agents=[
            {"name": "helper", "side_a": {"prompt": "helper"}},
            {"name": "guarded", "side_a": {"prompt": "guarded"}},
        ],
    )  # fmt: skip
    return client_for(engine.tenant, Role.MEMBER)


def waited(response: Any) -> Json:
    """A wait's answer (streamed while the turn had not ended when it was asked)."""
    if response.streaming:
        return dict(json.loads(b"".join(response.streaming_content)))
    return dict(response.json())


def rows(tenant: Tenant) -> tuple[int, int]:
    return (
        Thread.objects.filter(tenant=tenant).count(),
        Turn.objects.filter(tenant=tenant).count(),
    )


# Create with an input ------------------------------------------------------------------------


def test_create_with_input_queues_the_first_turn_and_the_engine_answers_it(
    engine: Engine, api: APIClient
) -> None:
    engine.script.text("Hello there.")

    created = api.post(
        "/api/v1/threads",
        {"agent": "helper", "user_id": "u1", "input": {"content": "hi", "metadata": {"k": 1}}},
        format="json",
    )

    assert created.status_code == 201, created.json()
    body = created.json()
    thread = Thread.objects.get(pk=body["id"])
    (turn,) = Turn.objects.filter(thread=thread)
    assert (body["agent"], body["user_id"], body["started"]) == ("helper", "u1", True)
    assert (body["turn"]["id"], body["turn"]["status"], body["turn"]["source"]) == (
        str(turn.pk), "queued", "submit",
    )  # fmt: skip
    assert body["turn"]["message"]["content"] == "hi"
    assert body["turn"]["message"]["metadata"] == {"k": 1}

    engine.drive(thread)
    answered = api.get(f"/api/v1/turns/{turn.pk}").json()
    written = Message.objects.filter(thread=thread).order_by("seq")

    assert (answered["status"], answered["outcome"]) == ("completed", "stop_on_response")
    assert [(row.role, row.content) for row in written] == [
        ("user", "hi"), ("assistant", "Hello there."),
    ]  # fmt: skip
    assert str(written[0].id) == body["turn"]["message_id"]


def test_create_without_input_answers_as_before(api: APIClient) -> None:
    created = api.post("/api/v1/threads", {"agent": "helper"}, format="json")

    assert created.status_code == 201
    assert "turn" not in created.json()
    assert created.json()["started"] is False
    assert not Turn.objects.filter(thread_id=created.json()["id"]).exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": {"content": ""}}, "input.content"),
        ({"input": {"content": ["hi"]}}, "input.content"),
        ({"input": {"content": "x" * 2_000_000}}, "input.content"),
        ({"input": {"content": "hi", "role": "robot"}}, "input.role"),
        ({"input": {"attachments": [{"name": "a.txt"}]}}, "input.attachments[0].mimeType"),
        ({"input": "hi"}, "input"),
        ({"input": {"content": "hi", "sileent": True}}, "input.sileent"),
        ({"input": {"content": "hi"}, "multitask_strategy": "reject"}, "multitask_strategy"),
    ],
)
def test_a_refused_input_is_a_400_naming_it_and_creates_no_thread(
    engine: Engine, api: APIClient, payload: Json, field: str
) -> None:
    before = rows(engine.tenant)

    response = api.post("/api/v1/threads", {"agent": "helper", **payload}, format="json")

    assert response.status_code in (400, 413), response.json()
    assert response.json()["error"]["field"] == field
    assert rows(engine.tenant) == before


def test_missing_required_variables_refuse_the_thread_and_its_turn(
    engine: Engine, api: APIClient
) -> None:
    before = rows(engine.tenant)

    response = api.post(
        "/api/v1/threads", {"agent": "guarded", "input": {"content": "hi"}}, format="json"
    )

    assert response.status_code == 400
    assert "API_KEY" in response.json()["error"]["message"]
    assert rows(engine.tenant) == before


def test_the_turn_quota_refuses_the_input_and_leaves_no_thread(
    engine: Engine, api: APIClient, settings: Settings
) -> None:
    settings.USAGE_TURNS_PER_MINUTE = 1
    first = api.post(
        "/api/v1/threads", {"agent": "helper", "input": {"content": "a"}}, format="json"
    )
    before = rows(engine.tenant)

    refused = api.post(
        "/api/v1/threads", {"agent": "helper", "input": {"content": "b"}}, format="json"
    )

    assert first.status_code == 201
    assert refused.status_code == 429
    assert rows(engine.tenant) == before


def test_another_tenants_agent_is_refused_as_create_refuses_it(
    engine: Engine, other_tenant: Tenant, client_for: Callable[..., APIClient], api: APIClient
) -> None:
    theirs = client_for(other_tenant, Role.MEMBER)
    plain = theirs.post("/api/v1/threads", {"agent": "helper"}, format="json")

    with_input = theirs.post(
        "/api/v1/threads", {"agent": "helper", "input": {"content": "hi"}}, format="json"
    )
    waiting = theirs.post(
        "/api/v1/threads/wait?timeout=0", {"agent": "helper", "input": {"content": "hi"}},
        format="json",
    )  # fmt: skip

    assert plain.status_code in (400, 404)
    for response in (with_input, waiting):
        assert (response.status_code, response.json()["error"]) == (
            plain.status_code, plain.json()["error"],
        )  # fmt: skip
    assert not Thread.objects.filter(tenant=other_tenant).exists()


def test_a_repeat_with_one_idempotency_key_answers_the_first_thread_and_turn(
    engine: Engine, api: APIClient
) -> None:
    payload = {"agent": "helper", "input": {"content": "hi"}}

    first = api.post("/api/v1/threads", payload, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    again = api.post("/api/v1/threads", payload, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    other = api.post(
        "/api/v1/threads", {**payload, "input": {"content": "bye"}}, format="json",
        HTTP_IDEMPOTENCY_KEY="c-1",
    )  # fmt: skip

    assert (first.status_code, again.status_code) == (201, 201)
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert (other.status_code, other.json()["error"]["code"]) == (409, "idempotency_key_reused")
    assert rows(engine.tenant) == (1, 1)
    assert IdempotencyKey.objects.filter(key="c-1").count() == 1


def test_unknown_keys_are_refused_naming_them(engine: Engine, api: APIClient) -> None:
    for path in ("/api/v1/threads", "/api/v1/threads/wait"):
        response = api.post(
            path, {"agent": "helper", "input": {"content": "hi"}, "inptu": 1}, format="json"
        )

        assert (response.status_code, response.json()["error"]["field"]) == (400, "inptu")
    assert rows(engine.tenant) == (0, 0)


# Create and wait -----------------------------------------------------------------------------


def test_create_and_wait_answers_the_assistants_reply_and_the_thread(
    engine: Engine, api: APIClient
) -> None:
    engine.script.text("Hello there.")

    response = api.post(
        "/api/v1/threads/wait?timeout=5", {"agent": "helper", "input": {"content": "hi"}},
        format="json",
    )  # fmt: skip
    (thread,) = Thread.objects.filter(tenant=engine.tenant)
    engine.drive(thread)  # the wait's body is read once the engine has run the turn
    body = waited(response)

    (turn,) = Turn.objects.filter(thread=thread)
    assert response.status_code == 200
    assert (body["done"], body["turn"]["id"], body["turn"]["status"]) == (
        True, str(turn.pk), "completed",
    )  # fmt: skip
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("user", "hi"), ("assistant", "Hello there."),
    ]  # fmt: skip
    assert (body["thread"]["id"], body["thread"]["agent"]) == (str(thread.pk), "helper")
    assert "turn" not in body["thread"]


def test_create_and_wait_answers_done_false_when_the_timeout_passes_first(
    engine: Engine, api: APIClient
) -> None:
    response = api.post(
        "/api/v1/threads/wait?timeout=0.1", {"agent": "helper", "input": {"content": "hi"}},
        format="json",
    )  # fmt: skip
    body = waited(response)

    assert response.status_code == 200
    assert (body["done"], body["turn"]["status"], body["messages"]) == (False, "queued", [])
    assert body["thread"]["status"] == "queued"


@pytest.mark.parametrize(
    ("query", "payload", "field"),
    [
        ("", {"agent": "helper"}, "input"),
        ("?timeout=9999", {"agent": "helper", "input": {"content": "hi"}}, "timeout"),
        ("", {"agent": "helper", "input": {"content": ""}}, "input.content"),
        ("", {"input": {"content": "hi"}}, "agent"),
        ("", {"agent": "ghost", "input": {"content": "hi"}}, "agent"),
    ],
)
def test_create_and_wait_with_bad_input_is_a_400_naming_it_and_creates_nothing(
    engine: Engine, api: APIClient, query: str, payload: Json, field: str
) -> None:
    response = api.post(f"/api/v1/threads/wait{query}", payload, format="json")

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)
    assert rows(engine.tenant) == (0, 0)


def test_create_and_wait_repeated_with_one_key_waits_for_the_first_turn(
    engine: Engine, api: APIClient
) -> None:
    engine.script.text("Once.")
    payload = {"agent": "helper", "input": {"content": "hi"}}

    first = waited(
        api.post(
            "/api/v1/threads/wait?timeout=0", payload, format="json", HTTP_IDEMPOTENCY_KEY="w-1"
        )
    )
    (thread,) = Thread.objects.filter(tenant=engine.tenant)
    engine.drive(thread)
    repeat = api.post(
        "/api/v1/threads/wait?timeout=0", payload, format="json", HTTP_IDEMPOTENCY_KEY="w-1"
    )
    again = waited(repeat)

    assert repeat["Idempotent-Replayed"] == "true"
    assert (first["turn"]["id"], first["done"]) == (again["turn"]["id"], False)
    assert again["thread"]["id"] == first["thread"]["id"] == str(thread.pk)
    assert (again["done"], [m["content"] for m in again["messages"]]) == (True, ["hi", "Once."])
    assert rows(engine.tenant) == (1, 1)
