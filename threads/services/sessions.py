"""Sessions: the durable snapshot of a session (agent-runtime-events ``get_session``).

A session is a tree of threads: its id is the root thread's id, and every thread below the
root names it in ``root`` (``threads.services.threads.thread_create``). A snapshot reads the
tree, the last turns of each of its threads and each thread's event cursor in a fixed number
of statements, however many threads the session holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import connection

from common.errors import NotFound
from common.ids import id_of
from common.rows import columns_of
from tenancy.models import Tenant
from threads.models import EventCounter, Thread, Turn
from threads.services.turns import turn_message_ids

MAX_SESSION_THREADS = 500
RECENT_TURNS = 5
NAME_TAG = "name:"  # a spawned child's label (threads.runtime.spawn)


@dataclass(frozen=True)
class SessionThread:
    """One thread of a session: ``depth`` 0 for the root; ``recent_turns`` its last
    :data:`RECENT_TURNS` turns of its own (not inputs that joined one), newest first;
    ``events_cursor`` the sequence of its last event (0: none)."""

    thread: Thread
    depth: int
    recent_turns: Sequence[Turn]
    events_cursor: int

    @property
    def name(self) -> str | None:
        """The label a spawn gave the thread (its ``name:`` tag), if any."""
        for tag in self.thread.tags:
            if isinstance(tag, str) and tag.startswith(NAME_TAG):
                return tag.removeprefix(NAME_TAG)
        return None


@dataclass(frozen=True)
class SessionSnapshot:
    """A session's tree, root first then by creation. ``updated_at`` is the latest
    ``updated_at``/``last_activity_at`` of all its threads (those cut off included);
    ``truncated``: the session holds more than :data:`MAX_SESSION_THREADS` threads and only
    the first of them are listed. ``message_ids`` maps each listed turn to the messages it
    wrote, in order."""

    root: Thread
    threads: Sequence[SessionThread]
    updated_at: int
    thread_count: int
    truncated: bool
    message_ids: Mapping[uuid.UUID, Sequence[str]]


def session_snapshot(*, tenant: Tenant, session_id: uuid.UUID | str) -> SessionSnapshot:
    """``tenant``'s session ``session_id``: four statements at most, whatever its size.

    Raises NotFound when the tenant has no thread ``session_id`` (another tenant's, or a
    malformed id), or when that thread is a child, naming the session it belongs to."""
    try:
        key = id_of(session_id)
    except ValueError as error:
        raise NotFound(f"no session {session_id}") from error
    tree, thread_count, updated_at = _tree(tenant=tenant, root_id=key)
    if not tree:
        raise NotFound(f"no session {session_id}")
    root = tree[0][0]
    if root.root_id is not None:
        raise NotFound(
            f"thread {root.pk} is not a session root; its session is {root.root_id}",
            details={"session_id": str(root.root_id)},
        )
    ids = [thread.pk for thread, _ in tree]
    turns = _recent_turns(tenant=tenant, thread_ids=ids)
    cursors = _event_cursors(tenant=tenant, thread_ids=ids)
    listed = [
        SessionThread(
            thread=thread,
            depth=depth,
            recent_turns=turns.get(thread.pk, []),
            events_cursor=cursors.get(thread.pk, 0),
        )
        for thread, depth in tree
    ]
    every_turn = [turn for entry in listed for turn in entry.recent_turns]
    return SessionSnapshot(
        root=root,
        threads=listed,
        updated_at=updated_at,
        thread_count=thread_count,
        truncated=thread_count > len(listed),
        message_ids=turn_message_ids(turns=every_turn),
    )


def _tree(*, tenant: Tenant, root_id: uuid.UUID) -> tuple[list[tuple[Thread, int]], int, int]:
    """The session's threads with their depths (root first, then by creation; at most
    :data:`MAX_SESSION_THREADS`), how many it holds and when it last changed. When
    ``root_id`` names a child, its subtree, the child first (its ``root_id`` says so).

    The tree is walked down the parent links, so a depth is exact even for a thread whose
    parent the bound cut off; the window aggregates run before LIMIT, over the whole tree."""
    columns = columns_of(Thread)
    table = Thread._meta.db_table
    sql = (
        "WITH RECURSIVE tree(id, depth) AS ("  # noqa: S608 - table and column names only
        f" SELECT id, 0 FROM {table} WHERE id = %s AND tenant_id = %s"
        f" UNION ALL SELECT child.id, tree.depth + 1 FROM {table} AS child"
        " JOIN tree ON child.parent_id = tree.id WHERE child.tenant_id = %s)"
        f" SELECT {columns.sql}, tree.depth, count(*) OVER (),"
        f" max(greatest({table}.updated_at, {table}.last_activity_at)) OVER ()"
        f" FROM tree JOIN {table} ON {table}.id = tree.id"
        f" ORDER BY tree.depth = 0 DESC, {table}.created_at, {table}.id LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [root_id, tenant.pk, tenant.pk, MAX_SESSION_THREADS])
        rows = cursor.fetchall()
    if not rows:
        return [], 0, 0
    width = len(columns)
    threads = []
    for row in rows:
        thread = columns.build(row[:width])
        Thread.tenant.field.set_cached_value(thread, tenant)
        threads.append((thread, int(row[width])))
    return threads, int(rows[0][width + 1]), int(rows[0][width + 2])


def _recent_turns(
    *, tenant: Tenant, thread_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Turn]]:
    """The last :data:`RECENT_TURNS` turns of each thread, newest first, as the turns list
    orders them: one statement, each thread's turns read by its index up to the limit."""
    columns = columns_of(Turn)
    table = Turn._meta.db_table
    sql = (
        f"SELECT {columns.sql} FROM unnest(%s::uuid[]) AS session_thread(id)"  # noqa: S608
        f" CROSS JOIN LATERAL (SELECT * FROM {table} AS recent"
        " WHERE recent.thread_id = session_thread.id AND recent.tenant_id = %s"
        " AND recent.host_id IS NULL"
        " ORDER BY recent.created_at DESC, recent.position DESC LIMIT %s) AS"
        f" {table} ORDER BY {table}.thread_id, {table}.created_at DESC, {table}.position DESC"
    )
    found: dict[uuid.UUID, list[Turn]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(thread_ids), tenant.pk, RECENT_TURNS])
        for row in cursor.fetchall():
            turn = columns.build(row)
            found.setdefault(turn.thread_id, []).append(turn)
    return found


def _event_cursors(*, tenant: Tenant, thread_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Each thread's last event sequence (a thread with none has no counter row)."""
    table = EventCounter._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT thread_id, last_sequence FROM {table}"  # noqa: S608 - the table name only
            " WHERE tenant_id = %s AND thread_id = ANY(%s)",
            [tenant.pk, list(thread_ids)],
        )
        return {thread_id: int(last) for thread_id, last in cursor.fetchall()}
