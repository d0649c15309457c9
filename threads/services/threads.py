"""Threads: create, read, list, update, delete."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from agents.selectors import agent_load
from common.errors import NotFound, ValidationFailed
from common.ids import id_of
from common.rows import columns_of
from common.time import now_us, to_us
from tenancy.models import Tenant
from threads.events import publish
from threads.models import Message, MessageRole, RunStatus, Thread, Turn
from threads.models.threads import TITLE_MAX
from threads.services.env import EnvInput, thread_env_set
from threads.services.files import file_delete_all
from threads.services.turns import threads_in_status

MAX_TAGS = 50
MAX_TAG_CHARS = 100
# A title derived from a thread's first user message: its first line, at most this long.
DERIVED_TITLE_CHARS = 80


def thread_get(*, tenant: Tenant, thread_id: uuid.UUID | str) -> Thread:
    """``tenant``'s thread (``tenant`` attached); another tenant's (or a malformed id) is
    NotFound. Every thread-scoped request reads it: one hand-written statement
    (:mod:`common.rows`), scoped to the tenant as ``for_tenant`` scopes."""
    try:
        key = id_of(thread_id)
    except ValueError as error:
        raise NotFound(f"no thread {thread_id}") from error
    threads = columns_of(Thread)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {threads.sql} FROM threads_thread WHERE id = %s AND tenant_id = %s",  # noqa: S608
            [key, tenant.pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound(f"no thread {thread_id}")
    thread = threads.build(row)
    Thread.tenant.field.set_cached_value(thread, tenant)
    return thread


def _tags(tags: Sequence[str]) -> list[str]:
    if isinstance(tags, str) or not all(isinstance(tag, str) for tag in tags):
        raise ValidationFailed("tags must be a list of strings", field="tags")
    if len(tags) > MAX_TAGS:
        raise ValidationFailed(f"at most {MAX_TAGS} tags", field="tags")
    for index, tag in enumerate(tags):
        if not tag.strip() or len(tag) > MAX_TAG_CHARS:
            raise ValidationFailed(
                f"tags must be 1-{MAX_TAG_CHARS} characters", field=f"tags[{index}]"
            )
    return list(dict.fromkeys(tags))


def _title(title: str) -> str:
    if not isinstance(title, str):
        raise ValidationFailed("title must be a string", field="title")
    title = " ".join(title.split())
    if len(title) > TITLE_MAX:
        raise ValidationFailed(f"title must be at most {TITLE_MAX} characters", field="title")
    return title


def thread_titles(*, threads: Sequence[Thread]) -> dict[uuid.UUID, str]:
    """Each thread's title: the one it was given, else the first line of its first top-level
    user message (cut at :data:`DERIVED_TITLE_CHARS`), else none (left out). One query for
    the threads without a title of their own."""
    titles = {thread.pk: thread.title for thread in threads if thread.title}
    untitled = [thread.pk for thread in threads if not thread.title]
    if untitled:
        firsts = (
            Message.objects.filter(
                thread_id__in=untitled, role=MessageRole.USER, depth=0, silent=False
            )
            .exclude(content__isnull=True)
            .exclude(content="")
            .order_by("thread_id", "seq")
            .distinct("thread_id")
            .values_list("thread_id", "content")
        )
        for thread_id, content in firsts:
            lines = (content or "").splitlines()
            line = next((part.strip() for part in lines if part.strip()), "")
            if len(line) > DERIVED_TITLE_CHARS:
                line = line[: DERIVED_TITLE_CHARS - 1].rstrip() + "…"
            if line:
                titles[thread_id] = line
    return titles


def threads_started(*, threads: Sequence[Thread]) -> set[uuid.UUID]:
    """The threads among ``threads`` a turn was ever submitted to (one query). A thread
    outside it never ran: its stored status is the initial ``completed``, which is not an
    outcome."""
    ids = [thread.pk for thread in threads]
    if not ids:
        return set()
    found = Turn.objects.filter(thread_id__in=ids).order_by().values_list("thread_id", flat=True)
    return set(found.distinct())


@transaction.atomic(savepoint=False)  # a failure rolls back the caller's block: no savepoint needed
def thread_create(
    *,
    tenant: Tenant,
    agent_name: str,
    user_id: str = "",
    title: str = "",
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    env: Mapping[str, EnvInput] | None = None,
    parent: Thread | None = None,
    relationship: str = "",
    arguments: Any = None,
) -> Thread:
    """A new thread of ``agent_name`` (which must exist: ValidationFailed naming ``agent``);
    with ``parent``, a child thread (a subagent: its ``relationship`` and initial
    ``arguments``) in the parent's session.
    Its ``after_thread_created`` hooks are the runtime's to run
    (``threads.runtime.lifecycle.thread_open``)."""
    try:
        agent_load(tenant=tenant, name=agent_name)
    except NotFound as error:
        raise ValidationFailed(f"no agent named {agent_name!r}", field="agent") from error
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValidationFailed("metadata must be an object", field="metadata")
    # No signal receivers listen to threads: the row goes in by hand (common.rows).
    thread = columns_of(Thread).insert(Thread(
        tenant=tenant,
        agent_name=agent_name,
        origin_agent_name=agent_name,
        user_id=user_id,
        title=_title(title),
        tags=_tags(tags),
        metadata=dict(metadata or {}),
        parent=parent,
        root_id=(parent.root_id or parent.pk) if parent is not None else None,
        parent_relationship=relationship,
        arguments=arguments,
    ))  # fmt: skip
    for name, item in (env or {}).items():
        thread_env_set(thread=thread, name=name, value=item.value, type=item.type)
    publish(thread, "thread.created", {"id": str(thread.id), "agent": thread.agent_name})
    return thread


def thread_list(
    *,
    tenant: Tenant,
    agent: str | None = None,
    user_id: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    search: str | None = None,
) -> QuerySet[Thread]:
    """The tenant's threads, newest first (ties by id, so pages by keyset are stable).
    ``search`` matches a thread id, or part of its title (the one it was given), agent's
    name or user id, or one of its tags exactly.

    ``status`` is the read model's, applied after the other filters: a status only a read
    can know is looked for among the newest candidates that pass them
    (:func:`threads_in_status`)."""
    rows: QuerySet[Thread] = Thread.objects.for_tenant(tenant)
    if agent:
        rows = rows.filter(agent_name=agent)
    if user_id:
        rows = rows.filter(user_id=user_id)
    if tag:
        rows = rows.filter(tags__contains=[tag])
    if created_after is not None:
        rows = rows.filter(created_at__gte=to_us(created_after))
    if created_before is not None:
        rows = rows.filter(created_at__lt=to_us(created_before))
    if search and search.strip():
        rows = rows.filter(_matching(search.strip()))
    if status:
        if status not in RunStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(RunStatus.values)}", field="status"
            )
        rows = threads_in_status(rows, status)
    return rows.order_by("-created_at", "-id")


def _matching(text: str) -> Q:
    found = (
        Q(title__icontains=text)
        | Q(agent_name__icontains=text)
        | Q(user_id__icontains=text)
        | Q(tags__contains=[text])
    )
    try:
        return found | Q(id=id_of(text))
    except ValueError:
        return found


# Four index scans in one statement (joining the four tables would multiply their rows).
_COUNTS = (
    "SELECT (SELECT count(*) FROM threads_message WHERE thread_id = %(id)s), "
    "(SELECT count(*) FROM threads_log WHERE thread_id = %(id)s), "
    "(SELECT count(*) FROM threads_threadfile WHERE thread_id = %(id)s), "
    "(SELECT count(*) FROM threads_thread WHERE parent_id = %(id)s)"
)


# The counts of a thread nothing has written to yet.
NO_COUNTS: Final = MappingProxyType({"messages": 0, "logs": 0, "files": 0, "children": 0})


def thread_counts(*, thread: Thread) -> dict[str, int]:
    """How many messages, logs, files and children the thread has."""
    with connection.cursor() as cursor:
        cursor.execute(_COUNTS, {"id": thread.pk})
        messages, logs, files, children = cursor.fetchone()
    return {"messages": messages, "logs": logs, "files": files, "children": children}


@transaction.atomic
def thread_update(
    *,
    thread: Thread,
    title: str | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Thread:
    """Replace the title (blank: derived again), tags and/or metadata."""
    if title is not None:
        thread.title = _title(title)
    if tags is not None:
        thread.tags = _tags(tags)
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise ValidationFailed("metadata must be an object", field="metadata")
        thread.metadata = dict(metadata)
    thread.updated_at = now_us()
    thread.save(update_fields=["title", "tags", "metadata", "updated_at"])
    changed = [name for name, value in (("title", title), ("tags", tags),
                                        ("metadata", metadata)) if value is not None]  # fmt: skip
    publish(thread, "thread.updated", {"id": str(thread.id), "fields": changed})
    return thread


def _descendants(thread: Thread) -> list[Thread]:
    found: list[Thread] = []
    frontier = [thread]
    while frontier:
        children = list(Thread.objects.filter(parent__in=frontier))
        found.extend(children)
        frontier = children
    return found


@transaction.atomic
def thread_delete(*, thread: Thread) -> int:
    """Delete a thread, its child threads and all their rows and stored files.

    Returns how many threads were deleted. Stored bytes are removed after commit,
    so a rolled-back delete loses nothing.
    """
    # Stand-ins made before delete(): callbacks must not depend on what delete() leaves on
    # the deleted instances, only on the ids that say where their bytes live.
    doomed = [Thread(id=row.id, tenant_id=row.tenant_id) for row in [thread, *_descendants(thread)]]
    thread.delete()  # rows of children and everything owned cascade
    for gone in doomed:
        transaction.on_commit(lambda gone=gone: file_delete_all(thread=gone), robust=True)  # type: ignore[misc]
    root = doomed[0]
    transaction.on_commit(
        lambda: publish(root, "thread.deleted", {"id": str(root.id)}), robust=True
    )
    return len(doomed)
