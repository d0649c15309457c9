"""The client's webhooks against a live server and worker: an endpoint's CRUD, its
secret's rotation, and the delivery a turn's event leaves (to a loopback port where nothing
listens, so nothing leaves the machine)."""

from __future__ import annotations

import time

import pytest
from standard_agents_client import AsyncClient, Client, NotFound, ValidationError

# Loopback (allowed for the test run: tests/environment.py), a port where nothing listens:
# deliveries to it fail at once.
UNREACHABLE = "https://127.0.0.1:9/hooks"


def test_a_webhook_is_created_changed_rotated_listed_and_deleted(client: Client) -> None:
    made = client.webhooks.create(UNREACHABLE, ["turn.completed"], description="ours")
    other = client.webhooks.create(UNREACHABLE, ["turn.failed"])

    changed = client.webhooks.update(made["id"], enabled=False, event_types=["thread.status"])
    rotated = client.webhooks.rotate_secret(made["id"])
    first = client.webhooks.list(limit=1)
    walked = [hook["id"] for hook in client.webhooks.iter(limit=1)]

    assert str(made["secret"]).startswith("whsec_")
    assert client.webhooks.get(made["id"]).get("secret") is None
    assert (changed["enabled"], changed["event_types"]) == (False, ["thread.status"])
    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != made["secret"]
    assert first.next is not None
    assert walked == [made["id"], other["id"]]
    with pytest.raises(ValidationError) as bad:
        client.webhooks.create("ftp://example.com", ["turn.completed"])
    assert bad.value.field == "url"

    client.webhooks.delete(made["id"])
    with pytest.raises(NotFound):
        client.webhooks.get(made["id"])


def test_a_turns_event_leaves_a_delivery_that_can_be_sent_again(client: Client, chat: str) -> None:
    hook = client.webhooks.create(UNREACHABLE, ["turn.completed"])
    thread = client.threads.create(chat)
    client.turns.submit_and_wait(thread["id"], "deliver me", timeout=30)

    deadline = time.monotonic() + 15
    while not (deliveries := client.webhooks.deliveries(hook["id"]).results):
        assert time.monotonic() < deadline, "no delivery was recorded"
        time.sleep(0.1)
    (delivery,) = deliveries

    assert (delivery["event_type"], delivery["thread_id"]) == ("turn.completed", thread["id"])
    assert delivery["payload"]["type"] == "turn.completed"
    assert [d["id"] for d in client.webhooks.iter_deliveries(hook["id"])] == [delivery["id"]]
    again = client.webhooks.redeliver(hook["id"], delivery["id"])
    assert again["id"] == delivery["id"]
    with pytest.raises(ValidationError) as bad:
        client.webhooks.deliveries(hook["id"], status="lost")  # type: ignore[arg-type]
    assert bad.value.field == "status"


@pytest.mark.asyncio
async def test_the_async_client_manages_webhooks(aclient: AsyncClient) -> None:
    made = await aclient.webhooks.create(UNREACHABLE, ["action.required"])

    listed = [hook["id"] async for hook in aclient.webhooks.iter()]
    changed = await aclient.webhooks.update(made["id"], description="async")
    await aclient.webhooks.delete(made["id"])

    assert listed == [made["id"]]
    assert changed["description"] == "async"
    assert (await aclient.webhooks.list()).results == []
