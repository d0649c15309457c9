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
import json
from collections.abc import Awaitable, Callable
from typing import Any

from common.connections import connection_returned
from interop.mcp_server.calls import turn_answered
from threads.events import TURN_END_EVENTS, EventType
from threads.models import Turn
from threads.streams import Delivery, EventCursor, thread_follow

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
    answered = connection_returned(turn_answered)
    turn_id, seen = str(turn.pk), 0
    checked_at = loop.time()
    follow = thread_follow(EventCursor(thread=turn.thread, after=after), tick_s=RECHECK_S)
    try:
        async with asyncio.timeout(timeout):
            async for delivery in follow:
                may_end = delivery is None  # a quiet while: read the turn
                if delivery is not None and delivery.sequence is not None:  # not a delta
                    owner, line = described(delivery)
                    if owner == turn_id:
                        seen += 1
                        await progress(seen, line)
                    may_end = delivery.type in _MAY_END
                if may_end or loop.time() - checked_at >= RECHECK_S:
                    checked_at = loop.time()
                    if await answered(turn=turn):
                        return True
    except TimeoutError:
        pass
    finally:
        await follow.aclose()
    return bool(await answered(turn=turn))
