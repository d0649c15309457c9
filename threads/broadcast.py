"""Sending events to Channels groups without making the writer wait.

:func:`broadcast` hands an envelope to one background thread per process, which owns an
event loop and sends to the channel layer in submission order. The writer (a flow, a
request) pays a queue put, not Redis round trips. A send that fails is logged and dropped:
the event is already in the thread's log, and consumers fill any gap from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder

logger = logging.getLogger(__name__)

# The Channels message type consumers handle (``event_message``).
MESSAGE_TYPE = "event.message"
# A message carries the envelope as JSON text (``json``), ready to send as is. Envelopes
# above this many characters travel as their sequence only (``json`` None); consumers read
# them from the log (channels-redis messages should stay small).
MAX_INLINE_CHARS = 256 * 1024


class _Sender:
    """One daemon thread running an event loop that drains a FIFO of group sends."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[tuple[Sequence[str], dict[str, Any]] | None] | None = None
        self.ready = threading.Event()
        self.idle = threading.Condition()
        self.pending = 0
        self.thread = threading.Thread(target=self._run, name="event-broadcast", daemon=True)
        self.thread.start()
        self.ready.wait()

    def submit(self, groups: Sequence[str], message: dict[str, Any]) -> None:
        with self.idle:
            self.pending += 1
        assert self.queue is not None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (groups, message))

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far was sent (tests, benchmarks)."""
        with self.idle:
            return self.idle.wait_for(lambda: self.pending == 0, timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.queue = asyncio.Queue()
        self.ready.set()
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        assert self.queue is not None
        layer = get_channel_layer()
        while True:
            item = await self.queue.get()
            if item is None:
                return
            groups, message = item
            for group in groups:
                try:
                    assert layer is not None
                    await layer.group_send(group, message)
                except Exception:
                    logger.exception("event broadcast to %s failed", group)
            with self.idle:
                self.pending -= 1
                self.idle.notify_all()


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
    encoded = json.dumps(envelope, cls=DjangoJSONEncoder)
    message: dict[str, Any] = {
        "type": MESSAGE_TYPE,
        "event_type": envelope.get("type"),
        "sequence": envelope.get("sequence"),
        "json": encoded if len(encoded) <= MAX_INLINE_CHARS else None,
    }
    _current().submit(groups, message)


def broadcast_flush(timeout: float = 5.0) -> bool:
    """Block until queued broadcasts were handed to the channel layer; False on timeout."""
    return _current().flush(timeout)
