"""The broadcaster (threads.broadcast): what it encodes and sends."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from channels.layers import get_channel_layer

from threads.broadcast import broadcast_flush, broadcast_many
from threads.events import outbox
from threads.models import Thread
from threads.services.inbox import message_queue
from threads.services.turns import turn_promote_queued, turn_remove


def test_an_envelope_is_encoded_once_and_only_for_groups_someone_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encodes: list[Any] = []
    real_dumps = json.dumps

    def counting_dumps(value: Any, **kwargs: Any) -> str:
        encodes.append(value)
        return str(real_dumps(value, **kwargs))

    monkeypatch.setattr(json, "dumps", counting_dumps)
    watched, unwatched = f"watched-{uuid.uuid4().hex}", f"unwatched-{uuid.uuid4().hex}"
    layer = get_channel_layer()
    assert layer is not None

    async def member() -> str:
        channel = await layer.new_channel()
        await layer.group_add(watched, channel)
        return str(channel)

    channel = asyncio.run(member())
    quiet = {"type": "thread.status", "sequence": 1, "payload": {"status": "idle"}}
    seen = {"type": "thread.status", "sequence": 2, "payload": {"status": "running"}}
    broadcast_many([([unwatched], quiet), ([watched, unwatched], seen)])
    assert broadcast_flush()

    assert encodes == [seen]  # never the unwatched one; once for both groups
    received: dict[str, Any] = asyncio.run(layer.receive(channel))
    assert (received["sequence"], json.loads(received["json"])) == (2, seen)


@pytest.mark.django_db(transaction=True)
def test_only_events_that_end_turns_wake_their_waiters(
    thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn queued, taken or promoted has not ended: waking its waiters would only make
    them read it again. Its removal (or cancellation, or end) has."""
    woken: list[tuple[list[str], list[str]]] = []

    def record(sent: Any, *, wake: list[str]) -> None:
        woken.append(([envelope["type"] for _, envelope in sent], wake))
        broadcast_many(sent, wake=wake)

    monkeypatch.setattr(outbox, "broadcast_many", record)
    first = message_queue(thread=thread, content="one", role="user", wake=False)
    second = message_queue(thread=thread, content="two", role="user", wake=False)
    turn_promote_queued(thread=thread, turn=second)
    turn_remove(thread=thread, turn=first)

    changes = [(types, wake) for types, wake in woken if "queue.changed" in types]
    assert [wake for _, wake in changes] == [[], [], [], [str(thread.pk)]]
