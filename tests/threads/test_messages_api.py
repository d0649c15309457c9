"""A message's tool calls as the API answers them: ``[{id, name, arguments}]`` with
``arguments`` an object (the shape of the ``tool.started`` event), in every answer that
carries messages; ThreadState (hooks, tools) keeps the spec's JSON string."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Message
from threads.services.message_shapes import message_answer, message_json
from threads.services.messages import message_inject

CALLS = [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]


@pytest.fixture
def api(engine: Engine, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(engine.tenant, Role.MEMBER)


def test_a_turns_tool_call_is_an_object_in_every_answer_that_carries_the_message(
    engine: Engine, api: APIClient
) -> None:
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}, "id": "c1"}])
    engine.script.text("Done.")
    base = f"/api/v1/threads/{thread.id}"

    turn = api.post(f"{base}/turns", {"input": {"content": "echo hi"}}, format="json").json()
    engine.drive(thread)
    listed = api.get(f"{base}/messages").json()["results"]
    issuer = listed[1]
    detail = api.get(f"{base}/messages/{issuer['id']}").json()
    waited = api.get(f"/api/v1/turns/{turn['id']}/wait?timeout=1").json()
    events = api.get(f"{base}/events?limit=200").json()["results"]
    updates = [e["payload"] for e in events if e["type"] == "message.updated"]
    finished = [payload for payload in updates if payload["id"] == issuer["id"]]

    assert [(m["role"], m["tool_calls"]) for m in listed] == [
        ("user", None), ("assistant", CALLS), ("tool", None), ("assistant", None),
    ]  # fmt: skip
    assert listed[2]["tool_call_id"] == CALLS[0]["id"]
    assert detail["tool_calls"] == CALLS
    assert [m["tool_calls"] for m in waited["messages"]] == [None, CALLS, None, None]
    assert finished[-1]["tool_calls"] == CALLS
    stored = Message.objects.get(pk=issuer["id"])
    assert json.loads(message_json(stored)["tool_calls"]) == [
        {"id": "c1", "type": "function",
         "function": {"name": "echo", "arguments": json.dumps({"text": "hi"})}},
    ]  # fmt: skip


@pytest.mark.django_db
def test_stored_calls_that_do_not_parse_are_answered_as_far_as_they_can_be(
    tenant: Tenant,
) -> None:
    thread = make_thread(tenant)
    stored: list[Any] = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{broken"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "[1]"}},
        {"id": "c3", "name": "h", "arguments": {"n": 1}},
        {"type": "function", "function": {"name": "no_id", "arguments": "{}"}},
        "not a call",
    ]
    issuer = message_inject(thread=thread, role="assistant", content=None, tool_calls=stored)
    empty = message_inject(thread=thread, role="assistant", content=None, tool_calls=[])
    plain = message_inject(thread=thread, role="user", content="hi")

    assert message_answer(issuer)["tool_calls"] == [
        {"id": "c1", "name": "f", "arguments": {}},
        {"id": "c2", "name": "g", "arguments": {}},
        {"id": "c3", "name": "h", "arguments": {"n": 1}},
    ]
    assert message_answer(empty)["tool_calls"] == []
    assert message_answer(plain)["tool_calls"] is None
    assert {key: value for key, value in message_answer(issuer).items() if key != "tool_calls"} == {
        key: value for key, value in message_json(issuer).items() if key != "tool_calls"
    }
