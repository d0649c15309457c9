"""Building old history for the retention tests: rows written through the services, then
moved back in time (what a clock would have stamped them with)."""

from __future__ import annotations

from typing import Any

from common.time import now_us
from tenancy.models import Tenant
from tests.factories import make_thread
from threads.models import Event, Log, Thread, Turn
from threads.services.logs import log_create
from threads.state import ThreadState

DAY_US = 86_400 * 1_000_000
NOW = now_us()
OLD = NOW - 3 * DAY_US  # past a 1-day policy, within every default
RECENT = NOW - 3_600 * 1_000_000


def old_thread(tenant: Tenant, **fields: Any) -> Thread:
    return make_thread(tenant, created_at=NOW - 10 * DAY_US, **fields)


def emit(thread: Thread, count: int, *, at: int) -> list[int]:
    """``count`` custom events stamped ``at``; their sequences."""
    state = ThreadState(thread)
    for index in range(count):
        state.emit("tick", index)
    rows = Event.objects.filter(thread=thread).order_by("-sequence")[:count]
    sequences = sorted(row.sequence for row in rows)
    Event.objects.filter(thread=thread, sequence__in=sequences).update(created_at=at)
    return sequences


def log_at(thread: Thread, at: int) -> Log:
    log = log_create(thread=thread, kind="llm", data={"at": at})
    Log.objects.filter(pk=log.pk).update(created_at=at)
    return log


def finished_turn(thread: Thread, *, ended_at: int, position: int) -> Turn:
    return Turn.objects.create(
        tenant_id=thread.tenant_id, thread=thread, position=position, kind="message",
        source="message", status="completed", created_at=ended_at - 1, started_at=ended_at - 1,
        ended_at=ended_at,
    )  # fmt: skip
