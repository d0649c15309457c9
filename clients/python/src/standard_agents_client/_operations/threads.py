"""Threads and their messages."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from standard_agents_client._call import (
    Call,
    body,
    idempotency,
    query,
    read_json,
    read_nothing,
    read_page,
    segment,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import (
    CodeResult,
    Message,
    MessageRole,
    Queued,
    Thread,
    ThreadCreated,
    ThreadDeleted,
    ThreadRead,
    ThreadStopped,
    ThreadTerminated,
    ThreadWait,
)

# run-code ends code still running after 10 s; the call may also wait for a runner.
RUN_CODE_TIMEOUT_S = 60.0
# A wait's answer may come this long after the wait's own timeout (the server's last
# read, the network).
WAIT_MARGIN_S = 30.0

EnvValue = str | Mapping[str, str]
"""An env value to set: ``"value"``, or ``{"value": "...", "type": "text" | "secret"}``."""


def attachment(
    name: str,
    data: bytes,
    mime_type: str,
    *,
    width: int | None = None,
    height: int | None = None,
) -> dict[str, Any]:
    """A message attachment from bytes (sent base64-encoded, as the API takes it)."""
    return body(
        name=name, mimeType=mime_type, data=base64.b64encode(data).decode("ascii"),
        width=width, height=height,
    )  # fmt: skip


# Threads --------------------------------------------------------------------------------------


FirstInput = str | Mapping[str, Any]
"""A new thread's first message: its content, or ``{"content", "role"?, "attachments"?,
"silent"?, "metadata"?}`` as ``turns.submit`` sends it."""


def _create_body(
    agent: str,
    title: str | None,
    user_id: str | None,
    tags: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    env: Mapping[str, EnvValue] | None,
    input: FirstInput | None,
) -> dict[str, Any]:
    return body(
        agent=agent, title=title, user_id=user_id, tags=list(tags) if tags is not None else None,
        metadata=metadata, env=env, input={"content": input} if isinstance(input, str) else input,
    )  # fmt: skip


def thread_create(
    agent: str,
    *,
    title: str | None = None,
    user_id: str | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    env: Mapping[str, EnvValue] | None = None,
    input: FirstInput | None = None,
    idempotency_key: str | None = None,
) -> Call[ThreadCreated]:
    """Create a thread of ``agent``. ``env`` values are write-only; every variable the
    agent's graph requires must resolve (else a ``ValidationError`` naming each). With
    ``input`` its first turn is queued with it (the answer's ``turn``); a refused input
    creates no thread. A repeat with the same ``idempotency_key`` answers the first thread
    instead of a second. Without a ``title`` the thread reads as its first user message's
    first line."""
    payload = _create_body(agent, title, user_id, tags, metadata, env, input)
    return Call("POST", "/threads", read_json, json=payload, headers=idempotency(idempotency_key))


def thread_create_and_wait(
    agent: str,
    input: FirstInput,
    *,
    timeout: float = 30.0,
    title: str | None = None,
    user_id: str | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    env: Mapping[str, EnvValue] | None = None,
    idempotency_key: str | None = None,
) -> Call[ThreadWait]:
    """Create a thread with its first turn and wait for the turn in one request, up to
    ``timeout`` seconds (at most 600): the thread, the turn, the messages it wrote and
    ``done`` (false when the timeout passed first, or when the turn waits on a person). A
    repeat with the same ``idempotency_key`` creates nothing and waits for the first
    request's turn."""
    payload = _create_body(agent, title, user_id, tags, metadata, env, input)
    return Call(
        "POST", "/threads/wait", read_json, params=query(timeout=timeout), json=payload,
        headers=idempotency(idempotency_key), timeout=timeout + WAIT_MARGIN_S,
    )  # fmt: skip


def thread_get(thread_id: str) -> Call[ThreadRead]:
    """The thread with its read model: status, active and queued turns, last outcome,
    pending requests, incidents and counts."""
    return Call("GET", f"/threads/{segment(thread_id)}", read_json)


def thread_list(
    *,
    agent: str | None = None,
    user_id: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Thread]]:
    """The tenant's threads, newest first, filtered by agent, user, status, tag or
    creation time."""
    params = query(
        agent=agent, user_id=user_id, status=status, tag=tag, created_after=created_after,
        created_before=created_before, limit=limit, cursor=cursor,
    )  # fmt: skip
    return Call("GET", "/threads", read_page, params)


def thread_update(
    thread_id: str,
    *,
    title: str | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Call[Thread]:
    """Replace the thread's title (``""`` clears it), tags and/or metadata."""
    payload = body(title=title, tags=list(tags) if tags is not None else None, metadata=metadata)
    return Call("PATCH", f"/threads/{segment(thread_id)}", read_json, json=payload)


def thread_delete(thread_id: str) -> Call[ThreadDeleted]:
    """Delete the thread, its children, files and every row."""
    return Call("DELETE", f"/threads/{segment(thread_id)}", read_json)


def thread_stop(thread_id: str) -> Call[ThreadStopped]:
    """Stop the running turn (it ends cancelled); waiting turns are parked until the next
    user message. With nothing running or waiting, nothing changes."""
    return Call("POST", f"/threads/{segment(thread_id)}/stop", read_json)


def thread_terminate(thread_id: str) -> Call[ThreadTerminated]:
    """Soft-terminate the thread: in-flight work is aborted, waiting work dropped, later
    sends and writes are refused (``Conflict``, code ``terminated``). Idempotent."""
    return Call("POST", f"/threads/{segment(thread_id)}/terminate", read_json)


def thread_continue(
    thread_id: str, *, side: Literal["a", "b"] | None = None, idempotency_key: str | None = None
) -> Call[Queued]:
    """Let ``side`` (default ``a``) take a turn without a new message (queued at once)."""
    return Call(
        "POST", f"/threads/{segment(thread_id)}/continue", read_json,
        json=body(side=side), headers=idempotency(idempotency_key),
    )  # fmt: skip


def thread_run_code(
    thread_id: str, source: str, *, options: Mapping[str, Any] | None = None
) -> Call[CodeResult]:
    """Run code in the sandbox at rest with run_code's JSON-safe ``options``
    (``language``, ``filename``, ``report: true``, ...). A tenant runs one call at once:
    another is ``RateLimited`` (see ``retry_after``)."""
    return Call(
        "POST", f"/threads/{segment(thread_id)}/run-code", read_json,
        json=body(source=source, options=options), timeout=RUN_CODE_TIMEOUT_S,
    )  # fmt: skip


# Messages -------------------------------------------------------------------------------------


def message_list(
    thread_id: str,
    *,
    order: Literal["asc", "desc"] | None = None,
    include_silent: bool | None = None,
    depth: int | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Message]]:
    """The thread's messages; ``include_silent`` adds silent ones, ``depth`` those of
    subprompts down to that depth."""
    params = query(
        order=order, include_silent=include_silent, depth=depth, limit=limit, cursor=cursor
    )
    return Call("GET", f"/threads/{segment(thread_id)}/messages", read_page, params)


def message_input(
    content: str | None,
    role: MessageRole | None,
    attachments: Sequence[Mapping[str, Any]] | None,
    silent: bool | None,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return body(
        content=content, role=role, silent=silent, metadata=metadata,
        attachments=list(attachments) if attachments is not None else None,
    )  # fmt: skip


def message_send(
    thread_id: str,
    content: str | None,
    *,
    role: MessageRole | None = None,
    attachments: Sequence[Mapping[str, Any]] | None = None,
    silent: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[Queued]:
    """Queue a message as a turn that runs the agent (answered at once, the turn
    queued). ``attachments``: see :func:`attachment`."""
    return Call(
        "POST", f"/threads/{segment(thread_id)}/messages", read_json,
        json=message_input(content, role, attachments, silent, metadata),
        headers=idempotency(idempotency_key),
    )  # fmt: skip


def message_inject(
    thread_id: str,
    content: str | None,
    *,
    role: MessageRole,
    silent: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Call[Message]:
    """Store a message without running anything."""
    payload = {"role": role, "content": content, **body(silent=silent, metadata=metadata)}
    return Call("POST", f"/threads/{segment(thread_id)}/messages/inject", read_json, json=payload)


def message_get(thread_id: str, message_id: str) -> Call[Message]:
    """One message of the thread."""
    return Call("GET", f"/threads/{segment(thread_id)}/messages/{segment(message_id)}", read_json)


def message_update(
    thread_id: str,
    message_id: str,
    *,
    content: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Call[Message]:
    """Change a message's content and/or metadata (metadata is merged)."""
    path = f"/threads/{segment(thread_id)}/messages/{segment(message_id)}"
    return Call("PATCH", path, read_json, json=body(content=content, metadata=metadata))


def message_delete(thread_id: str, message_id: str) -> Call[None]:
    """Delete a message."""
    path = f"/threads/{segment(thread_id)}/messages/{segment(message_id)}"
    return Call("DELETE", path, read_nothing)
