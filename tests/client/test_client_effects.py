"""The client's scheduled effects and recurring schedules against a live server and
worker. Effects are scheduled as a tool would (``ThreadState.schedule_effect`` of the
registry's ``remind``), then read, cancelled, run and replayed through the client."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from standard_agents_client import AsyncClient, Client, Conflict, NotFound, ValidationError

from threads.models import Thread
from threads.state import ThreadState

HOUR_MS = 3_600_000


def _scheduled(thread_id: str, *texts: str) -> list[str]:
    state = ThreadState(Thread.objects.get(pk=thread_id))
    return [
        state.schedule_effect("remind", {"text": text}, HOUR_MS * (n + 1))
        for n, text in enumerate(texts)
    ]


def _settled(client: Client, thread_id: str, effect_id: str) -> str:
    deadline = time.monotonic() + 30
    while (status := client.effects.get(thread_id, effect_id)["status"]) in (
        "pending",
        "processing",
    ):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def test_effects_are_listed_read_cancelled_run_and_replayed(client: Client, chat: str) -> None:
    thread_id = client.threads.create(chat)["id"]
    soon, later = _scheduled(thread_id, "call Ana", "call Bo")

    first = client.effects.list(thread_id, limit=1)
    walked = [effect["id"] for effect in client.effects.iter(thread_id, limit=1)]
    cancelled = client.effects.cancel(thread_id, later)
    ran = client.effects.run(thread_id, soon)

    assert [effect["id"] for effect in first] == [soon]
    assert first.next is not None
    assert walked == [soon, later]  # soonest first
    assert client.effects.get(thread_id, soon)["args"] == {"text": "call Ana"}
    assert cancelled["status"] == "user_canceled"
    with pytest.raises(Conflict):
        client.effects.cancel(thread_id, later)
    assert (ran["action"], ran["id"]) == ("ran", soon)
    assert _settled(client, thread_id, soon) == "completed"

    replayed = client.effects.replay(thread_id, soon, idempotency_key="replay-once")
    again = client.effects.replay(thread_id, soon, idempotency_key="replay-once")

    assert again["id"] == replayed["id"]  # the repeat made no second replay
    assert (replayed["replayed_from"], replayed["manual_run"]) == (soon, True)
    assert _settled(client, thread_id, replayed["id"]) == "completed"
    reminders = [m["content"] for m in client.messages.iter(thread_id)]
    assert reminders == ["Reminder: call Ana", "Reminder: call Ana"]
    assert [e["id"] for e in client.effects.list(thread_id, status="user_canceled")] == [later]


def test_schedules_are_created_changed_paused_resumed_and_deleted(
    client: Client, chat: str
) -> None:
    thread_id = client.threads.create(chat)["id"]
    weekly = client.schedules.create(
        "0 9 * * 1-5", agent=chat, input="Summarise yesterday", timezone="Europe/Paris",
        name="mornings",
    )  # fmt: skip
    reminder = client.schedules.create(
        "*/15 * * * *", thread_id=thread_id, action="effect",
        effect={"name": "remind", "args": {"text": "stretch"}},
    )  # fmt: skip

    moved = client.schedules.update(weekly["id"], cron="30 9 * * 1-5")
    paused = client.schedules.pause(weekly["id"])
    resumed = client.schedules.resume(weekly["id"])

    assert weekly["agent"] == chat
    assert weekly["input"] == {"content": "Summarise yesterday", "role": "user", "metadata": {}}
    assert weekly["next_run_at"] is not None
    assert reminder["effect"] == {"name": "remind", "args": {"text": "stretch"}}
    assert moved["next_run_at"] != weekly["next_run_at"]
    assert (paused["paused"], paused["next_run_at"]) == (True, None)
    assert resumed["next_run_at"] is not None
    assert [s["id"] for s in client.schedules.iter(limit=1)] == [weekly["id"], reminder["id"]]
    assert [s["id"] for s in client.schedules.list(thread_id=thread_id)] == [reminder["id"]]
    with pytest.raises(ValidationError) as bad:
        client.schedules.create("every morning", agent=chat, input="x")
    assert bad.value.field == "cron"

    client.schedules.delete(weekly["id"])
    with pytest.raises(NotFound):
        client.schedules.get(weekly["id"])


def test_a_schedule_created_twice_with_one_idempotency_key_is_created_once(
    client: Client, chat: str
) -> None:
    first = client.schedules.create("0 9 * * *", agent=chat, input="x", idempotency_key="s-1")
    again = client.schedules.create("0 9 * * *", agent=chat, input="x", idempotency_key="s-1")

    assert again["id"] == first["id"]
    assert [s["id"] for s in client.schedules.iter()] == [first["id"]]
    with pytest.raises(Conflict) as reused:
        client.schedules.create("0 8 * * *", agent=chat, input="x", idempotency_key="s-1")
    assert reused.value.code == "idempotency_key_reused"


@pytest.mark.asyncio
async def test_the_async_client_lists_and_cancels_effects(
    aclient: AsyncClient, client: Client, chat: str
) -> None:
    thread_id = client.threads.create(chat)["id"]
    (effect_id,) = await sync_to_async(_scheduled)(thread_id, "later")

    listed = [effect["id"] async for effect in aclient.effects.iter(thread_id)]
    cancelled = await aclient.effects.cancel(thread_id, effect_id)

    assert listed == [effect_id]
    assert cancelled["status"] == "user_canceled"
    schedule = await aclient.schedules.create("0 0 * * *", agent=chat, input="nightly")
    assert (await aclient.schedules.get(schedule["id"]))["cron"] == "0 0 * * *"
