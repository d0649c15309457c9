"""The client's human-in-the-loop calls against a live server and worker: a tenant rule
asks before a tool call, the turn rests on an action, and the client lists, reads and
answers it; the rule's own CRUD."""

from __future__ import annotations

import pytest
from standard_agents_client import AsyncClient, Client, Conflict, NotFound, ValidationError

ASKED = "What time is it?"


def test_an_approved_action_lets_the_paused_turn_finish(client: Client, chat: str) -> None:
    client.permission_rules.create("ask", agent=chat, tool="current_time")
    thread = client.threads.create(chat)

    paused = client.turns.submit_and_wait(thread["id"], ASKED, timeout=30)

    assert paused["done"] is False
    assert paused["turn"]["status"] == "waiting_permission"
    (action,) = paused["actions"]
    assert (action["kind"], action["status"], action["name"]) == (
        "approval",
        "pending",
        "current_time",
    )
    assert client.actions.get(thread["id"], action["id"]) == action
    assert [a["id"] for a in client.actions.list(thread["id"], status="pending")] == [action["id"]]

    answered = client.actions.respond(thread["id"], action["id"], "approve")

    assert answered["status"] == "approved"
    assert answered["response"] == {"decision": "approve"}
    finished = client.turns.wait(paused["turn"]["id"], timeout=30)
    assert finished["turn"]["status"] == "completed"
    assert (finished["messages"][-1]["content"] or "").startswith("It is ")
    with pytest.raises(Conflict) as again:
        client.actions.respond(thread["id"], action["id"], "deny")
    assert again.value.code == "action_resolved"
    assert list(client.actions.iter(thread["id"], status="pending")) == []


def test_a_bad_answer_is_a_validation_error_naming_its_field(client: Client, chat: str) -> None:
    client.permission_rules.create("ask", tool="current_time")
    thread = client.threads.create(chat)
    paused = client.turns.submit_and_wait(thread["id"], ASKED, timeout=30)
    (action,) = paused["actions"]

    with pytest.raises(ValidationError) as refused:
        client.actions.respond(thread["id"], action["id"], "answer", data={"x": 1})

    assert refused.value.field == "decision"
    client.turns.cancel(paused["turn"]["id"])


def test_permission_rules_are_created_read_changed_listed_and_deleted(client: Client) -> None:
    made = [client.permission_rules.create("deny", tool=f"tool_{n}") for n in range(3)]

    changed = client.permission_rules.update(made[0]["id"], {"description": "no"})
    replaced = client.permission_rules.replace(
        made[1]["id"], {"decision": "ask", "tool": "tool_1", "expires_in": 60}
    )
    first = client.permission_rules.list(limit=2)
    walked = [rule["id"] for rule in client.permission_rules.iter(limit=2)]

    assert (changed["decision"], changed["description"]) == ("deny", "no")
    assert (replaced["decision"], replaced["expires_in"], replaced["on_expiry"]) == (
        "ask",
        60,
        "deny",
    )
    assert client.permission_rules.get(made[2]["id"])["tool"] == "tool_2"
    assert first.next is not None
    assert walked == [rule["id"] for rule in made]  # oldest first
    with pytest.raises(ValidationError) as bad:
        client.permission_rules.create("maybe")  # type: ignore[arg-type]
    assert bad.value.field == "decision"

    client.permission_rules.delete(made[0]["id"])
    with pytest.raises(NotFound):
        client.permission_rules.get(made[0]["id"])


@pytest.mark.asyncio
async def test_the_async_client_denies_an_action(aclient: AsyncClient, chat: str) -> None:
    await aclient.permission_rules.create("ask", tool="current_time")
    thread = await aclient.threads.create(chat)
    paused = await aclient.turns.submit_and_wait(thread["id"], ASKED, timeout=30)
    (action,) = paused["actions"]

    denied = await aclient.actions.respond(thread["id"], action["id"], "deny", reason="not now")
    finished = await aclient.turns.wait(paused["turn"]["id"], timeout=30)

    assert denied["status"] == "denied"
    assert [a["status"] async for a in aclient.actions.iter(thread["id"])] == ["denied"]
    tool_result = next(m for m in finished["messages"] if m["role"] == "tool")
    assert "not now" in (tool_result["content"] or "")
