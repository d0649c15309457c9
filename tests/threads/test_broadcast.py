"""The broadcaster (threads.broadcast): what it encodes and sends."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from channels.layers import get_channel_layer

from threads.broadcast import broadcast_flush, broadcast_many


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
