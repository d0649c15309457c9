"""Following a thread's events from a sequence on: the logic WebSocket and SSE share.

A follower subscribes to the thread's group first, then replays the log after ``after``,
then handles live messages with :meth:`EventCursor.admit`: a sequence already sent is
skipped, the next one is sent, and a jump (a broadcast still in flight, a message the layer
dropped, an envelope too large to travel inline) is filled from the log, which holds every
committed event. So the seam between replay and live has no gap and no duplicate, and
clients receive persisted events in sequence order, each once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.core.serializers.json import DjangoJSONEncoder

from threads.models import Thread
from threads.services.events import event_envelopes

REPLAY_BATCH = 500


@dataclass(frozen=True)
class Delivery:
    """One event ready to send: its type, its sequence (None: ephemeral) and its JSON."""

    type: str
    sequence: int | None
    text: str


class EventCursor:
    """Delivers ``thread``'s events with a sequence above ``after``, in order, each once;
    ``reasoning.delta`` only when ``reasoning`` (a follower opted in)."""

    def __init__(self, *, thread: Thread, after: int, reasoning: bool = False) -> None:
        self.thread = thread
        self.last = after
        self.reasoning = reasoning

    async def replay(self) -> AsyncIterator[Delivery]:
        """Every stored event after the cursor, in batches, advancing it."""
        while True:
            batch = await self._read(upto=None)
            for delivery in batch:
                yield delivery
            if len(batch) < REPLAY_BATCH:
                return

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
        if sequence <= self.last:
            return []
        if sequence == self.last + 1 and isinstance(text, str):
            self.last = sequence
            return [Delivery(kind, sequence, text)]
        delivered: list[Delivery] = []
        while self.last < sequence:
            batch = await self._read(upto=sequence)
            if not batch:
                break  # not visible yet: the next message fills it
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
