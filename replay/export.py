"""The portable export of a thread or a session (agent-runtime-events ``export_replay`` /
``export_evidence``): JSON lines, each a record with a ``kind``.

``header`` first (the format, the scope, when), then ``thread`` (each thread of the scope
with its stored fields), ``definition`` (the definitions in force, :mod:`replay.definitions`),
then per thread its ``event`` records (the stored envelopes in sequence order, as the events
API shows them), ``message``, ``log`` (a log row's own kind is ``log_kind``) and ``file``
records (a file's manifest: path, size, sha256 and MIME type, never its bytes), and ``end``
last with the count of each kind.

Every table is read in keyset pages of :data:`PAGE` rows, so an export never holds a long
thread in memory; a consumer that sees no ``end`` record knows the export was cut short.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, Q, QuerySet

from common.errors import NotFound
from common.time import now_us
from replay.definitions import definitions_in_force
from tenancy.models import Tenant
from threads.events import SCHEMA_VERSION, session_id_of
from threads.models import Log, Message, Thread, ThreadFile
from threads.services.events import MAX_PAGE, event_envelopes, event_pruned_through
from threads.services.files import file_read_stream
from threads.services.logs import log_json
from threads.services.message_shapes import message_answer
from threads.services.threads import thread_get

R = TypeVar("R", bound=Model)

FORMAT = "standard-agents-replay/1"
PAGE = 500
# Lines gathered into one chunk of the HTTP stream.
LINES_PER_CHUNK = 200
THREAD, SESSION = "thread", "session"
KINDS = ("thread", "definition", "event", "message", "log", "file")


@dataclass(frozen=True)
class ExportScope:
    """What one export covers: ``thread`` (one thread) or ``session`` (a root thread and
    every thread below it), of ``tenant``; ``root`` is the thread the id names."""

    tenant: Tenant
    kind: str
    root: Thread


def export_scope_thread(*, tenant: Tenant, thread_id: uuid.UUID | str) -> ExportScope:
    """The export of ``tenant``'s thread ``thread_id``. Raises NotFound."""
    return ExportScope(tenant, THREAD, thread_get(tenant=tenant, thread_id=thread_id))


def export_scope_session(*, tenant: Tenant, session_id: uuid.UUID | str) -> ExportScope:
    """The export of ``tenant``'s session ``session_id`` (its root thread's id). Raises
    NotFound, naming the session when the id is a child thread's (as ``GET /sessions``)."""
    try:
        root = thread_get(tenant=tenant, thread_id=session_id)
    except NotFound as error:
        raise NotFound(f"no session {session_id}") from error
    if root.root_id is not None:
        raise NotFound(
            f"thread {root.pk} is not a session root; its session is {root.root_id}",
            details={"session_id": str(root.root_id)},
        )
    return ExportScope(tenant, SESSION, root)


def scope_threads(scope: ExportScope) -> Iterator[Thread]:
    """The scope's threads: the root first, then the rest of its session by creation."""
    yield scope.root
    if scope.kind != SESSION:
        return
    rows = Thread.objects.for_tenant(scope.tenant).filter(root_id=scope.root.pk)
    for thread in _keyset(rows, "created_at", "id"):
        Thread.tenant.field.set_cached_value(thread, scope.tenant)
        yield thread


def thread_record(thread: Thread) -> dict[str, Any]:
    """A ``thread`` record: the stored row (``status`` as stored, not the read model's
    refinement) and where its kept event log starts (``events_pruned_through``: the highest
    sequence retention deleted, 0 when none)."""
    return {
        "kind": "thread",
        "id": str(thread.pk),
        "session_id": session_id_of(thread),
        "parent_id": str(thread.parent_id) if thread.parent_id else None,
        "relationship": thread.parent_relationship or None,
        "agent": thread.agent_name,
        "origin_agent": thread.origin_agent_name,
        "user_id": thread.user_id or None,
        "arguments": thread.arguments,
        "tags": thread.tags,
        "metadata": thread.metadata,
        "status": thread.status,
        "rest_status": thread.rest_status,
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "last_activity_at": thread.last_activity_at,
        "terminated_at": thread.terminated_at,
        "events_pruned_through": event_pruned_through(thread=thread),
    }


def export_records(scope: ExportScope) -> Iterator[dict[str, Any]]:
    """The scope's records, ``header`` to ``end`` (see the module docstring)."""
    counts: Counter[str] = Counter(dict.fromkeys(KINDS, 0))
    key = "session_id" if scope.kind == SESSION else "thread_id"
    yield {
        "kind": "header", "format": FORMAT, key: str(scope.root.pk),
        "tenant_id": str(scope.tenant.pk), "exported_at": now_us(),
        "schema_version": SCHEMA_VERSION,
    }  # fmt: skip
    agents: dict[str, None] = {}
    for thread in scope_threads(scope):
        agents.update({thread.origin_agent_name: None, thread.agent_name: None})
        counts["thread"] += 1
        yield thread_record(thread)
    for definition in definitions_in_force(tenant=scope.tenant, agent_names=agents):
        counts["definition"] += 1
        yield definition.as_json()
    for thread in scope_threads(scope):
        for kind, record in _thread_records(thread):
            counts[kind] += 1
            yield record
    yield {"kind": "end", "counts": dict(counts)}


def _thread_records(thread: Thread) -> Iterator[tuple[str, dict[str, Any]]]:
    thread_id = str(thread.pk)
    for envelope in thread_events(thread):
        yield "event", {"kind": "event", **envelope}
    for message in _messages(thread):
        yield "message", {"kind": "message", "thread_id": thread_id, **message_answer(message)}
    for log in _logs(thread):
        # The row's own ``kind`` (``llm``, ``tool``, …) is ``log_kind`` beside the record's.
        yield "log", {**log_json(log), "kind": "log", "log_kind": log.kind, "thread_id": thread_id}
    for row in _files(thread):
        yield "file", {
            "kind": "file", "thread_id": thread_id, "path": row.path, "size": row.size,
            "sha256": _sha256(thread, row.path), "mime_type": row.mime_type,
        }  # fmt: skip


def thread_events(thread: Thread) -> Iterator[dict[str, Any]]:
    """The thread's stored event envelopes in sequence order, a page at a time."""
    after = 0
    while True:
        page = event_envelopes(thread=thread, after=after, limit=MAX_PAGE)
        yield from page
        if len(page) < MAX_PAGE:
            return
        after = page[-1]["sequence"]


def _messages(thread: Thread) -> Iterator[Message]:
    return _keyset(Message.objects.for_tenant(thread.tenant).filter(thread_id=thread.pk), "seq")


def _logs(thread: Thread) -> Iterator[Log]:
    rows = Log.objects.for_tenant(thread.tenant).filter(thread_id=thread.pk)
    return _keyset(rows, "created_at", "id")


def _files(thread: Thread) -> Iterator[ThreadFile]:
    rows = ThreadFile.objects.for_tenant(thread.tenant).filter(
        thread_id=thread.pk, is_directory=False
    )
    return _keyset(rows, "path")


def _keyset(rows: QuerySet[R], *fields: str) -> Iterator[R]:
    """``rows`` in ``fields`` order (unique together), :data:`PAGE` at a time: each page
    starts after the last row's ``fields``, so no page is read with an offset."""
    last: tuple[Any, ...] | None = None
    while True:
        page = rows if last is None else rows.filter(_after(fields, last))
        found = list(page.order_by(*fields)[:PAGE])
        yield from found
        if len(found) < PAGE:
            return
        last = tuple(getattr(found[-1], field) for field in fields)


def _after(fields: tuple[str, ...], last: tuple[Any, ...]) -> Q:
    """``(fields) > (last)`` in order: the first field greater, or equal and the rest after."""
    after = Q(**{f"{fields[-1]}__gt": last[-1]})
    for field, value in zip(fields[-2::-1], last[-2::-1], strict=True):
        after = Q(**{f"{field}__gt": value}) | (Q(**{field: value}) & after)
    return after


def _sha256(thread: Thread, path: str) -> str | None:
    """The file's content hash, read from storage in chunks; None when it went meanwhile."""
    chunks = file_read_stream(thread=thread, path=path)
    if chunks is None:
        return None
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.data)
    return digest.hexdigest()


def record_line(record: dict[str, Any]) -> str:
    """One record as one line of JSON."""
    return json.dumps(record, cls=DjangoJSONEncoder, separators=(",", ":")) + "\n"


def export_chunks(scope: ExportScope) -> Iterator[bytes]:
    """The export as JSON lines, :data:`LINES_PER_CHUNK` to a chunk."""
    lines: list[str] = []
    for record in export_records(scope):
        lines.append(record_line(record))
        if len(lines) >= LINES_PER_CHUNK:
            yield "".join(lines).encode()
            lines = []
    if lines:
        yield "".join(lines).encode()
