"""The storage report of a thread: what its messages, files, events, logs and KV values take,
summed by PostgreSQL in one statement (no row is read into Python)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from threads.models import Event, Log, Message, Thread, ThreadFile, ThreadValue
from threads.services.events import event_pruned_through


@dataclass(frozen=True)
class Usage:
    """How many rows of one kind a thread has, and their bytes."""

    count: int
    bytes: int


@dataclass(frozen=True)
class ThreadStorage:
    """A thread's storage by kind. Message bytes are the stored text of its content,
    reasoning, tool calls and attachment references (a file an attachment names is counted
    once, under files); file bytes the stored sizes of its files (directories count
    nothing); event and log bytes their payload/data as JSON text; KV bytes the serialised
    values. ``events_pruned_through`` is the highest event sequence retention deleted."""

    messages: Usage
    files: Usage
    events: Usage
    logs: Usage
    kv: Usage
    events_pruned_through: int

    @property
    def total_bytes(self) -> int:
        return sum(part.bytes for part in (self.messages, self.files, self.events, self.logs,
                                           self.kv))  # fmt: skip


def _table(model: type[object]) -> str:
    return str(connection.ops.quote_name(model._meta.db_table))  # type: ignore[attr-defined]


_REPORT = """
SELECT
    (SELECT count(*) FROM {message} WHERE thread_id = %(thread)s),
    (SELECT coalesce(sum(coalesce(octet_length(content), 0) + octet_length(reasoning_content)
        + coalesce(octet_length(tool_calls::text), 0) + octet_length(attachments::text)), 0)
        FROM {message} WHERE thread_id = %(thread)s),
    (SELECT count(*) FROM {file} WHERE thread_id = %(thread)s AND NOT is_directory),
    (SELECT coalesce(sum(size), 0) FROM {file} WHERE thread_id = %(thread)s AND NOT is_directory),
    (SELECT count(*) FROM {event} WHERE thread_id = %(thread)s),
    (SELECT coalesce(sum(octet_length(payload::text) + coalesce(octet_length(refs::text), 0)), 0)
        FROM {event} WHERE thread_id = %(thread)s),
    (SELECT count(*) FROM {log} WHERE thread_id = %(thread)s),
    (SELECT coalesce(sum(octet_length(data::text)), 0) FROM {log} WHERE thread_id = %(thread)s),
    (SELECT count(*) FROM {value} WHERE thread_id = %(thread)s),
    (SELECT coalesce(sum(size), 0) FROM {value} WHERE thread_id = %(thread)s)
"""


def thread_storage(*, thread: Thread) -> ThreadStorage:
    """``thread``'s storage report (the caller has resolved the thread in its tenant).
    Its own rows only: a child thread has its own report."""
    statement = _REPORT.format(
        message=_table(Message), file=_table(ThreadFile), event=_table(Event),
        log=_table(Log), value=_table(ThreadValue),
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(statement, {"thread": thread.pk})
        row = cursor.fetchone()
    assert row is not None
    figures = [int(value) for value in row]
    parts = [Usage(count=figures[i], bytes=figures[i + 1]) for i in range(0, len(figures), 2)]
    messages, files, events, logs, kv = parts
    return ThreadStorage(
        messages=messages, files=files, events=events, logs=logs, kv=kv,
        events_pruned_through=event_pruned_through(thread=thread),
    )  # fmt: skip
