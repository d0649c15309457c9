"""The Postgres fence: a worker whose lock expired cannot write (ARCHITECTURE §5).

Each holder of a thread's Redis lock increments ``Thread.fence`` once and passes the
value it got to every write of its flow. A write locks the thread row and compares; a
newer holder has incremented the fence, so a stale worker's write raises StaleFence and
changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import F

from common.errors import Conflict, NotFound
from common.rows import columns_of
from common.time import now_us
from tenancy.models import Tenant
from threads.models import Thread

# Literal SQL (the table is threads_thread): these run on every write of a flow, so they
# skip the ORM.

# Whether the thread has turns waiting (in a statement on threads_thread).
HAS_WAITING = (
    "EXISTS (SELECT 1 FROM threads_turn WHERE thread_id = threads_thread.id "
    "AND host_id IS NULL AND status = 'queued')"
)
# What a lock holder decides on: the thread's state and whether turns wait. Every
# statement that reads it returns these columns, in this order (see apply_state).
STATE_COLUMNS = f"status, acting_side, terminated_at, stop_requested, agent_name, {HAS_WAITING}"
# The turn that runs next: the first waiting one (NULL when none waits, or while a paused
# turn holds the queue: the driver reads that one itself).
NEXT_WAITING = (
    "(SELECT id FROM threads_turn WHERE thread_id = threads_thread.id AND host_id IS NULL "
    "AND status = 'queued' AND threads_thread.paused_turn_id IS NULL ORDER BY position LIMIT 1)"
)
# The statements are built from the constants above only; every value is a parameter.
_ACQUIRE = (
    "UPDATE threads_thread SET fence = fence + 1 WHERE id = %s "  # noqa: S608
    f"RETURNING fence, {STATE_COLUMNS}"
)
_REFRESH = f"SELECT {STATE_COLUMNS} FROM threads_thread WHERE id = %s"  # noqa: S608
# The columns are LockedThread's.
_LOCK = (
    "SELECT fence, terminated_at, status, stop_requested, paused_turn_id FROM threads_thread "
    "WHERE id = %s FOR NO KEY UPDATE"
)
_READ = (
    "SELECT fence, terminated_at, status, stop_requested, paused_turn_id FROM threads_thread "
    "WHERE id = %s"
)


class ThreadTerminated(Conflict):
    """A write to a terminated thread: it accepts no new work and no more state."""

    code = "terminated"


def terminated_check(*, thread: Thread, what: str) -> None:
    """Refuse a write to ``thread``'s ``what`` (its KV, files or env) once it is terminated,
    as its messages and turns are."""
    if thread.terminated_at is not None:
        raise ThreadTerminated(f"the thread is terminated; its {what} accept no more writes")


class StaleFence(Conflict):
    """The flow's fence is no longer the thread's: another worker took the thread over."""

    code = "stale_fence"

    @classmethod
    def of(cls, thread: Thread, fence: int, *, now: int | None = None) -> StaleFence:
        """The error for ``fence`` of ``thread`` (``now``: the thread's fence, when known)."""
        current = f" (now {now})" if now is not None else ""
        return cls(
            f"fence {fence} of thread {thread.pk} is stale{current}: another worker holds "
            "the thread"
        )


def fence_acquire(*, thread: Thread) -> tuple[int, bool]:
    """Take the next fence; returns it and whether the turns wait. ``thread``'s status,
    acting_side, terminated_at, stop_requested and agent_name are refreshed from the same
    statement: what the previous holder left, read after it released the lock.

    Precondition: the caller has just acquired the thread's lock.
    """
    with connection.cursor() as cursor:
        cursor.execute(_ACQUIRE, [thread.pk])
        fence, *state = _found(cursor.fetchone(), thread)
    thread.fence = fence
    return fence, apply_state(thread, state)


def fence_take(*, thread_id: Any, tenant_id: Any) -> tuple[Thread, int, Any] | None:
    """:func:`fence_acquire` for a thread not loaded yet: one statement takes the next fence
    and reads the thread (its tenant attached). Returns the thread, the fence and the id of
    the turn that runs next (None when none waits); None when no thread ``thread_id`` of
    ``tenant_id`` exists.

    Precondition: the caller has just acquired the thread's lock.
    """
    threads, tenants = columns_of(Thread), columns_of(Tenant)
    with connection.cursor() as cursor:
        cursor.execute(_take_sql(), [thread_id, tenant_id])
        row = cursor.fetchone()
    if row is None:
        return None
    *columns, next_turn_id = row
    thread = threads.build(columns[: len(threads)])
    Thread.tenant.field.set_cached_value(thread, tenants.build(columns[len(threads) :]))
    return thread, thread.fence, next_turn_id


@functools.cache
def _take_sql() -> str:
    return (
        "UPDATE threads_thread SET fence = threads_thread.fence + 1 "  # noqa: S608
        "FROM tenancy_tenant WHERE threads_thread.id = %s AND threads_thread.tenant_id = %s "
        f"AND tenancy_tenant.id = threads_thread.tenant_id RETURNING {columns_of(Thread).sql}, "
        f"{columns_of(Tenant).sql}, {NEXT_WAITING}"
    )


def thread_refresh(*, thread: Thread) -> bool:
    """Reload ``thread``'s status, acting_side, terminated_at, stop_requested and agent_name
    in one statement; returns whether its turns wait."""
    with connection.cursor() as cursor:
        cursor.execute(_REFRESH, [thread.pk])
        return apply_state(thread, _found(cursor.fetchone(), thread))


def apply_state(thread: Thread, state: Any) -> bool:
    """Set ``thread``'s fields from a row of :data:`STATE_COLUMNS`; whether turns wait."""
    status, acting_side, terminated_at, stop_requested, agent_name, pending = state
    thread.status, thread.acting_side, thread.terminated_at = status, acting_side, terminated_at
    thread.stop_requested, thread.agent_name = stop_requested, agent_name
    return bool(pending)


def fence_retire(*, thread: Thread, fence: int) -> bool:
    """Make ``fence`` stale if it is still the thread's: its holder lost the lock, so none of
    its later writes may land. False when a newer holder has already moved the fence on."""
    return Thread.objects.filter(pk=thread.pk, fence=fence).update(fence=F("fence") + 1) == 1


class LockedThread(NamedTuple):
    """The columns of a locked thread row that writers decide on."""

    fence: int
    terminated_at: int | None
    status: str
    stop_requested: bool
    paused_turn_id: Any  # the turn resting on a person's decision (threads.services.actions)


def _found(row: Any, thread: Thread) -> Any:
    """``row``, the thread's; NotFound when there is none (the thread was deleted, or is
    another tenant's than the one the code acts for)."""
    if row is None:
        raise NotFound(f"no thread {thread.pk}", field="thread_id")
    return row


def _checked(row: Any, thread: Thread, fence: int | None) -> LockedThread:
    locked = LockedThread(*_found(row, thread))
    if fence is not None and locked.fence != fence:
        raise StaleFence.of(thread, fence, now=locked.fence)
    return locked


def fence_check(*, thread: Thread, fence: int | None) -> LockedThread:
    """Lock the thread row (``FOR NO KEY UPDATE``) until the caller's transaction ends.

    Precondition: inside ``transaction.atomic``. ``fence`` None skips the comparison (writes
    that do not belong to a flow). Raises StaleFence when ``fence`` is not current.
    """
    with connection.cursor() as cursor:
        cursor.execute(_LOCK, [thread.pk])
        return _checked(cursor.fetchone(), thread, fence)


def fence_read(*, thread: Thread) -> LockedThread | None:
    """The thread row's fence and state without locking it (None: the thread is gone); for
    explaining why a fenced write changed nothing."""
    with connection.cursor() as cursor:
        cursor.execute(_READ, [thread.pk])
        row = cursor.fetchone()
    return None if row is None else LockedThread(*row)


def thread_fenced_update(*, thread: Thread, fence: int | None, **fields: Any) -> None:
    """Update thread columns (``agent_name``, ...) if ``fence`` is still current, in one
    statement. Raises StaleFence otherwise. Never the status: that changes only through
    :mod:`threads.services.status`."""
    updated_at = now_us()
    concrete = {field.name: field for field in Thread._meta.concrete_fields}
    columns = [concrete[name] for name in fields]
    assignments = ", ".join(f"{field.column} = %s" for field in columns)
    values = [field.get_db_prep_save(fields[field.name], connection) for field in columns]
    # Column names come from the model's fields; every value is a parameter.
    sql = f"UPDATE threads_thread SET {assignments}, updated_at = %s WHERE id = %s"  # noqa: S608
    params = [*values, updated_at, thread.pk]
    if fence is not None:
        sql += " AND fence = %s"
        params.append(fence)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        written = cursor.rowcount
    if written == 0 and fence is not None:
        raise StaleFence.of(thread, fence)
    for name, value in fields.items():
        setattr(thread, name, value)
    thread.updated_at = updated_at
