"""Following a thread's events from a sequence on: the logic WebSocket and SSE share.

A follower subscribes to the thread's group first, then replays the log after ``after``,
then handles live messages with :meth:`EventCursor.admit`: a sequence already sent is
skipped, the next one is sent, and a jump (a broadcast still in flight, a message the layer
dropped, an envelope too large to travel inline) is filled from the log, which holds every
committed event. So the seam between replay and live has no gap and no duplicate, and
clients receive persisted events in sequence order, each once.

A dropped message for the thread's *newest* event leaves no later sequence to reveal the
gap, so a follower also reads the log when nothing arrived live for a while
(:meth:`EventCursor.recheck`, when :meth:`EventCursor.recheck_in` says): ``IDLE_RECHECK_S``
after the latest live event, then backing off while the log has nothing new. Each check is
one indexed read of the events after the cursor, usually empty; what it finds goes through
the same cursor, so nothing is sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder

from common.time import now
from tenancy.credentials import REVOKED
from threads.broadcast import unbatched
from threads.events import thread_group
from threads.models import Thread
from threads.services.events import event_envelopes

REPLAY_BATCH = 500
# How long a follower waits, after the latest live event (or a read of the log that found
# something), before it reads the log again; each read that finds nothing waits the next
# delay, and the last one repeats. A follower whose events come less than a first delay
# apart never reads; an idle one reads five times in its first quiet minute and twice a
# minute after that. A dropped newest event arrives at most one delay late.
IDLE_RECHECK_S: tuple[float, ...] = (1.0, 2.0, 5.0, 15.0, 30.0)
# How long :func:`thread_follow` stays silent before it says so (a keepalive is due).
TICK_S = 15.0


@dataclass(frozen=True)
class Delivery:
    """One event ready to send: its type, its sequence (None: ephemeral) and its JSON."""

    type: str
    sequence: int | None
    text: str


class IdleRecheck:
    """When a follower next reads the log although nothing told it to: ``delays[0]`` seconds
    after it last heard of an event, then each following delay while reads find nothing,
    the last delay repeating. ``delays`` defaults to ``IDLE_RECHECK_S`` (read when built,
    so tests can shorten it)."""

    def __init__(
        self,
        delays: Sequence[float] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delays = tuple(IDLE_RECHECK_S if delays is None else delays)
        if not self.delays or min(self.delays) <= 0:
            raise ValueError("recheck delays must be positive")
        self.clock = clock
        self.step = 0
        self.due = clock() + self.delays[0]

    def heard(self) -> None:
        """An event arrived (live, or from the log): the next read comes a first delay later."""
        self.step = 0
        self.due = self.clock() + self.delays[0]

    def quiet(self) -> None:
        """A read found nothing: wait the next, longer delay."""
        self.step = min(self.step + 1, len(self.delays) - 1)
        self.due = self.clock() + self.delays[self.step]

    def more(self) -> None:
        """A read stopped at its batch size: the next one is due at once."""
        self.step = 0
        self.due = self.clock()

    def seconds_left(self) -> float:
        """Seconds until the next read is due (0: now)."""
        return max(0.0, self.due - self.clock())


class EventCursor:
    """Delivers ``thread``'s events with a sequence above ``after``, in order, each once;
    ``reasoning.delta`` only when ``reasoning`` (a follower opted in).

    Not for concurrent use: one task at a time calls :meth:`replay`, :meth:`admit` or
    :meth:`recheck` and sends what it returned before the next call, so ``last`` only grows
    and sends go out in sequence order."""

    def __init__(self, *, thread: Thread, after: int, reasoning: bool = False) -> None:
        self.thread = thread
        self.last = after
        self.reasoning = reasoning
        self.idle = IdleRecheck()

    async def replay(self) -> AsyncIterator[Delivery]:
        """Every stored event after the cursor, in batches, advancing it."""
        while True:
            batch = await self._read(upto=None)
            for delivery in batch:
                yield delivery
            if len(batch) < REPLAY_BATCH:
                self.idle.heard()  # the log was just read: the next check can wait
                return

    def recheck_in(self) -> float:
        """Seconds until the follower should call :meth:`recheck` (0: now)."""
        return self.idle.seconds_left()

    async def recheck(self) -> list[Delivery]:
        """The next stored events after the cursor (one batch), advancing it: usually none,
        from one indexed read. Recovers what the layer dropped with no later message to
        reveal it (the thread's newest events). After a read that finds nothing, or fails
        (the error propagates, the cursor unmoved), the next one waits longer; after a full
        batch it is due at once."""
        self.idle.quiet()
        found = await self._read(upto=None)
        if len(found) == REPLAY_BATCH:
            self.idle.more()
        elif found:
            self.idle.heard()
        return found

    def replay_now(self) -> Iterator[Delivery]:
        """:meth:`replay` for synchronous callers (a WSGI stream)."""
        while True:
            batch = self._fetch(upto=None)
            yield from batch
            if len(batch) < REPLAY_BATCH:
                return

    async def admit(self, message: Mapping[str, Any]) -> list[Delivery]:
        """What to send for one channel-layer message (``threads.broadcast`` shape)."""
        sequence = message.get("sequence")
        kind = str(message.get("event_type") or "")
        text = message.get("json")
        if sequence is None:
            if kind == "reasoning.delta" and not self.reasoning:
                return []  # only for followers that asked for reasoning
            return [Delivery(kind, None, text)] if isinstance(text, str) else []
        self.idle.heard()
        if sequence <= self.last:
            return []
        if sequence == self.last + 1 and isinstance(text, str):
            self.last = sequence
            return [Delivery(kind, sequence, text)]
        delivered: list[Delivery] = []
        while self.last < sequence:
            batch = await self._read(upto=sequence)
            if not batch:
                break  # not visible yet: the next message or the idle recheck fills it
            delivered.extend(batch)
        return delivered

    async def _read(self, *, upto: int | None) -> list[Delivery]:
        batch: list[Delivery] = await database_sync_to_async(self._fetch)(upto=upto)
        return batch

    def _fetch(self, *, upto: int | None) -> list[Delivery]:
        """The next stored events after the cursor (up to ``upto``), advancing it."""
        envelopes = event_envelopes(
            thread=self.thread, after=self.last, upto=upto, limit=REPLAY_BATCH
        )
        deliveries = [
            Delivery(item["type"], item["sequence"], json.dumps(item, cls=DjangoJSONEncoder))
            for item in envelopes
        ]
        if deliveries:
            last = deliveries[-1].sequence
            assert last is not None
            self.last = last
        return deliveries


class CredentialsGone(Exception):
    """The follower's credentials were revoked, or expired, while it followed."""


def thread_follow(
    cursor: EventCursor,
    *,
    groups: Sequence[str] = (),
    expires_at: dt.datetime | None = None,
    tick_s: float = TICK_S,
    replayed: Callable[[], bool] | None = None,
) -> AsyncGenerator[Delivery | None, None]:
    """The cursor's thread's events, as every follower (SSE, a protocol's stream, a wait)
    takes them: subscribed to the thread's group (and to ``groups``, which hear of the
    follower's credentials' loss) first, then the log after the cursor, then live ones
    (:meth:`EventCursor.admit`; :meth:`EventCursor.recheck` when nothing came for a while).
    It subscribes when first asked for an event; a follower that must send something only
    once it is subscribed uses :func:`thread_subscribed`.

    None when ``tick_s`` passed without an event (a keepalive or a periodic check is due).
    ``replayed``, called once the log is replayed, ends the follow when it answers True.
    Raises CredentialsGone when one of ``groups`` hears of a revocation or ``expires_at``
    passes. Everything runs on the consumer's task: the cursor is never read twice at once.
    """

    async def follow() -> AsyncGenerator[Delivery | None, None]:
        async with (
            thread_subscribed(cursor, groups=groups) as subscription,
            contextlib.aclosing(
                subscription.events(expires_at=expires_at, tick_s=tick_s, replayed=replayed)
            ) as events,
        ):
            async for delivery in events:
                yield delivery

    return follow()


@dataclass
class Subscription:
    """A follower's channel, subscribed to its thread's group and its credentials' groups."""

    cursor: EventCursor
    layer: Any
    channel: str

    async def events(
        self,
        *,
        expires_at: dt.datetime | None = None,
        tick_s: float = TICK_S,
        replayed: Callable[[], bool] | None = None,
    ) -> AsyncGenerator[Delivery | None, None]:
        """:func:`thread_follow`'s events, on this subscription."""
        cursor = self.cursor
        receiving: asyncio.Task[dict[str, Any]] | None = None
        try:
            async for delivery in cursor.replay():
                yield delivery
            if replayed is not None and replayed():
                return
            tick_at = time.monotonic() + tick_s
            while True:
                left = None if expires_at is None else (expires_at - now()).total_seconds()
                if left is not None and left <= 0:
                    raise CredentialsGone
                if time.monotonic() >= tick_at:
                    yield None
                    tick_at = time.monotonic() + tick_s
                if receiving is None:
                    receiving = asyncio.ensure_future(self.layer.receive(self.channel))
                wait = min(tick_at - time.monotonic(), cursor.recheck_in())
                wait = max(0.0, wait if left is None else min(wait, left))
                done, _ = await asyncio.wait({receiving}, timeout=wait)
                if done:
                    message, receiving = receiving.result(), None
                    if message.get("type") == REVOKED:
                        raise CredentialsGone
                    found = [d for one in unbatched(message) for d in await cursor.admit(one)]
                elif cursor.recheck_in() <= 0:
                    found = await cursor.recheck()
                else:
                    continue
                for delivery in found:
                    yield delivery
                if found:
                    tick_at = time.monotonic() + tick_s
        finally:
            if receiving is not None:
                receiving.cancel()


@contextlib.asynccontextmanager
async def thread_subscribed(
    cursor: EventCursor, *, groups: Sequence[str] = ()
) -> AsyncIterator[Subscription]:
    """The follower's subscription to the cursor's thread's group and to ``groups``, for
    the block: what it sends inside the block comes after it hears of a revocation."""
    thread = cursor.thread
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    subscribed = [thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk), *groups]
    for group in subscribed:
        await layer.group_add(group, channel)
    try:
        yield Subscription(cursor, layer, channel)
    finally:
        for group in subscribed:
            await layer.group_discard(group, channel)
