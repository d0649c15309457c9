"""The client's threads against a live server: create, read, list across pages, update,
stop, terminate, continue, delete, and the typed errors of each."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from standard_agents_client import (
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    ValidationError,
    datetime_from_us,
)

MISSING_ID = "01a2b3c4-0000-7000-8000-000000000000"


def test_a_thread_is_created_read_updated_and_deleted(client: Client, chat: str) -> None:
    thread = client.threads.create(chat, user_id="ana", tags=["a"], metadata={"k": 1})
    assert (thread["agent"], thread["user_id"], thread["tags"]) == (chat, "ana", ["a"])
    assert (thread["title"], thread["title_set"]) == (None, False)
    assert thread["counts"] == {"messages": 0, "logs": 0, "files": 0, "children": 0}

    read = client.threads.get(thread["id"])
    assert read["id"] == thread["id"]
    assert (read["active_turn"], read["queued_turns"], read["last_outcome"]) == (None, [], None)
    assert read["pending_requests"] == []
    created = datetime_from_us(read["created_at"])
    assert abs(created - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)

    updated = client.threads.update(thread["id"], tags=["b", "c"], metadata={"k": 2})
    assert (updated["tags"], updated["metadata"]) == (["b", "c"], {"k": 2})
    titled = client.threads.update(thread["id"], title="Refunds")
    assert (titled["title"], titled["title_set"], titled["started"]) == ("Refunds", True, False)

    assert client.threads.delete(thread["id"]) == {"deleted_threads": 1}
    with pytest.raises(NotFound) as missing:
        client.threads.get(thread["id"])
    assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_a_create_repeated_with_one_idempotency_key_answers_the_first_thread(
    client: Client, chat: str
) -> None:
    first = client.threads.create(chat, tags=["once"], idempotency_key="create-once")
    again = client.threads.create(chat, tags=["once"], idempotency_key="create-once")
    assert again["id"] == first["id"]

    with pytest.raises(Conflict) as reused:
        client.threads.create(chat, tags=["other"], idempotency_key="create-once")
    assert (reused.value.code, reused.value.field) == ("idempotency_key_reused", "Idempotency-Key")


def test_a_thread_created_with_its_first_input_runs_it(client: Client, chat: str) -> None:
    thread = client.threads.create(chat, input="hello")
    waited = client.turns.wait(thread["turn"]["id"], timeout=30)
    answer = client.threads.create_and_wait(chat, {"content": "again"}, timeout=30)

    assert thread["turn"]["message"]["content"] == "hello"
    assert waited["messages"][-1]["content"] == "You said: hello"
    assert (answer["done"], answer["messages"][-1]["content"]) == (True, "You said: again")
    assert answer["thread"]["id"] != thread["id"]
    with pytest.raises(ValidationError) as refused:
        client.threads.create(chat, input={"content": ""})
    assert refused.value.field == "input.content"


def test_threads_are_listed_a_page_at_a_time_and_iterated_across_pages(
    client: Client, chat: str
) -> None:
    made = [client.threads.create(chat, tags=["paged"])["id"] for _ in range(3)]
    client.threads.create(chat, tags=["other"])

    first = client.threads.list(tag="paged", limit=2)
    assert len(first.results) == 2
    assert first.previous is None
    assert first.next is not None
    second = client.next_page(first)
    assert second is not None
    assert [t["id"] for t in second] == [made[0]]  # newest first
    assert second.next is None
    back = client.previous_page(second)
    assert back is not None
    assert [t["id"] for t in back] == [t["id"] for t in first]

    assert [t["id"] for t in client.threads.iter(tag="paged", limit=2)] == made[::-1]
    assert client.threads.list(tag="nothing").results == []


def test_a_bad_limit_or_cursor_is_a_validation_error_naming_it(client: Client) -> None:
    with pytest.raises(ValidationError) as limit:
        client.threads.list(limit=0)
    assert limit.value.field == "limit"
    with pytest.raises(ValidationError) as cursor:
        client.threads.list(cursor="not-a-cursor")
    assert cursor.value.field == "cursor"


def test_an_unknown_agent_is_a_validation_error_with_its_field(client: Client) -> None:
    with pytest.raises(ValidationError) as refused:
        client.threads.create("nobody")
    assert refused.value.status == 400
    assert refused.value.code in ("invalid", "not_found")
    assert "nobody" in refused.value.message


def test_stop_with_nothing_running_changes_nothing(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    stopped = client.threads.stop(thread["id"])

    assert stopped == {
        "stopped": False, "stopped_turn_id": None, "parked_turns": 0, "message": None
    }  # fmt: skip


def test_stop_aborts_the_running_turn(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    turn = client.turns.submit(thread["id"], "slow, then stop")
    deadline = time.monotonic() + 30
    while (status := client.turns.get(turn["id"])["status"]) != "running":
        assert time.monotonic() < deadline, f"the turn is still {status}"
        time.sleep(0.05)

    stopped = client.threads.stop(thread["id"])

    assert (stopped["stopped"], stopped["stopped_turn_id"]) == (True, turn["id"])
    ended = client.turns.wait(turn["id"], timeout=30)["turn"]
    assert (ended["status"], ended["outcome"]) == ("cancelled", "aborted_by_user")


def test_a_terminated_thread_refuses_new_turns_with_a_conflict(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    terminated = client.threads.terminate(thread["id"])

    assert terminated["status"] == "terminated"
    assert terminated["terminated_at"] is not None
    with pytest.raises(Conflict) as refused:
        client.turns.submit(thread["id"], "hello")
    assert refused.value.code == "terminated"
    assert client.threads.terminate(thread["id"])["changed"] is False


def test_continue_queues_a_turn_of_the_side(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    client.messages.inject(thread["id"], "hi", role="user")

    queued = client.threads.continue_(thread["id"], side="a")

    assert (queued["status"], queued["kind"]) == ("queued", "continue")
    waited = client.turns.wait(queued["turn_id"], timeout=30)
    assert waited["done"] is True
    assert waited["messages"][-1]["content"] == "You said: hi"


def test_another_tenants_thread_does_not_exist(client: Client) -> None:
    with pytest.raises(NotFound):
        client.threads.get(MISSING_ID)
    with pytest.raises(NotFound):
        client.threads.stop(MISSING_ID)


@pytest.mark.asyncio
async def test_the_async_client_creates_lists_and_deletes_threads(
    aclient: AsyncClient, chat: str
) -> None:
    made = [(await aclient.threads.create(chat, tags=["async"]))["id"] for _ in range(3)]

    page = await aclient.threads.list(tag="async", limit=2)
    walked = [thread["id"] async for thread in aclient.threads.iter(tag="async", limit=2)]

    assert len(page.results) == 2
    assert walked == made[::-1]
    assert (await aclient.threads.get(made[0]))["id"] == made[0]
    assert await aclient.threads.delete(made[0]) == {"deleted_threads": 1}
    with pytest.raises(NotFound):
        await aclient.threads.get(made[0])
