"""Reading a thread's event log (writes go through :func:`threads.events.publish`)."""

from __future__ import annotations

from typing import Any

from common.errors import DomainError, ValidationFailed
from threads.events import envelope_of, session_id_of
from threads.events.vocabulary import EventType
from threads.models import Event, EventCounter, Thread, Turn

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


class EventsPruned(DomainError):
    """A follower asked for events the retention policy deleted (``details.pruned_through``
    is the highest of them)."""

    code = "events_pruned"
    status = 410


def event_pruned_through(*, thread: Thread) -> int:
    """The highest sequence of the thread's log that was deleted (0: none was): the log is
    gap-free and retention (the ``retention`` app) deletes only a prefix of it, so this is
    the oldest kept sequence minus one, or, when nothing is kept, the last one handed out.
    One or two indexed reads."""
    oldest = (
        Event.objects.filter(thread_id=thread.pk)
        .order_by("sequence")
        .values_list("sequence", flat=True)
        .first()
    )
    if oldest is not None:
        return int(oldest) - 1
    last = (
        EventCounter.objects.filter(thread_id=thread.pk)
        .values_list("last_sequence", flat=True)
        .first()
    )
    return int(last or 0)


def events_pruned(*, pruned_through: int) -> EventsPruned:
    """The error that tells a follower its ``after`` falls in the pruned part of the log."""
    return EventsPruned(
        f"events up to sequence {pruned_through} were pruned by the retention policy; resume "
        f"from {pruned_through + 1} (after={pruned_through}) or read the thread's current state",
        details={"pruned_through": pruned_through},
    )


def event_resume_point(*, thread: Thread, after: int | None) -> tuple[int, EventsPruned | None]:
    """Where a follower's replay starts (the ``after`` of its cursor), and the error to tell
    it first when its ``after`` falls before the kept log (``after < pruned_through``): it
    then starts at the oldest kept event. Without an ``after`` (a new follower, not one
    resuming) it starts at the beginning of what is kept, silently and without a read."""
    if after is None:
        return 0, None
    pruned_through = event_pruned_through(thread=thread)
    if after < pruned_through:
        return pruned_through, events_pruned(pruned_through=pruned_through)
    return after, None


def turn_catalogs(*, turn: Turn) -> list[Event]:
    """The ``tool.catalog.resolved`` events of ``turn``: the tool catalogs its model calls
    were offered, oldest first (one per side and prompt, and one more per change)."""
    return list(
        Event.objects.filter(
            thread_id=turn.thread_id, turn_id=str(turn.pk), type=EventType.TOOL_CATALOG_RESOLVED
        ).order_by("sequence")
    )
