"""Where thread facts go: the event-sink interface.

Services and ThreadState call :func:`publish`; the configured sink decides what
happens. Until the events work lands (a persisted, gap-free per-thread log
broadcast over Channels), the sink logs each event at DEBUG on the
``threads.events`` logger. Payloads never carry secret values (KV changes
carry the key, not the value).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from threads.models import Thread

logger = logging.getLogger("threads.events")


class EventSink(Protocol):
    def publish(self, thread: Thread, type: str, payload: Mapping[str, Any]) -> None: ...


class LoggingSink:
    """Logs every event (type, thread, payload keys) at DEBUG."""

    def publish(self, thread: Thread, type: str, payload: Mapping[str, Any]) -> None:
        logger.debug("%s thread=%s keys=%s", type, thread.id, sorted(payload))


_sink: EventSink = LoggingSink()


def set_sink(sink: EventSink) -> EventSink:
    """Install ``sink``; returns the previous one (tests restore it)."""
    global _sink
    previous, _sink = _sink, sink
    return previous


def publish(thread: Thread, type: str, payload: Mapping[str, Any]) -> None:
    _sink.publish(thread, type, payload)
