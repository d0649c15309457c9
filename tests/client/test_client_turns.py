"""The client's turns against a live server and worker: submit, wait, submit and wait,
stream, list, cancel, remove, promote, and idempotent submits."""

from __future__ import annotations

import time
import uuid

import pytest
from standard_agents_client import AsyncClient, Client, Conflict


def test_a_submitted_turn_is_waited_for_and_answers(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    submitted = client.turns.submit(thread["id"], "hello", metadata={"from": "test"})
    waited = client.turns.wait(submitted["id"], timeout=30)

    assert submitted["status"] == "queued"
    assert submitted["message"]["content"] == "hello"
    assert waited["done"] is True
    assert waited["turn"]["status"] == "completed"
    assert [m["role"] for m in waited["messages"]] == ["user", "assistant"]
    assert waited["messages"][0]["metadata"] == {"from": "test"}
    assert waited["messages"][-1]["content"] == "You said: hello"
    assert client.turns.get(submitted["id"])["message_ids"] == [m["id"] for m in waited["messages"]]


def test_submit_and_wait_runs_a_tool_and_answers_in_one_call(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    answer = client.turns.submit_and_wait(thread["id"], "What time is it?", timeout=30)

    assert (answer["done"], answer["turn"]["status"]) == (True, "completed")
    roles = [m["role"] for m in answer["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert (answer["messages"][-1]["content"] or "").startswith("It is ")


def test_a_wait_that_times_out_answers_not_done(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    turn = client.turns.submit(thread["id"], "slow please")

    waited = client.turns.wait(turn["id"], timeout=0.2)

    assert waited["done"] is False
    assert waited["turn"]["status"] in ("queued", "running")
    client.turns.cancel(turn["id"])
    assert client.turns.wait(turn["id"], timeout=30)["turn"]["status"] == "cancelled"


def test_the_same_idempotency_key_answers_the_first_turn(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    key = uuid.uuid4().hex

    first = client.turns.submit(thread["id"], "once", idempotency_key=key)
    again = client.turns.submit(thread["id"], "once", idempotency_key=key)

    assert again["id"] == first["id"]
    with pytest.raises(Conflict) as reused:
        client.turns.submit(thread["id"], "another body", idempotency_key=key)
    assert reused.value.code == "idempotency_key_reused"
    assert len(client.turns.list(thread["id"]).results) == 1


def test_queued_turns_are_promoted_removed_and_cancelled(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    running = client.turns.submit(thread["id"], "slow one")
    deadline = time.monotonic() + 30  # a busy worker may take a moment to start it
    while client.turns.get(running["id"])["status"] != "running":
        assert time.monotonic() < deadline, "the slow turn did not start"
        time.sleep(0.02)
    second = client.turns.submit(thread["id"], "second")
    third = client.turns.submit(thread["id"], "third")

    promoted = client.turns.promote(third["id"])
    read = client.threads.get(thread["id"])
    removed = client.turns.remove(second["id"])
    cancelled = client.turns.cancel(running["id"])

    assert promoted["id"] == third["id"]
    assert [t["id"] for t in read["queued_turns"]] == [third["id"], second["id"]]
    assert (removed["status"], removed["outcome"]) == ("cancelled", "removed")
    with pytest.raises(Conflict):
        client.turns.remove(second["id"])
    assert cancelled["id"] == running["id"]
    ended = client.turns.wait(running["id"], timeout=30)
    assert ended["turn"]["status"] == "cancelled"
    assert client.turns.wait(third["id"], timeout=30)["turn"]["status"] == "completed"


def test_turns_are_listed_newest_first_across_pages(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    made = [client.turns.submit(thread["id"], f"m{n}")["id"] for n in range(3)]
    client.turns.wait(made[-1], timeout=30)

    first = client.turns.list(thread["id"], limit=2)
    walked = [turn["id"] for turn in client.turns.iter(thread["id"], limit=2)]

    assert [turn["id"] for turn in first] == made[::-1][:2]
    assert first.next is not None
    assert walked == made[::-1]
    assert client.turns.list(thread["id"], status="queued").results == []


def test_a_turns_stream_yields_its_events_until_it_ends(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    turn = client.turns.submit(thread["id"], "stream me")

    events = list(client.turns.stream(turn["id"]))

    types = [event["type"] for event in events]
    assert types[0] == "queue.changed"
    assert types[-1] == "turn.completed"
    assert "message.created" in types
    sequences = [e["sequence"] for e in events if e["sequence"] is not None]
    assert sequences == sorted(set(sequences))
    assert all(e["turn_id"] in (turn["id"], None) for e in events)


@pytest.mark.asyncio
async def test_the_async_client_submits_waits_and_streams(aclient: AsyncClient, chat: str) -> None:
    thread = await aclient.threads.create(chat)

    answer = await aclient.turns.submit_and_wait(thread["id"], "async hello", timeout=30)
    turn = await aclient.turns.submit(thread["id"], "and again")
    streamed = [event["type"] async for event in aclient.turns.stream(turn["id"])]
    waited = await aclient.turns.wait(turn["id"])

    assert answer["messages"][-1]["content"] == "You said: async hello"
    assert streamed[0] == "queue.changed"
    assert streamed[-1] == "turn.completed"
    assert waited["messages"][-1]["content"] == "You said: and again"
    listed = [t["id"] async for t in aclient.turns.iter(thread["id"], limit=1)]
    assert listed == [turn["id"], answer["turn"]["id"]]
