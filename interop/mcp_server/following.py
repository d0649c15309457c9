"""Following an agent call's turn until it answers, telling the MCP client how it goes.

The thread's events come as the WebSocket and the SSE routes get them
(:class:`threads.streams.EventCursor` on the thread's channel group: replay, then live,
no gap and no duplicate); each persisted event of the turn is one progress notification
(``progress`` counts them, ``message`` says what happened). An event that may end the turn
or pause it (its end, ``action.required``, a queue change) makes the follower read the
turn's status; it also reads it every ``RECHECK_S`` whatever it heard, so a lost message
only delays the answer. Nothing holds a thread or a database connection while it waits:
reads are short steps that give their connection back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer

from common.connections import connection_returned
from interop.mcp_server.calls import turn_answered
from threads.broadcast import unbatched
from threads.events import TURN_END_EVENTS, EventType, thread_group
from threads.models import Turn
from threads.streams import Delivery, EventCursor

RECHECK_S = 5.0
# Events after which the turn may be over or resting on a person's decision.
_MAY_END = frozenset({*TURN_END_EVENTS.values(), EventType.ACTION_REQUIRED,
                      EventType.QUEUE_CHANGED, EventType.THREAD_TERMINATED})  # fmt: skip

# The payload field that says most about an event, in this order of preference.
_DETAILS = ("name", "prompt", "change", "status")

Progress = Callable[[int, str], Awaitable[None]]


def described(delivery: Delivery) -> tuple[str | None, str]:
    """The event's turn id and a line saying what happened (``tool.started: refund``)."""
    envelope: dict[str, Any] = json.loads(delivery.text)
    payload = envelope.get("payload") or {}
    detail = next((payload[key] for key in _DETAILS if payload.get(key)), None)
    line = f"{delivery.type}: {detail}" if isinstance(detail, str) and detail else delivery.type
    turn_id = envelope.get("turn_id")
    return (turn_id if isinstance(turn_id, str) else None), line


async def turn_follow(*, turn: Turn, after: int, timeout: float, progress: Progress) -> bool:
    """Wait up to ``timeout`` seconds for ``turn`` to end or rest on a person's decision,
    calling ``progress(n, line)`` for the n-th event of the turn after the sequence
    ``after``. True when it answered in time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    thread = turn.thread
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    group = thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk)
    await layer.group_add(group, channel)
    cursor = EventCursor(thread=thread, after=after)
    answered = connection_returned(turn_answered)
    turn_id, seen = str(turn.pk), 0

    async def told(deliveries: list[Delivery]) -> bool:
        """Progress for the turn's events; whether one of them may have ended it."""
        nonlocal seen
        may_end = False
        for delivery in deliveries:
            if delivery.sequence is None:
                continue  # token deltas: too many to report, and not stored
            owner, line = described(delivery)
            if owner == turn_id:
                seen += 1
                await progress(seen, line)
            may_end = may_end or delivery.type in _MAY_END
        return may_end

    receiving: asyncio.Future[dict[str, Any]] | None = None
    try:
        replayed = [delivery async for delivery in cursor.replay()]
        await told(replayed)
        if await answered(turn=turn):
            return True
        checked_at = loop.time()
        while (left := deadline - loop.time()) > 0:
            if receiving is None:
                receiving = asyncio.ensure_future(layer.receive(channel))
            wait = min(left, cursor.recheck_in(), max(0.0, checked_at + RECHECK_S - loop.time()))
            done, _ = await asyncio.wait({receiving}, timeout=wait)
            if done:
                message, receiving = receiving.result(), None
                deliveries = [d for one in unbatched(message) for d in await cursor.admit(one)]
            elif cursor.recheck_in() <= 0:
                deliveries = await cursor.recheck()
            else:
                deliveries = []
            may_end = await told(deliveries)
            if may_end or loop.time() - checked_at >= RECHECK_S:
                checked_at = loop.time()
                if await answered(turn=turn):
                    return True
        return bool(await answered(turn=turn))
    finally:
        if receiving is not None:
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiving
        await layer.group_discard(group, channel)
