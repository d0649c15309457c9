"""Waking ``GET /turns/{id}/wait`` callers: one Redis pub/sub channel for every process.

A waiter needs one fact, "something may have ended a turn of this thread", not the
thread's event stream. So when events that can end a turn (a turn's end, a queue change)
are broadcast, the broadcaster also publishes the thread's id on :data:`CHANNEL`
(:func:`notice`), and each web process keeps one subscription to it (:class:`Waiters`,
one per event loop) that sets the events of the callers waiting on that thread. A waiter
registers, makes sure the subscription is live, and only then reads its turn, so an end
committed after that read is always heard of; a notice lost with a Redis restart only
delays it until the waiter's next read (``RECHECK_S`` in :mod:`threads.api.turn_wait`).

A waiter that already knows its turn had not ended at some moment (it submitted the turn,
or read it) skips that first read when :meth:`Waiters.quiet_since` says no notice could
have slipped by since: the subscription has been live since before that moment, and none
named the thread after it. (Live means, as for :meth:`Waiters.ready`, that the SUBSCRIBE
was sent; a notice published in the instant before Redis applies it is lost like any other,
and the waiter reads its turn at its next ``RECHECK_S``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections import defaultdict
from collections.abc import Collection, Iterator
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

logger = logging.getLogger(__name__)

# Pub/sub channels are shared by every database number of a Redis server: a process on
# another database hears notices that wake nobody here, and costs a dictionary lookup.
CHANNEL = "platform:turns:woken"
RECONNECT_S = 1.0
READY_WAIT_S = 1.0
# A subscription nobody waits on is kept this long, so a process serving one wait after
# another subscribes once.
KEEP_S = 300.0
# How long the moment of the last notice naming a thread is remembered (quiet_since).
HEARD_KEEP_S = 60.0


def _redis() -> aioredis.Redis:
    client: aioredis.Redis = aioredis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2
    )
    return client


_publishers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary()
)


async def notice(thread_ids: Collection[str]) -> None:
    """Tell every waiter of ``thread_ids`` to read its turn again (one PUBLISH, on the
    running event loop's client)."""
    if not thread_ids:
        return
    loop = asyncio.get_running_loop()
    client = _publishers.get(loop)
    if client is None:
        client = _publishers[loop] = _redis()
    await client.publish(CHANNEL, " ".join(sorted(thread_ids)))


class Waiters:
    """This event loop's callers waiting on threads, and the subscription that wakes them."""

    def __init__(self) -> None:
        self.waiting: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self.subscribed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # time.monotonic() when the subscription became live (None while it is not), and
        # when a notice last named each thread (the last HEARD_KEEP_S seconds).
        self.live_since: float | None = None
        self.heard: dict[str, float] = {}
        self._pruned = time.monotonic()

    @contextlib.contextmanager
    def registered(self, thread_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever a notice names ``thread_id``, while the block runs."""
        woken = asyncio.Event()
        self.waiting[thread_id].add(woken)
        if self.task is None or self.task.done():
            # A context of its own: the request that starts it ends long before it does.
            self.task = asyncio.create_task(
                self._listen(), name="turn-signals", context=contextvars.Context()
            )
        try:
            yield woken
        finally:
            waiting = self.waiting.get(thread_id)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self.waiting[thread_id]

    async def ready(self) -> bool:
        """Whether the subscription is live (waiting up to ``READY_WAIT_S`` for it)."""
        if not self.subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.subscribed.wait(), READY_WAIT_S)
        return self.subscribed.is_set()

    def quiet_since(self, thread_id: str, moment: float) -> bool:
        """Whether every notice naming ``thread_id`` after ``moment`` (``time.monotonic()``)
        is still to come: the subscription has been live since before it and none named the
        thread since. A turn of the thread that had not ended at ``moment`` has not ended
        since, or its end's notice will wake a waiter registered now."""
        live = self.live_since
        return (
            live is not None
            and live <= moment
            and moment >= time.monotonic() - HEARD_KEEP_S
            and self.heard.get(thread_id, moment - 1.0) < moment
        )

    async def _listen(self) -> None:
        """Subscribe and dispatch notices until nobody waited for ``KEEP_S``; reconnect
        after a failure."""
        loop = asyncio.get_running_loop()
        busy = loop.time()
        while self.waiting or loop.time() - busy < KEEP_S:
            client = _redis()  # its own: a failure closes it
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self.live_since = time.monotonic()
                    self.subscribed.set()
                    while self.waiting or loop.time() - busy < KEEP_S:
                        message = await pubsub.get_message(timeout=1.0)
                        if message is not None:
                            self._wake(message["data"])
                        if self.waiting:
                            busy = loop.time()
            except Exception as error:  # waiters fall back to re-reading their turn
                logger.warning("turn signals: subscription lost (%s); reconnecting", error)
                await asyncio.sleep(RECONNECT_S)
            finally:
                self.live_since = None
                self.subscribed.clear()
                await client.aclose()

    def _wake(self, data: Any) -> None:
        text = data.decode() if isinstance(data, bytes) else str(data)
        now = time.monotonic()
        for thread_id in text.split():
            self.heard[thread_id] = now
            for woken in self.waiting.get(thread_id, ()):
                woken.set()
        if now - self._pruned > HEARD_KEEP_S:
            self.heard = {key: at for key, at in self.heard.items() if now - at <= HEARD_KEEP_S}
            self._pruned = now


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Waiters] = (
    weakref.WeakKeyDictionary()
)


def waiters() -> Waiters:
    """The running event loop's :class:`Waiters`."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is None:
        found = _by_loop[loop] = Waiters()
    return found
