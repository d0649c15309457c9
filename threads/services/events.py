"""Reading a thread's event log (writes go through :func:`threads.events.publish`)."""

from __future__ import annotations

from typing import Any

from common.errors import ValidationFailed
from threads.events import envelope_of, session_id_of
from threads.models import Event, Thread

MAX_PAGE = 1000


def event_list(
    *, thread: Thread, after: int = 0, upto: int | None = None, limit: int = 100
) -> list[Event]:
    """The thread's persisted events with ``sequence > after`` (and ``<= upto`` when given),
    oldest first, at most ``limit`` (1..1000). Raises ValidationFailed for a negative
    ``after`` or a bad limit."""
    if after < 0:
        raise ValidationFailed("after must not be negative", field="after")
    if not 1 <= limit <= MAX_PAGE:
        raise ValidationFailed(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    rows = Event.objects.for_tenant(thread.tenant).filter(thread=thread, sequence__gt=after)
    if upto is not None:
        rows = rows.filter(sequence__lte=upto)
    return list(rows.order_by("sequence")[:limit])


def event_envelopes(
    *, thread: Thread, after: int = 0, upto: int | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Envelopes of :func:`event_list`, optionally only up to sequence ``upto``."""
    rows = event_list(thread=thread, after=after, upto=upto, limit=limit)
    session_id = session_id_of(thread)
    return [envelope_of(row, session_id=session_id) for row in rows]


def event_last_sequence(*, thread: Thread) -> int:
    """The sequence of the thread's newest persisted event (0 when none)."""
    last = (
        Event.objects.for_tenant(thread.tenant)
        .filter(thread=thread)
        .order_by("-sequence")
        .values_list("sequence", flat=True)
        .first()
    )
    return last or 0
