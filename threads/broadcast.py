"""Sending events to Channels groups without making the writer wait, and the engine's one
door for watching what it commits (:func:`observe`).

:func:`broadcast` hands an envelope to one background thread per process, which owns an
event loop and sends to the channel layer in submission order. The writer (a flow, a
request) pays a queue put, not Redis round trips nor JSON encoding: the sender encodes an
envelope only for groups that have members. A send that fails is logged and dropped:
the event is already in the thread's log, and consumers fill any gap from it.

Every event passes through here once committed (persisted ones after their commit,
ephemeral ones at once), in order, so an observer registered with :func:`observe` (metrics,
from above the engine) learns every engine fact without a hook in the engine: it is called on
the sender's thread with each batch just handed to the channel layer. With none registered
nothing is done for it: no statement, no copy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder

from threads import turn_signals

logger = logging.getLogger(__name__)

# The Channels message type consumers handle (``event_message``).
MESSAGE_TYPE = "event.message"
# A message carries the envelope as JSON text (``json``), ready to send as is. Envelopes
# above this many characters travel as their sequence only (``json`` None); consumers read
# them from the log (channels-redis messages should stay small).
MAX_INLINE_CHARS = 256 * 1024

# One envelope and the groups it goes to.
Item = tuple[Sequence[str], Mapping[str, Any]]


class _Sender:
    """One daemon thread running an event loop that drains a FIFO of group sends."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        # Each item with the moment it was submitted (time.monotonic), for the fan-out lag.
        self.queue: asyncio.Queue[tuple[Item, float]] | None = None
        self.noticing: set[asyncio.Task[None]] = set()
        self.ready = threading.Event()
        self.idle = threading.Condition()
        self.pending = 0
        self.thread = threading.Thread(target=self._run, name="event-broadcast", daemon=True)
        self.thread.start()
        self.ready.wait()

    def submit(
        self, items: Sequence[tuple[Sequence[str], Mapping[str, Any]]], wake: Collection[str]
    ) -> None:
        with self.idle:
            self.pending += len(items)
        self.loop.call_soon_threadsafe(self._put, items, wake, time.monotonic())

    def _put(self, items: Sequence[Item], wake: Collection[str], submitted: float) -> None:
        assert self.queue is not None
        if wake:  # the events are committed: waiters may read their turns at once
            task = self.loop.create_task(self._notice(wake))
            self.noticing.add(task)
            task.add_done_callback(self.noticing.discard)
        for item in items:
            self.queue.put_nowait((item, submitted))

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far was sent (tests, benchmarks)."""
        with self.idle:
            return self.idle.wait_for(lambda: self.pending == 0, timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.queue = asyncio.Queue()
        self.ready.set()
        self.loop.run_until_complete(self._drain())

    async def _notice(self, wake: Collection[str]) -> None:
        try:
            await turn_signals.notice(wake)
        except Exception:  # a waiter reads its turn again within RECHECK_S anyway
            logger.exception("waking the waiters of threads %s failed", sorted(wake))

    async def _drain(self) -> None:
        assert self.queue is not None
        layer = get_channel_layer()
        assert layer is not None
        while True:
            queued = [await self.queue.get()]
            while not self.queue.empty():  # whatever queued meanwhile goes out together
                queued.append(self.queue.get_nowait())
            items = [item for item, _submitted in queued]
            grouped = _by_group(items)
            try:
                observed = await _observed(layer, list(grouped))
            except Exception:
                logger.exception("event broadcast: reading group members failed")
                observed = set(grouped)
            encoded: dict[int, dict[str, Any]] = {}  # each envelope encoded once, if sent
            for group, envelopes in grouped.items():
                if group not in observed:
                    continue
                messages = [_message(envelope, encoded) for envelope in envelopes]
                message = messages[0] if len(messages) == 1 else _batch(messages)
                try:
                    await layer.group_send(group, message)
                except Exception:
                    logger.exception("event broadcast to %s failed", group)
            if _observers:  # the oldest item waited longest (FIFO)
                _notify([envelope for _groups, envelope in items], time.monotonic() - queued[0][1])
            with self.idle:
                self.pending -= len(items)
                self.idle.notify_all()


async def _observed(layer: Any, groups: Sequence[str]) -> set[str]:
    """The groups that have members, asked in one round trip per Redis host. Most threads
    have no live viewer, and a send to an empty group costs ``group_send`` two round trips.
    Skipping it loses nothing: a socket joins its group before replaying the log, so an
    event committed before it joined comes from the log.

    Reads channels-redis's group keys (a sorted set per group) for layers that have them;
    any other layer is sent every group."""
    group_key = getattr(layer, "_group_key", None)
    if group_key is None:
        return set(groups)
    by_host: dict[int, list[str]] = {}
    for group in groups:
        by_host.setdefault(layer.consistent_hash(group), []).append(group)
    observed: set[str] = set()
    for index, members in by_host.items():
        async with layer.connection(index).pipeline(transaction=False) as pipe:
            for group in members:
                pipe.exists(group_key(group))
            found = await pipe.execute()
        observed.update(group for group, count in zip(members, found, strict=True) if count)
    return observed


def _by_group(
    items: Sequence[tuple[Sequence[str], Mapping[str, Any]]],
) -> dict[str, list[Mapping[str, Any]]]:
    """Each group's envelopes, in submission order."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for groups, envelope in items:
        for group in groups:
            grouped.setdefault(group, []).append(envelope)
    return grouped


def _message(envelope: Mapping[str, Any], encoded: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The layer message carrying ``envelope``, encoded the first time a group needs it:
    events nobody watches are never encoded."""
    found = encoded.get(id(envelope))
    if found is None:
        text = json.dumps(envelope, cls=DjangoJSONEncoder)
        found = encoded[id(envelope)] = {
            "type": MESSAGE_TYPE,
            "event_type": envelope.get("type"),
            "sequence": envelope.get("sequence"),
            "json": text if len(text) <= MAX_INLINE_CHARS else None,
        }
    return found


def _batch(messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several messages as one (``batch``, in order): one layer send instead of many."""
    return {"type": MESSAGE_TYPE, "batch": [dict(m, type=MESSAGE_TYPE) for m in messages]}


def unbatched(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The messages a layer message carries (one, or a ``batch``), in order."""
    batch = message.get("batch")
    return list(batch) if isinstance(batch, list) else [message]


# A batch of envelopes just sent, and how long the oldest of them waited between its hand-off
# here (its commit) and its send, in seconds.
Observer = Callable[[Sequence[Mapping[str, Any]], float], None]
_observers: list[Observer] = []


def observe(callback: Observer) -> Callable[[], None]:
    """Call ``callback`` with every batch of sent envelopes in this process; returns its
    removal. It runs on the sender's event loop: it must be quick and touch no database.
    One that raises is logged; the others still run."""
    _observers.append(callback)
    return lambda: _observers.remove(callback)


def _notify(envelopes: Sequence[Mapping[str, Any]], lag_s: float) -> None:
    for callback in tuple(_observers):
        try:
            callback(envelopes, lag_s)
        except Exception:
            logger.exception("an event observer failed")


_sender: _Sender | None = None
_lock = threading.Lock()


def _current() -> _Sender:
    global _sender
    with _lock:
        if _sender is None or _sender.pid != os.getpid():  # a forked child starts its own
            _sender = _Sender()
        return _sender


def broadcast(groups: Sequence[str], envelope: Mapping[str, Any]) -> None:
    """Queue ``envelope`` for every group in ``groups``; returns at once."""
    broadcast_many([(groups, envelope)])


def broadcast_many(
    items: Sequence[tuple[Sequence[str], Mapping[str, Any]]], *, wake: Collection[str] = ()
) -> None:
    """Queue several envelopes, in order, with one wake-up of the sender; ``wake``: threads
    whose turn waiters should read their turn again (:func:`turn_signals.notice`)."""
    _current().submit(items, wake)


def broadcast_flush(timeout: float = 5.0) -> bool:
    """Block until queued broadcasts were handed to the channel layer; False on timeout."""
    return _current().flush(timeout)
