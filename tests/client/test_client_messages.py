"""The client's messages and logs against a live server: send (queued as a turn), inject,
read, change, delete, list across pages, and the call records a turn leaves."""

from __future__ import annotations

import uuid

import pytest
from standard_agents_client import AsyncClient, Client, NotFound, attachment
from standard_agents_client.types import ToolCall


def test_a_sent_message_queues_a_turn_that_answers(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    key = uuid.uuid4().hex

    queued = client.messages.send(thread["id"], "hi there", metadata={"n": 1}, idempotency_key=key)
    replayed = client.messages.send(
        thread["id"], "hi there", metadata={"n": 1}, idempotency_key=key
    )
    waited = client.turns.wait(queued["turn_id"], timeout=30)

    assert (queued["status"], queued["kind"]) == ("queued", "message")
    assert queued["message"]["content"] == "hi there"
    assert replayed["turn_id"] == queued["turn_id"]
    assert waited["messages"][-1]["content"] == "You said: hi there"


def test_messages_are_injected_read_changed_listed_and_deleted(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    made = [client.messages.inject(thread["id"], f"note {n}", role="user") for n in range(3)]
    silent = client.messages.inject(thread["id"], "quiet", role="system", silent=True)

    changed = client.messages.update(
        thread["id"], made[0]["id"], content="edited", metadata={"by": "test"}
    )
    first = client.messages.list(thread["id"], limit=2)
    oldest_first = [m["content"] for m in client.messages.iter(thread["id"], limit=2)]
    newest_first = [m["content"] for m in client.messages.iter(thread["id"], order="desc")]
    with_silent = client.messages.list(thread["id"], include_silent=True).results

    assert (changed["content"], changed["metadata"]) == ("edited", {"by": "test"})
    assert client.messages.get(thread["id"], made[1]["id"])["content"] == "note 1"
    assert len(first.results) == 2
    assert first.next is not None
    assert oldest_first == ["edited", "note 1", "note 2"]
    assert newest_first == ["note 2", "note 1", "edited"]
    assert silent["id"] in [m["id"] for m in with_silent]

    client.messages.delete(thread["id"], made[2]["id"])
    with pytest.raises(NotFound):
        client.messages.get(thread["id"], made[2]["id"])


def test_a_message_carries_its_attachment(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    queued = client.messages.send(
        thread["id"], "see the file", attachments=[attachment("note.txt", b"hello", "text/plain")]
    )

    (stored,) = queued["message"]["attachments"]
    assert (stored["name"], stored["mimeType"], stored["size"]) == ("note.txt", "text/plain", 5)
    assert client.files.download(thread["id"], stored["path"]) == b"hello"


def test_a_tool_call_reads_as_an_object_with_its_arguments(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    waited = client.turns.submit_and_wait(thread["id"], "What time is it?", timeout=30)
    (issuer,) = [m for m in waited["messages"] if m["tool_calls"]]
    (call,) = issuer["tool_calls"] or []
    typed: ToolCall = call
    read = client.messages.get(thread["id"], issuer["id"])
    (result,) = [m for m in waited["messages"] if m["role"] == "tool"]

    assert (typed["name"], typed["arguments"]) == ("current_time", {"timezone": "UTC"})
    assert read["tool_calls"] == [call]
    assert result["tool_call_id"] == call["id"]


def test_a_turn_leaves_its_model_call_in_the_logs(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    client.turns.submit_and_wait(thread["id"], "What time is it?", timeout=30)

    logs = list(client.logs.iter(thread["id"], limit=1))
    calls = client.logs.list(thread["id"], kind="llm").results

    assert {"llm", "tool"} <= {log["kind"] for log in logs}
    assert len(calls) == 2
    assert all(log["kind"] == "llm" for log in calls)
    one = client.logs.get(thread["id"], calls[0]["id"])
    assert one == calls[0]


@pytest.mark.asyncio
async def test_the_async_client_injects_and_lists_messages(aclient: AsyncClient, chat: str) -> None:
    thread = await aclient.threads.create(chat)
    for n in range(3):
        await aclient.messages.inject(thread["id"], f"m{n}", role="user")

    page = await aclient.messages.list(thread["id"], limit=2)
    walked = [m["content"] async for m in aclient.messages.iter(thread["id"], limit=2)]

    assert [m["content"] for m in page] == ["m0", "m1"]
    assert walked == ["m0", "m1", "m2"]
